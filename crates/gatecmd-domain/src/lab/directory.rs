//! The lab's directory: what the labgrid coordinator says of every exporter's resources and
//! of the places over them. The labgrid bridge (`src/lab/session.rs`) writes it from its
//! client stream (subscribed to all places and all resources); the lab surfaces read it to
//! find boards (`HOST/BOARD`, its tags, free or whose) before they reach the host that has
//! them through its peer link. Everything in it comes from the coordinator, whose clients
//! are unauthenticated: names are cleaned and bounded here, and the tables are capped, so
//! no coordinator (or anyone who registers with it) grows this host's memory without bound.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

use gatecmd_core::output::one_line;

/// At most this many resources are kept (a lab of 100 hosts × 40 boards × 3 resources is
/// 12,000); past it a new one is ignored and the directory says it is truncated.
pub const MAX_RESOURCES: usize = 16_384;
/// At most this many places are kept.
pub const MAX_PLACES: usize = 8_192;
/// At most this many tags per board or place are kept.
const MAX_TAGS: usize = 32;
/// A name (exporter, group, place, user, token) as kept: one clean line of at most this.
const NAME_CHARS: usize = 128;

/// One resource as the coordinator lists it (the parts the directory reads).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceSeen {
    /// Whether the exporter offers it now (a gatecmd exporter says no while an agent holds
    /// the board, or its device is away).
    pub avail: bool,
    /// The place it is acquired for, if any.
    pub acquired: Option<String>,
    /// Whether a gatecmd exporter published it (`extra.gatecmd`): only those are boards an
    /// agent can reach through a peer.
    pub gatecmd: bool,
    /// Why a gatecmd exporter refuses it to labgrid (`extra.held_by`: the agent holding it).
    pub held_by: Option<String>,
    /// The board's tags, as its host configured them (`extra.tag.KEY`).
    pub tags: BTreeMap<String, String>,
}

/// One place as the coordinator lists it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlaceSeen {
    pub tags: BTreeMap<String, String>,
    /// Its resource matches as (exporter, group) fnmatch patterns.
    pub matches: Vec<(String, String)>,
    /// `HOST/USER` who acquired it.
    pub acquired: Option<String>,
    /// The token of the reservation labgrid's scheduler allocated it to.
    pub reservation: Option<String>,
}

/// Who has a board of the lab, as the coordinator shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[serde(tag = "by", rename_all = "snake_case")]
pub enum Taken {
    /// An agent's lease on its host (the host's words).
    Agent { held_by: String },
    /// A labgrid place over it is acquired (a person, or an agent's mirrored lease).
    Place { place: String, acquired_by: String },
    /// A labgrid place over it is allocated to a reservation (not acquired yet).
    Reserved { place: String, reservation: String },
    /// Its host does not offer it now (its device is away) or a resource is acquired.
    Unavailable,
}

/// A gatecmd board of the lab: an exporter's group whose resources a gatecmd published.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct LabBoard {
    /// The exporter's name: the `HOST` of `HOST/BOARD`.
    pub host: String,
    /// The group's name: the board's name on its host.
    pub board: String,
    /// The board's tags as its host configured them.
    pub tags: BTreeMap<String, String>,
    /// The labgrid place over it, if one matches it, and that place's tags.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub place: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub place_tags: BTreeMap<String, String>,
    /// Who has it, if anyone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub taken: Option<Taken>,
}

/// Whether the directory is current.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct DirectoryStatus {
    /// The coordinator's address.
    pub coordinator: String,
    /// Whether this host is connected and has the coordinator's listing now.
    pub up: bool,
    /// Why not, when it is not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Seconds since the listing was last current (while `up` is false), if ever it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale_secs: Option<u64>,
    /// Whether a cap dropped resources or places.
    pub truncated: bool,
}

#[derive(Default)]
struct Inner {
    coordinator: String,
    up: bool,
    error: Option<String>,
    /// When the listing stopped being current.
    down_since: Option<Instant>,
    /// Whether the listing was ever current.
    ever: bool,
    truncated: bool,
    resources: Resources,
    places: Places,
    /// A session's listing in progress: the tables it is filling, swapped in at its end.
    next: Option<(Resources, Places)>,
}

/// Resources by (exporter, group, name).
type Resources = BTreeMap<(String, String, String), ResourceSeen>;
/// Places by name.
type Places = BTreeMap<String, PlaceSeen>;

/// The lab's directory (see the module's doc). A `std` mutex: map work only, never held
/// across an await.
#[derive(Default)]
pub struct Directory {
    inner: Mutex<Inner>,
}

fn clean(s: &str) -> String {
    one_line(s, NAME_CHARS)
}

fn clean_tags(tags: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    tags.iter()
        .take(MAX_TAGS)
        .map(|(k, v)| (clean(k), clean(v)))
        .collect()
}

impl Directory {
    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut g)
    }

    /// A session to `coordinator` begins its listing: updates go to a new table, which
    /// replaces the last one at [`Directory::listed`]; until then the last listing stands
    /// (marked stale).
    pub fn listing(&self, coordinator: &str) {
        self.with(|i| {
            i.coordinator = clean(coordinator);
            i.next = Some(Default::default());
        });
    }

    /// The session's first listing is complete: the directory is current.
    pub fn listed(&self) {
        self.with(|i| {
            if let Some((r, p)) = i.next.take() {
                i.resources = r;
                i.places = p;
            }
            i.up = true;
            i.ever = true;
            i.error = None;
            i.down_since = None;
        });
    }

    /// The coordinator is not reachable (`why`); what was listed stays, marked stale.
    pub fn down(&self, coordinator: &str, why: &str) {
        self.with(|i| {
            i.coordinator = clean(coordinator);
            if i.up || i.down_since.is_none() {
                i.down_since = Some(Instant::now());
            }
            i.up = false;
            i.next = None;
            i.error = Some(one_line(why, 300));
        });
    }

    /// A resource listed or changed.
    pub fn resource(&self, exporter: &str, group: &str, name: &str, seen: ResourceSeen) {
        let key = (clean(exporter), clean(group), clean(name));
        let seen = ResourceSeen {
            acquired: seen.acquired.as_deref().map(clean),
            held_by: seen.held_by.as_deref().map(|h| one_line(h, 300)),
            tags: clean_tags(&seen.tags),
            ..seen
        };
        self.with(|i| {
            let truncated = &mut i.truncated;
            let table = match i.next.as_mut() {
                Some((r, _)) => r,
                None => &mut i.resources,
            };
            if table.len() >= MAX_RESOURCES && !table.contains_key(&key) {
                *truncated = true;
                return;
            }
            table.insert(key, seen);
        });
    }

    /// A resource gone.
    pub fn del_resource(&self, exporter: &str, group: &str, name: &str) {
        let key = (clean(exporter), clean(group), clean(name));
        self.with(|i| {
            let table = match i.next.as_mut() {
                Some((r, _)) => r,
                None => &mut i.resources,
            };
            table.remove(&key);
        });
    }

    /// A place listed or changed.
    pub fn place(&self, name: &str, seen: PlaceSeen) {
        let name = clean(name);
        let seen = PlaceSeen {
            tags: clean_tags(&seen.tags),
            matches: (seen.matches.iter())
                .take(MAX_TAGS)
                .map(|(e, g)| (clean(e), clean(g)))
                .collect(),
            acquired: seen.acquired.as_deref().map(clean),
            reservation: seen.reservation.as_deref().map(clean),
        };
        self.with(|i| {
            let truncated = &mut i.truncated;
            let table = match i.next.as_mut() {
                Some((_, p)) => p,
                None => &mut i.places,
            };
            if table.len() >= MAX_PLACES && !table.contains_key(&name) {
                *truncated = true;
                return;
            }
            table.insert(name, seen);
        });
    }

    /// A place gone.
    pub fn del_place(&self, name: &str) {
        let name = clean(name);
        self.with(|i| {
            let table = match i.next.as_mut() {
                Some((_, p)) => p,
                None => &mut i.places,
            };
            table.remove(&name);
        });
    }

    /// Whether the directory is current, and why not.
    pub fn status(&self) -> DirectoryStatus {
        self.with(|i| DirectoryStatus {
            coordinator: i.coordinator.clone(),
            up: i.up,
            error: if i.up {
                None
            } else {
                Some(
                    i.error
                        .clone()
                        .unwrap_or_else(|| "not connected to the coordinator yet".into()),
                )
            },
            stale_secs: (!i.up && i.ever)
                .then(|| i.down_since.map(|t| t.elapsed().as_secs()))
                .flatten(),
            truncated: i.truncated,
        })
    }

    /// Every gatecmd board of the lab (by host, then board), with the place over it.
    pub fn boards(&self) -> Vec<LabBoard> {
        self.with(|i| {
            let mut groups: BTreeMap<(&str, &str), Vec<&ResourceSeen>> = BTreeMap::new();
            for ((e, g, _), r) in &i.resources {
                groups.entry((e.as_str(), g.as_str())).or_default().push(r);
            }
            groups
                .into_iter()
                .filter(|(_, rs)| rs.iter().any(|r| r.gatecmd))
                .map(|((host, board), rs)| {
                    let place = i.places.iter().find(|(_, p)| {
                        p.matches
                            .iter()
                            .any(|(e, g)| fnmatch(e, host) && fnmatch(g, board))
                    });
                    LabBoard {
                        host: host.to_string(),
                        board: board.to_string(),
                        tags: rs
                            .iter()
                            .find(|r| r.gatecmd)
                            .map(|r| r.tags.clone())
                            .unwrap_or_default(),
                        place: place.map(|(n, _)| n.clone()),
                        place_tags: place.map(|(_, p)| p.tags.clone()).unwrap_or_default(),
                        taken: taken(&rs, place),
                    }
                })
                .collect()
        })
    }
}

/// Who has a board, from its resources and the place over it: an agent's hold (the host
/// publishes it as `held_by`) first, then the place's acquisition, its reservation, then
/// a resource not offered or acquired.
fn taken(rs: &[&ResourceSeen], place: Option<(&String, &PlaceSeen)>) -> Option<Taken> {
    if let Some(h) = rs.iter().find_map(|r| r.held_by.clone()) {
        return Some(Taken::Agent { held_by: h });
    }
    if let Some((name, p)) = place {
        if let Some(a) = &p.acquired {
            return Some(Taken::Place {
                place: name.clone(),
                acquired_by: a.clone(),
            });
        }
        if let Some(t) = &p.reservation {
            return Some(Taken::Reserved {
                place: name.clone(),
                reservation: t.clone(),
            });
        }
    }
    rs.iter()
        .any(|r| !r.avail || r.acquired.is_some())
        .then_some(Taken::Unavailable)
}

/// Shell-style matching as labgrid's place matches use it (`fnmatch`): `*` any run, `?`
/// one character, `[...]` a set (with `!` for its complement); anything else literally.
pub fn fnmatch(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    // Iterative with one backtrack point for `*`: linear in practice, no recursion.
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() {
            match p[pi] {
                '*' => {
                    star = Some((pi, ni));
                    pi += 1;
                    continue;
                }
                '?' => {
                    pi += 1;
                    ni += 1;
                    continue;
                }
                '[' => match set(&p, pi, n[ni]) {
                    Some((true, next)) => {
                        pi = next;
                        ni += 1;
                        continue;
                    }
                    // An unclosed `[` is itself.
                    None if n[ni] == '[' => {
                        pi += 1;
                        ni += 1;
                        continue;
                    }
                    _ => {}
                },
                c if c == n[ni] => {
                    pi += 1;
                    ni += 1;
                    continue;
                }
                _ => {}
            }
        }
        match star {
            Some((sp, sn)) => {
                pi = sp + 1;
                ni = sn + 1;
                star = Some((sp, sn + 1));
            }
            None => return false,
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// The set at `p[at] == '['`: whether `c` is in it, and the index after its `]`; `None`
/// when the `[` opens no set (no closing `]`), and it is a literal then.
fn set(p: &[char], at: usize, c: char) -> Option<(bool, usize)> {
    let mut i = at + 1;
    let negate = p.get(i) == Some(&'!');
    if negate {
        i += 1;
    }
    let start = i;
    let mut hit = false;
    while i < p.len() && (p[i] != ']' || i == start) {
        if p.get(i + 1) == Some(&'-') && p.get(i + 2).is_some_and(|&e| e != ']') {
            hit |= p[i] <= c && c <= p[i + 2];
            i += 3;
        } else {
            hit |= p[i] == c;
            i += 1;
        }
    }
    (i < p.len()).then_some((hit != negate, i + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn board_resource(tags: &[(&str, &str)]) -> ResourceSeen {
        ResourceSeen {
            avail: true,
            gatecmd: true,
            tags: tags
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn fnmatch_follows_labgrids_patterns() {
        assert!(fnmatch("*", "bench-2"));
        assert!(fnmatch("bench-*", "bench-2"));
        assert!(!fnmatch("bench-*", "desk"));
        assert!(fnmatch("b?", "b3"));
        assert!(fnmatch("b[0-9]", "b3"));
        assert!(!fnmatch("b[!0-9]", "b3"));
        assert!(fnmatch("*-1*", "rock5b-12"));
        assert!(!fnmatch("rock5b-1", "rock5b-12"));
        assert!(fnmatch("a[b", "a[b"));
    }

    #[test]
    fn a_listing_replaces_the_last_at_its_end_and_boards_show_place_and_holder() {
        let d = Directory::default();
        d.listing("coord:20408");
        d.resource("bench-2", "b2", "usb", board_resource(&[("soc", "rk3588")]));
        d.resource("bench-2", "b3", "usb", board_resource(&[]));
        // A plain labgrid exporter's group is no board of ours.
        d.resource(
            "desk",
            "lamp",
            "power",
            ResourceSeen {
                avail: true,
                ..Default::default()
            },
        );
        assert!(
            d.boards().is_empty(),
            "the listing is not in force before its end"
        );
        d.place(
            "p2",
            PlaceSeen {
                matches: vec![("bench-*".into(), "b2".into())],
                reservation: Some("TOKEN1".into()),
                tags: [("lab".to_string(), "x".to_string())].into(),
                ..Default::default()
            },
        );
        d.listed();
        let boards = d.boards();
        assert_eq!(boards.len(), 2, "{boards:?}");
        assert_eq!(
            (boards[0].host.as_str(), boards[0].board.as_str()),
            ("bench-2", "b2")
        );
        assert_eq!(boards[0].tags["soc"], "rk3588");
        assert_eq!(boards[0].place.as_deref(), Some("p2"));
        assert_eq!(
            boards[0].taken,
            Some(Taken::Reserved {
                place: "p2".into(),
                reservation: "TOKEN1".into()
            })
        );
        assert_eq!(boards[1].taken, None);
        // An agent's hold, published by the board's host, comes before the place.
        d.resource(
            "bench-2",
            "b3",
            "usb",
            ResourceSeen {
                held_by: Some("leased by vm-c".into()),
                ..board_resource(&[])
            },
        );
        assert!(matches!(d.boards()[1].taken, Some(Taken::Agent { .. })));
        d.del_resource("bench-2", "b3", "usb");
        assert_eq!(d.boards().len(), 1);
        // Down: the last listing stays, marked stale, with why.
        d.down("coord:20408", "connection refused");
        let s = d.status();
        assert!(
            !s.up && s.error.as_deref() == Some("connection refused"),
            "{s:?}"
        );
        assert_eq!(d.boards().len(), 1);
        // A new session's listing that never completes does not replace it.
        d.listing("coord:20408");
        d.resource("bench-9", "z", "usb", board_resource(&[]));
        assert_eq!(d.boards().len(), 1);
    }

    #[test]
    fn names_from_the_coordinator_are_cleaned_and_the_tables_capped() {
        let d = Directory::default();
        d.listing("c");
        d.listed();
        for n in 0..(MAX_RESOURCES + 5) {
            d.resource("h", &format!("g{n}"), "usb", board_resource(&[]));
        }
        assert!(d.status().truncated);
        assert_eq!(d.boards().len(), MAX_RESOURCES);
        d.resource("h\u{1b}[31m", "x", "usb", board_resource(&[]));
        assert!(d.boards().iter().all(|b| !b.host.contains('\u{1b}')));
    }
}
