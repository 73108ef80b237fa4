//! The lab's boards as the coordinator lists them (`gatecmd_domain::lab::Directory`), joined
//! to what the peers answered: the coordinator is where boards are found (every gatecmd
//! exporter's boards, their tags, the places over them, people's acquisitions and
//! reservations), the peers are how they are reached. A board the coordinator lists is
//! shown even when its host does not answer or has no `labgrid.peers` entry here
//! (`reachable: false`, the host's error says which); a board a peer lists that the
//! coordinator does not (its exporter not registered) is shown with `in_directory: false`.

use serde_json::{Value, json};

use super::hosts::HostView;
use super::names::qualify;
use gatecmd_domain::lab::{LabBoard, Taken};
use gatecmd_domain::state::AppState;

/// Adds the directory's boards of other hosts to `boards` and `hosts` (what this host and
/// its peers answered), and marks each remote board with what the coordinator says of it.
/// Nothing when this host has no coordinator (`labgrid.coordinator` unset).
pub fn join(state: &AppState, here: &str, boards: &mut Vec<Value>, hosts: &mut Vec<HostView>) {
    if state.config().labgrid.is_none() {
        return;
    }
    let listed = state.lab.directory.boards();
    let up = state.lab.directory.status().up;
    for b in boards.iter_mut() {
        let host = b.get("host").and_then(Value::as_str).unwrap_or_default();
        if host == here {
            continue;
        }
        let name = b.get("name").and_then(Value::as_str).unwrap_or_default();
        let found = listed
            .iter()
            .find(|d| d.host == host && qualify(&d.host, &d.board) == name);
        b["in_directory"] = found.is_some().into();
        if let Some(d) = found {
            annotate(b, d);
        }
    }
    for d in listed.iter().filter(|d| d.host != here) {
        let name = qualify(&d.host, &d.board);
        if boards
            .iter()
            .any(|b| b.get("name").and_then(Value::as_str) == Some(name.as_str()))
        {
            continue;
        }
        let host = hosts.iter_mut().find(|h| h.host == d.host);
        let reachable = host.as_ref().is_some_and(|h| h.reachable);
        match host {
            Some(h) => h.boards += 1,
            None => hosts.push(HostView {
                host: d.host.clone(),
                reachable: false,
                error: Some(format!(
                    "no labgrid.peers entry for {} on this host: the coordinator lists its boards, but this host cannot reach them (docs/LAB.md, \"A three-host lab\")",
                    d.host
                )),
                boards: 1,
            }),
        }
        // `list_boards`'s shape, with what only the board's host knows left empty
        // (`usb` "", no device, console or power, flashing unknown so off).
        let mut b = json!({
            "name": name,
            "host": d.host,
            "reachable": reachable,
            "in_directory": true,
            "tags": d.tags,
            "usb": "",
            "device": null,
            "soc": d.tags.get("soc"),
            "family": null,
            "mode": null,
            "console": null,
            "power": null,
            "lock": lock_of(d.taken.as_ref()),
            "match_waiting": 0,
            "flash": {"enabled": false},
        });
        annotate(&mut b, d);
        boards.push(b);
    }
    if !up {
        for b in boards.iter_mut() {
            if b.get("in_directory") == Some(&Value::Bool(true)) {
                b["directory_stale"] = true.into();
            }
        }
    }
}

/// The coordinator's word on a board: its place, the place's tags, who has it there.
fn annotate(b: &mut Value, d: &LabBoard) {
    let mut l = json!({});
    if let Some(p) = &d.place {
        l["place"] = p.clone().into();
    }
    if !d.place_tags.is_empty() {
        l["place_tags"] = json!(d.place_tags);
    }
    if let Some(t) = &d.taken {
        l["taken"] = json!(t);
    }
    b["labgrid"] = l;
}

/// A `lock` as `list_boards` shows it, from the coordinator's word (for a board whose host
/// did not answer).
fn lock_of(taken: Option<&Taken>) -> Value {
    match taken {
        None => json!({"held": false}),
        Some(Taken::Agent { held_by }) => json!({"held": true, "note": held_by}),
        Some(Taken::Place { place, acquired_by }) => json!({
            "held": true,
            "holder": format!("labgrid:{place}"),
            "note": format!("labgrid place {place} acquired by {acquired_by}"),
        }),
        Some(Taken::Reserved { place, reservation }) => json!({
            "held": true,
            "holder": format!("labgrid:{place}"),
            "note": format!("labgrid place {place} reserved (reservation {reservation})"),
        }),
        Some(Taken::Unavailable) => json!({"held": true, "note": "not offered by its host now"}),
    }
}
