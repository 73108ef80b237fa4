//! The coordinator's client-stream updates written into the lab's directory
//! (`gatecmd_domain::lab::Directory`): every exporter's resources and every place, as
//! labgrid's messages carry them, in the directory's own terms.

use gatecmd_domain::lab::{Directory, PlaceSeen, ResourceSeen};

use super::proto::{ClientOutMessage, MapKind, MapValue, Resource, Update};

/// The extra key prefix under which a gatecmd exporter publishes a board's tags
/// (`tag.soc: rk3588`), so that the other hosts find its boards by tag at the coordinator.
pub const TAG_PREFIX: &str = "tag.";

/// Writes one client-stream message's updates into `dir`.
pub fn feed(dir: &Directory, msg: &ClientOutMessage) {
    for u in &msg.updates {
        match &u.kind {
            Some(Update::Resource(r)) => {
                if let Some(p) = &r.path {
                    let exporter = p.exporter_name.as_deref().unwrap_or_default();
                    dir.resource(exporter, &p.group_name, &p.resource_name, seen(r));
                }
            }
            Some(Update::DelResource(p)) => {
                let exporter = p.exporter_name.as_deref().unwrap_or_default();
                dir.del_resource(exporter, &p.group_name, &p.resource_name);
            }
            Some(Update::Place(p)) => dir.place(
                &p.name,
                PlaceSeen {
                    tags: p.tags.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                    matches: (p.matches.iter())
                        .map(|m| (m.exporter.clone(), m.group.clone()))
                        .collect(),
                    // labgrid 26 sends a free place's `acquired` as "" (set, empty).
                    acquired: p.acquired.clone().filter(|a| !a.is_empty()),
                    reservation: p.reservation.clone().filter(|t| !t.is_empty()),
                },
            ),
            Some(Update::DelPlace(name)) => dir.del_place(name),
            None => {}
        }
    }
}

fn text(v: &MapValue) -> Option<&str> {
    match &v.kind {
        Some(MapKind::Text(t)) => Some(t),
        _ => None,
    }
}

fn seen(r: &Resource) -> ResourceSeen {
    ResourceSeen {
        avail: r.avail,
        acquired: Some(r.acquired.clone()).filter(|a| !a.is_empty()),
        gatecmd: r
            .extra
            .get("gatecmd")
            .is_some_and(|v| matches!(v.kind, Some(MapKind::Bool(true)))),
        held_by: r.extra.get("held_by").and_then(text).map(str::to_string),
        tags: (r.extra.iter())
            .filter_map(|(k, v)| {
                Some((
                    k.strip_prefix(TAG_PREFIX)?.to_string(),
                    text(v)?.to_string(),
                ))
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::proto::{ResourcePath, UpdateResponse};
    use std::collections::HashMap;

    #[test]
    fn a_gatecmd_resource_gives_a_board_with_its_tags_and_holder() {
        let dir = Directory::default();
        dir.listing("c:1");
        let r = Resource {
            path: Some(ResourcePath {
                exporter_name: Some("bench-2".into()),
                group_name: "b2".into(),
                resource_name: "usb".into(),
            }),
            extra: HashMap::from([
                ("gatecmd".to_string(), MapValue::boolean(true)),
                ("tag.soc".to_string(), MapValue::text("rk3588")),
                ("held_by".to_string(), MapValue::text("leased by vm-c")),
            ]),
            ..Resource::default()
        };
        feed(
            &dir,
            &ClientOutMessage {
                sync: None,
                updates: vec![UpdateResponse {
                    kind: Some(Update::Resource(r)),
                }],
            },
        );
        dir.listed();
        let b = dir.boards();
        assert_eq!(b.len(), 1);
        assert_eq!((b[0].host.as_str(), b[0].board.as_str()), ("bench-2", "b2"));
        assert_eq!(b[0].tags.get("soc").map(String::as_str), Some("rk3588"));
        assert!(matches!(
            &b[0].taken,
            Some(gatecmd_domain::lab::Taken::Agent { held_by }) if held_by == "leased by vm-c"
        ));
    }
}
