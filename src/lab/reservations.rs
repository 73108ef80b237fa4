//! A person's labgrid reservation blocks agents (docs/LAB.md, "One lock for people and
//! agents"). When labgrid's scheduler allocates a reservation to a place whose matches name
//! one of this exporter's boards literally (`mirror::board_of`, the places gatecmd mirrors)
//! and the reservation's owner is a person of `labgrid.people` (`Lab::serves`, the rule of
//! an acquisition), the place holds the board (`Holds::reserve`, holder `labgrid:<place>`)
//! from then until the reservation is cancelled or expires, acquired or not: labgrid lets
//! only the owner acquire the place, and an agent is refused the board meanwhile.
//!
//! A place update carries the reservation's token, not its owner; the owner comes from the
//! coordinator's `GetReservations`, a lookup run beside the session loop (the loop polls
//! its answer) and never awaited in it: the coordinator answers it under the lock its
//! `AcquirePlace` holds while it waits for this exporter's answer on the exporter stream,
//! so an awaited lookup could stall both until its timeout.
//!
//! Until the owner is known (one round trip), or while an agent holds the board (its place
//! was not mirrored), the board is not the reservation's: the hold is taken once the board
//! frees (retried every session tick), and an agent queued for the board may get it first.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tonic::transport::Channel;

use super::Lab;
use super::error::LabError;
use super::holds::{HoldError, Reserved};
use super::mirror::{board_of, unary};
use super::names::{MAX_REMEMBERED_PLACES, bounded, token_label, user_label};
use super::proto::{
    GET_RESERVATIONS, GetReservationsRequest, GetReservationsResponse, Place, Reservation,
};
use gatecmd_domain::audit::LabgridEvent;
use gatecmd_domain::state::AppState;

/// How long one `GetReservations` may take.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);
/// The least time between two lookups while an owner is unknown.
const LOOKUP_EVERY: Duration = Duration::from_secs(1);
/// After a failed lookup, the next one waits this long.
const LOOKUP_BACKOFF: Duration = Duration::from_secs(10);
/// Longest token or owner kept as the coordinator sent it (labgrid's tokens are 10
/// characters, owners `HOST/USER`); shown cleaned and shorter (`names.rs`).
const MAX_RAW_BYTES: usize = 256;

/// A lookup under way: the coordinator's reservations, or why not.
pub type LookupFuture = Pin<Box<dyn Future<Output = Result<Vec<Reservation>, LabError>> + Send>>;

/// A reservation that should hold a board.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    pub place: String,
    pub board: String,
    pub reserved: Reserved,
}

/// A reserved place of one of this exporter's boards.
struct Entry {
    token: String,
    board: String,
}

#[derive(Default)]
struct Inner {
    /// Place → its reservation, as the place updates last said.
    places: HashMap<String, Entry>,
    /// Token → owner, as the last lookup said (only the tokens of `places`).
    owners: HashMap<String, String>,
    looking: bool,
    /// No lookup starts before this.
    next_lookup: Option<Instant>,
    /// The session's first place listing arrived: until then `places` may be stale.
    listed: bool,
    /// (place, token) whose refusal is audited already (once each).
    reported: HashSet<(String, String)>,
    /// Tokens whose hold ended on gatecmd's side (an operator's release): not taken again.
    dropped: HashSet<String>,
}

/// The reserved places of this exporter's boards and their owners.
#[derive(Default)]
pub struct Reservations {
    inner: Mutex<Inner>,
}

impl Reservations {
    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut g)
    }

    /// A place update: the place's reservation, if it has one and names a board here.
    pub fn set_place(&self, state: &AppState, exporter: &str, place: &Place) {
        let token = place.reservation.as_deref().filter(|t| !t.is_empty());
        let board = token.and_then(|_| board_of(state, exporter, place));
        self.with(|i| match (token, board) {
            (Some(token), Some(board)) => {
                if i.places.len() < MAX_REMEMBERED_PLACES || i.places.contains_key(&place.name) {
                    let token = bounded(token.to_string(), MAX_RAW_BYTES);
                    i.places.insert(place.name.clone(), Entry { token, board });
                } else {
                    tracing::warn!(
                        place = %place.name,
                        "labgrid: too many reserved places to remember; this one's reservation takes no board"
                    );
                }
            }
            _ => {
                i.places.remove(&place.name);
            }
        });
    }

    pub fn del_place(&self, name: &str) {
        self.with(|i| i.places.remove(name));
    }

    /// The session ended: nothing is taken or ended until the next one's first listing.
    pub fn new_session(&self) {
        self.with(|i| {
            i.listed = false;
            i.looking = false;
            i.next_lookup = None;
        });
    }

    /// The first listing of a session is in: places it did not list are gone.
    pub fn listed(&self, seen: impl Fn(&str) -> bool) {
        self.with(|i| {
            i.places.retain(|p, _| seen(p));
            i.listed = true;
        });
    }

    pub fn is_listed(&self) -> bool {
        self.with(|i| i.listed)
    }

    /// Place → (token, board) of every reserved place of a board here, or of `only` that
    /// place.
    pub fn tokens(&self, only: Option<&str>) -> HashMap<String, (String, String)> {
        self.with(|i| {
            i.places
                .iter()
                .filter(|(p, _)| only.is_none_or(|o| o == p.as_str()))
                .map(|(p, e)| (p.clone(), (e.token.clone(), e.board.clone())))
                .collect()
        })
    }

    /// A lookup of the reservations' owners to start now, when a reserved place's owner is
    /// unknown and no lookup runs.
    pub fn lookup(&self, channel: &Channel) -> Option<LookupFuture> {
        let start = self.with(|i| {
            let due = i.next_lookup.is_none_or(|t| Instant::now() >= t);
            let unknown = i.places.values().any(|e| !i.owners.contains_key(&e.token));
            if i.looking || !due || !unknown {
                return false;
            }
            i.looking = true;
            i.next_lookup = Some(Instant::now() + LOOKUP_EVERY);
            true
        });
        if !start {
            return None;
        }
        let channel = channel.clone();
        Some(Box::pin(async move {
            let call = unary::<_, GetReservationsResponse>(
                channel,
                GET_RESERVATIONS,
                GetReservationsRequest {},
            );
            match tokio::time::timeout(LOOKUP_TIMEOUT, call).await {
                Ok(r) => r.map(|r| r.reservations),
                Err(_) => Err(LabError::NoAnswer {
                    what: "GetReservations".into(),
                    secs: LOOKUP_TIMEOUT.as_secs(),
                }),
            }
        }))
    }

    /// A lookup's answer: the owners of the reserved places' tokens.
    pub fn found(&self, answer: &Result<Vec<Reservation>, LabError>) {
        self.with(|i| {
            i.looking = false;
            match answer {
                Ok(list) => {
                    let wanted: HashSet<&String> = i.places.values().map(|e| &e.token).collect();
                    i.owners = list
                        .iter()
                        .filter_map(|r| {
                            let token = bounded(r.token.clone(), MAX_RAW_BYTES);
                            wanted
                                .contains(&token)
                                .then(|| (token, bounded(r.owner.clone(), MAX_RAW_BYTES)))
                        })
                        .collect();
                }
                Err(_) => i.next_lookup = Some(Instant::now() + LOOKUP_BACKOFF),
            }
        });
    }

    /// The reservations whose owner is known and whose hold was not ended by an operator.
    pub fn wanted(&self) -> Vec<Wanted> {
        self.with(|i| {
            let live: HashSet<String> = i.places.values().map(|e| e.token.clone()).collect();
            i.dropped.retain(|t| live.contains(t));
            i.reported.retain(|(_, t)| live.contains(t));
            i.places
                .iter()
                .filter(|(_, e)| !i.dropped.contains(&e.token))
                .filter_map(|(p, e)| {
                    let owner = i.owners.get(&e.token)?;
                    Some(Wanted {
                        place: p.clone(),
                        board: e.board.clone(),
                        reserved: Reserved {
                            token: e.token.clone(),
                            owner: owner.clone(),
                        },
                    })
                })
                .collect()
        })
    }

    /// Whether the refusal of `token` for `place` is to be reported (the first time).
    pub fn first_report(&self, place: &str, token: &str) -> bool {
        self.with(|i| i.reported.insert((place.to_string(), token.to_string())))
    }

    /// `token`'s hold ended on gatecmd's side: it is not taken again.
    pub fn drop_token(&self, token: &str) {
        self.with(|i| i.dropped.insert(token.to_string()));
    }
}

impl Lab {
    /// Holds whose reservation the coordinator no longer gives their place (cancelled,
    /// expired, the place deleted, its reservation another or its board another): ended
    /// unless the place is acquired, which keeps it as an acquisition. Only `place`'s
    /// holds when given (a place update: cheap with many places); nothing before the
    /// session's first listing.
    pub(super) fn reservations_ended(&self, place: Option<&str>) {
        if !self.reservations.is_listed() {
            return;
        }
        let tokens = self.reservations.tokens(place);
        let ended = self.holds.unreserve_where(&self.state, |board, h, r| {
            place.is_none_or(|p| p == h.place)
                && tokens
                    .get(&h.place)
                    .is_none_or(|(token, on)| *token != r.token || on != board)
        });
        self.report_released(
            ended,
            "the reservation was cancelled or expired (the coordinator no longer gives it the place)",
        );
    }

    /// A lookup answered: the owners are known; holds are taken.
    pub(super) async fn reservations_found(&self, answer: Result<Vec<Reservation>, LabError>) {
        self.reservations.found(&answer);
        if let Err(e) = &answer {
            tracing::warn!(why = %e, "labgrid: cannot read the coordinator's reservations; retrying in 10 s (a reservation takes no board meanwhile)");
        }
        self.reservations_apply().await;
    }

    /// Brings the holds in line with the reservations: ends those whose reservation is
    /// gone, and takes the board of each listed person's reservation that has none yet (a
    /// board an agent holds is retried at the next call: every session tick).
    pub(super) async fn reservations_apply(&self) {
        if !self.reservations.is_listed() {
            return;
        }
        self.reservations_ended(None);
        for w in self.reservations.wanted() {
            let held = self
                .holds
                .get(&w.board)
                .is_some_and(|h| h.place == w.place && h.reserved.as_ref() == Some(&w.reserved));
            if held {
                continue;
            }
            if !self.serves(&w.reserved.owner) {
                let why = format!(
                    "the reservation's owner {} is not named in labgrid.people: it takes no board",
                    user_label(&w.reserved.owner)
                );
                self.report_refused(&w, &why, false);
                continue;
            }
            match self
                .holds
                .reserve(&self.state, &w.board, &w.place, w.reserved.clone())
                .await
            {
                Ok(_) => {
                    let (token, owner) = labels(&w.reserved);
                    tracing::info!(board = %w.board, place = %w.place, token = %token, owner = %owner, "labgrid: board held for a reservation");
                    self.audit(LabgridEvent::ReservationHold {
                        board: &w.board,
                        place: &w.place,
                        token: &token,
                        owner: &owner,
                    });
                }
                Err(e) => {
                    let retrying = matches!(
                        e,
                        HoldError::HeldByPlace { .. }
                            | HoldError::HeldElsewhere(_)
                            | HoldError::Busy(_)
                    );
                    let why = if retrying {
                        format!("{e}; taken once it frees")
                    } else {
                        e.to_string()
                    };
                    self.report_refused(&w, &why, retrying);
                }
            }
        }
    }

    /// A reservation that takes no board (now): logged and audited once per place and
    /// token.
    fn report_refused(&self, w: &Wanted, why: &str, retrying: bool) {
        if !self.reservations.first_report(&w.place, &w.reserved.token) {
            return;
        }
        let (token, owner) = labels(&w.reserved);
        tracing::warn!(board = %w.board, place = %w.place, token = %token, owner = %owner, retrying, "labgrid: reservation takes no board: {why}");
        self.audit(LabgridEvent::ReservationRefused {
            board: &w.board,
            place: &w.place,
            token: &token,
            owner: &owner,
            why,
            retrying,
        });
    }
}

/// A reservation's token and owner as the log and the audit show them.
pub fn labels(r: &Reserved) -> (String, String) {
    (token_label(&r.token), user_label(&r.owner))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::proto::ResourceMatch;
    use gatecmd_domain::config::Config;

    fn place(name: &str, group: &str, reservation: Option<&str>) -> Place {
        Place {
            name: name.into(),
            matches: vec![ResourceMatch {
                exporter: "bench-1".into(),
                group: group.into(),
                cls: "*".into(),
                ..ResourceMatch::default()
            }],
            reservation: reservation.map(Into::into),
            ..Place::default()
        }
    }

    fn reservation(token: &str, owner: &str) -> Reservation {
        Reservation {
            token: token.into(),
            owner: owner.into(),
            state: 1,
        }
    }

    /// Only a reserved place of one board here is kept; its owner comes from a lookup,
    /// which starts only while one is unknown; an operator's release drops the token.
    #[tokio::test]
    async fn a_reserved_place_of_a_board_here_is_wanted_once_its_owner_is_known() {
        let text = "boards:\n  - name: b1\n    usb: \"1-2\"\n";
        let state = AppState::new(Config::parse(text, "t.yaml").expect("config"));
        let r = Reservations::default();
        r.set_place(&state, "bench-1", &place("p1", "b1", Some("T1")));
        // Not a board here, a wildcard, no reservation, an empty one: nothing kept.
        r.set_place(&state, "bench-1", &place("p2", "b9", Some("T2")));
        r.set_place(&state, "bench-1", &place("p3", "b*", Some("T3")));
        r.set_place(&state, "bench-1", &place("p4", "b1", None));
        r.set_place(&state, "bench-1", &place("p5", "b1", Some("")));
        assert_eq!(r.tokens(None).len(), 1);
        assert!(r.wanted().is_empty(), "the owner is not known yet");
        // One lookup at a time (not polled here: nothing is sent).
        let channel = tonic::transport::Endpoint::from_static("http://127.0.0.1:9").connect_lazy();
        assert!(r.lookup(&channel).is_some());
        assert!(r.lookup(&channel).is_none(), "one runs");
        r.found(&Ok(vec![
            reservation("T1", "desk/alice"),
            reservation("T8", "desk/bob"),
        ]));
        let p1 = Wanted {
            place: "p1".into(),
            board: "b1".into(),
            reserved: Reserved {
                token: "T1".into(),
                owner: "desk/alice".into(),
            },
        };
        assert_eq!(r.wanted(), std::slice::from_ref(&p1));
        assert!(r.lookup(&channel).is_none(), "no owner unknown");
        // The first listing of a session keeps only the places it listed.
        r.new_session();
        assert!(!r.is_listed());
        r.listed(|p| p == "p1");
        assert!(r.is_listed());
        assert_eq!(r.wanted(), [p1]);
        // Reported once; an operator's release stands for that token.
        assert!(r.first_report("p1", "T1") && !r.first_report("p1", "T1"));
        r.drop_token("T1");
        assert!(r.wanted().is_empty());
        // The reservation gone: nothing kept.
        r.set_place(&state, "bench-1", &place("p1", "b1", None));
        assert!(r.tokens(None).is_empty());
        r.listed(|_| false);
        assert!(r.tokens(Some("p1")).is_empty());
    }
}
