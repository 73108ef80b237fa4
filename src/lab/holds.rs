//! The place ↔ lease bridge: which boards labgrid places hold, as gatecmd board leases
//! with holder `labgrid:<place>` (taken by the lease use case `lock_board` uses,
//! `gatecmd_domain::usecases::lease::board`, and ended by the one `unlock_device` uses,
//! `gatecmd_domain::usecases::unlock`), and who else holds a board when labgrid asks for it.
//! A hold stands for the place's acquisition (its acquired resources), for a person's
//! reservation allocated to the place (`reservations.rs`), or both: it ends when neither
//! is left.
//! One table behind a `std` mutex, never held across an await (the lease is taken between
//! two looks at the table, and the coordinator sends one request at a time).

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use chrono::Utc;

use tokio_util::sync::CancellationToken;

use gatecmd_core::identity::ClientIdentity;
use gatecmd_domain::locks::{ClientName, KeyState, LeaseId, LockKey};
use gatecmd_domain::state::AppState;
use gatecmd_domain::usecases::lease::Ask;
use gatecmd_domain::usecases::lease::board::{LeaseError, Which, lease_board};
use gatecmd_domain::usecases::unlock::end_lease;

/// The holder prefix of leases taken for labgrid places. Configured client names are
/// `[A-Za-z0-9_.-]`, so no MCP client can be named like this.
pub const HOLDER_PREFIX: &str = "labgrid:";

/// The lock holder of `place`.
pub fn holder_of(place: &str) -> ClientName {
    ClientName(format!("{HOLDER_PREFIX}{place}"))
}

/// `place` as the holder of its leases, for the use cases that end them (never an admin).
fn place_holder(place: &str) -> ClientIdentity {
    ClientIdentity {
        name: holder_of(place).0,
        commands: Some(BTreeSet::new()),
        admin: false,
    }
}

/// One board held by a labgrid place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    pub place: String,
    pub lease: LeaseId,
    /// The board's resources the coordinator has marked acquired for the place.
    pub resources: BTreeSet<String>,
    /// `HOST/USER` who acquired the place, once the coordinator's place update said so.
    pub user: Option<String>,
    /// When the hold was taken: a hold whose acquirer is still unknown after
    /// [`UNNAMED_HOLD`] is released (unless a reservation holds it: only its owner, a
    /// listed person, can acquire the place).
    pub since: Instant,
    /// The listed person's reservation allocated to the place, while the coordinator
    /// says so: the hold stays while it lasts, acquired or not.
    pub reserved: Option<Reserved>,
}

/// A reservation a hold stands for: its token and owner, as the coordinator gave them
/// (cleaned and bounded when shown).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reserved {
    pub token: String,
    pub owner: String,
}

/// How long a place may hold a board before the coordinator has said who acquired it (its
/// place update follows the acquire within milliseconds). Past this the hold is released:
/// a board is held only for a listed person (`labgrid.people`), and an acquirer nobody
/// named is not one.
pub const UNNAMED_HOLD: Duration = Duration::from_secs(5);

impl Hold {
    /// A hold for `place` not yet leased (its lease is taken by `Holds::take`); refused for
    /// a place name no board is ever held for (`names::valid_place`).
    fn fresh(
        place: &str,
        resources: BTreeSet<String>,
        user: Option<String>,
        reserved: Option<Reserved>,
    ) -> Result<Hold, HoldError> {
        if !super::names::valid_place(place) {
            return Err(HoldError::PlaceName);
        }
        Ok(Hold {
            place: place.to_string(),
            lease: LeaseId(String::new()),
            resources,
            user,
            since: Instant::now(),
            reserved,
        })
    }

    /// The lease note others read when they find the board busy: the user as a clean,
    /// short label, the whole within the lease settings' `max_note_bytes`.
    pub fn note(&self, max_bytes: usize) -> String {
        use super::names::{token_label, user_label};
        let place = &self.place;
        let note = match (&self.user, &self.reserved) {
            (Some(u), None) => format!("labgrid place {place} acquired by {}", user_label(u)),
            (Some(u), Some(r)) => format!(
                "labgrid place {place} acquired by {} (reservation {})",
                user_label(u),
                token_label(&r.token)
            ),
            // What an agent refused the board reads (in `device_busy`'s note): whose it is
            // and what frees it.
            (None, Some(r)) => format!(
                "labgrid place {place} reserved for {} (reservation {}); the board frees when the reservation is cancelled or expires",
                user_label(&r.owner),
                token_label(&r.token)
            ),
            (None, None) => format!("labgrid place {place}"),
        };
        super::names::bounded(note, max_bytes)
    }
}

/// Why a place's acquire or release of a board was refused (labgrid logs the text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HoldError {
    #[error("gatecmd: board {board} is held by labgrid place {place} ({note})")]
    HeldByPlace {
        board: String,
        place: String,
        note: String,
    },
    #[error("gatecmd: no board {0} is configured on this exporter")]
    NoBoard(String),
    #[error(
        "gatecmd: a board is held only for a place named with 1-64 of [A-Za-z0-9_.:+@-]; rename the place"
    )]
    PlaceName,
    /// Someone other than a labgrid place holds it; the text says who (`holder`).
    #[error("{0}")]
    HeldElsewhere(String),
    #[error("gatecmd: board {0} is busy")]
    Busy(String),
    /// The place's acquirer is not a listed person: the acquisition takes no board. The
    /// text goes to the coordinator and names nobody; the operator's audit line does.
    #[error(
        "gatecmd: place {0} takes no board on this exporter: it was not acquired by a person named in labgrid.people (docs/LAB.md, \"Who may use the ports\")"
    )]
    NotServed(String),
    #[error("gatecmd: board {board} is held by labgrid place {held_by}, not {asked}")]
    OtherPlace {
        board: String,
        held_by: String,
        asked: String,
    },
}

/// Who has a board, as labgrid should see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    Free,
    /// Held for this labgrid place.
    Place(String),
    /// An agent (or a command, or a port lease): the text says who, since when, how long.
    Other(String),
}

/// The board table of the labgrid bridge.
#[derive(Default)]
pub struct Holds {
    // board name → hold. A std mutex: map lookups only, never across an await.
    boards: Mutex<HashMap<String, Hold>>,
}

impl Holds {
    fn with<R>(&self, f: impl FnOnce(&mut HashMap<String, Hold>) -> R) -> R {
        let mut g = self.boards.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut g)
    }

    /// The hold on `board`, if a place has it.
    pub fn get(&self, board: &str) -> Option<Hold> {
        self.with(|m| m.get(board).cloned())
    }

    /// Every hold, by board.
    pub fn snapshot(&self) -> HashMap<String, Hold> {
        self.with(|m| m.clone())
    }

    /// Marks `resource` of `board` acquired for `place`, taking the board's lease for the
    /// place if it has none yet. Refused (with the reason labgrid logs) when another place
    /// or an agent holds the board.
    pub async fn acquire(
        &self,
        state: &AppState,
        board: &str,
        resource: &str,
        place: &str,
        user: Option<String>,
    ) -> Result<Option<Hold>, HoldError> {
        let existing = self.with(|m| match m.get_mut(board) {
            Some(h) if h.place == place => {
                h.resources.insert(resource.to_string());
                Ok(true)
            }
            Some(h) => Err(HoldError::HeldByPlace {
                board: board.to_string(),
                place: h.place.clone(),
                note: h.note(state.locks.settings().max_note_bytes),
            }),
            None => Ok(false),
        })?;
        if existing {
            // A reservation's hold learns who acquired it now, when known.
            if let Some(u) = &user {
                self.set_user(state, place, u);
            }
            return Ok(None);
        }
        let hold = Hold::fresh(place, BTreeSet::from([resource.to_string()]), user, None)?;
        self.take(state, board, hold).await.map(Some)
    }

    /// Takes `board` for `reserved`, allocated to `place`: a new lease when no place holds
    /// the board (no resource acquired yet), or the reservation recorded on the place's
    /// hold when the place holds it already. Returns the hold, or why the board is not the
    /// reservation's (another place or an agent holds it: the caller retries).
    pub async fn reserve(
        &self,
        state: &AppState,
        board: &str,
        place: &str,
        reserved: Reserved,
    ) -> Result<Hold, HoldError> {
        let max = state.locks.settings().max_note_bytes;
        let existing = self.with(|m| match m.get_mut(board) {
            Some(h) if h.place == place => {
                h.reserved = Some(reserved.clone());
                Ok(Some(h.clone()))
            }
            Some(h) => Err(HoldError::HeldByPlace {
                board: board.to_string(),
                place: h.place.clone(),
                note: h.note(max),
            }),
            None => Ok(None),
        })?;
        if let Some(h) = existing {
            let _ = state
                .locks
                .renew_outside(&h.lease, &holder_of(place), Some(h.note(max)));
            return Ok(h);
        }
        let hold = Hold::fresh(place, BTreeSet::new(), None, Some(reserved))?;
        self.take(state, board, hold).await
    }

    /// Takes the board's lease for `hold` (its place as the holder, by `lock_board`'s use
    /// case, no wait) and records the hold.
    async fn take(&self, state: &AppState, board: &str, mut hold: Hold) -> Result<Hold, HoldError> {
        let settings = state.locks.settings();
        let by = holder_of(&hold.place);
        let note = hold.note(settings.max_note_bytes);
        // The lease `lock_board` takes, by the same use case.
        let ask = Ask {
            client: &by.0,
            session: None,
            // The longest a lease may live; renewed while the coordinator is there.
            ttl: Some(settings.max_ttl),
            note: Some(&note),
            wait: Duration::ZERO,
        };
        let named = Which::Named(board);
        match lease_board(state, &ask, named, &CancellationToken::new()).await {
            Ok(leased) => {
                hold.lease = leased.info.lease_id;
                self.with(|m| m.insert(board.to_string(), hold.clone()));
                Ok(hold)
            }
            Err(LeaseError::UnknownBoard(_)) => Err(HoldError::NoBoard(board.to_string())),
            Err(_) => Err(match holder(state, board, true) {
                Holder::Other(why) => HoldError::HeldElsewhere(why),
                _ => HoldError::Busy(board.to_string()),
            }),
        }
    }

    /// Marks `resource` of `board` released; the last one released ends the lease, which is
    /// returned with its place, unless a reservation still holds the board (labgrid lets
    /// only its owner acquire the place): the hold then stays, without a user. Releasing
    /// what no place holds is a no-op (labgrid repeats releases after a reconnect);
    /// another place's board is refused.
    pub fn release(
        &self,
        state: &AppState,
        board: &str,
        resource: &str,
        place: Option<&str>,
    ) -> Result<Option<Hold>, HoldError> {
        let ended = self.with(|m| {
            let Some(h) = m.get_mut(board) else {
                return Ok(None);
            };
            if let Some(p) = place
                && p != h.place
            {
                return Err(HoldError::OtherPlace {
                    board: board.to_string(),
                    held_by: h.place.clone(),
                    asked: p.to_string(),
                });
            }
            h.resources.remove(resource);
            if h.resources.is_empty() && h.reserved.is_some() {
                h.user = None;
                let max = state.locks.settings().max_note_bytes;
                let _ =
                    state
                        .locks
                        .renew_outside(&h.lease, &holder_of(&h.place), Some(h.note(max)));
                return Ok(None);
            }
            Ok(if h.resources.is_empty() {
                m.remove(board)
            } else {
                None
            })
        })?;
        if let Some(h) = &ended {
            // Gone already (expired, force-unlocked): nothing left to end.
            let _ = end_lease(state, &place_holder(&h.place), &h.lease, None);
        }
        Ok(ended)
    }

    /// Ends every hold for which `drop` says so; returns them with their boards.
    pub fn release_where(
        &self,
        state: &AppState,
        drop: impl Fn(&str, &Hold) -> bool,
    ) -> Vec<(String, Hold)> {
        let ended: Vec<(String, Hold)> = self.with(|m| {
            let names: Vec<String> = m
                .iter()
                .filter(|(b, h)| drop(b, h))
                .map(|(b, _)| b.clone())
                .collect();
            names
                .into_iter()
                .filter_map(|b| m.remove(&b).map(|h| (b, h)))
                .collect()
        });
        for (_, h) in &ended {
            let _ = end_lease(state, &place_holder(&h.place), &h.lease, None);
        }
        ended
    }

    /// Holds whose lease ended on gatecmd's side (expiry, an operator's release): they
    /// are forgotten so that the resources show free again.
    pub fn forget_lost(&self, state: &AppState) -> Vec<(String, Hold)> {
        self.with(|m| {
            let lost: Vec<String> = m
                .iter()
                .filter(|(b, h)| {
                    state
                        .locks
                        .key_state(&LockKey::Board((*b).clone()))
                        .and_then(|s| s.lease)
                        .is_none_or(|l| l.lease_id != h.lease)
                })
                .map(|(b, _)| b.clone())
                .collect();
            lost.into_iter()
                .filter_map(|b| m.remove(&b).map(|h| (b, h)))
                .collect()
        })
    }

    /// Holds whose acquirer the coordinator has not named within [`UNNAMED_HOLD`]: ended.
    /// A reserved place's are not: only the reservation's owner can acquire it.
    pub fn release_unnamed(&self, state: &AppState) -> Vec<(String, Hold)> {
        self.release_where(state, |_, h| {
            h.user.is_none() && h.reserved.is_none() && h.since.elapsed() >= UNNAMED_HOLD
        })
    }

    /// Ends the reservation of every hold for which `stale` says so (it was cancelled or
    /// expired, or is no longer the place's): a hold whose place is acquired stays, as an
    /// acquisition; the others end and are returned (with the reservation they had).
    pub fn unreserve_where(
        &self,
        state: &AppState,
        stale: impl Fn(&str, &Hold, &Reserved) -> bool,
    ) -> Vec<(String, Hold)> {
        let max = state.locks.settings().max_note_bytes;
        let (ended, kept) = self.with(|m| {
            let mut ended = Vec::new();
            let mut kept = Vec::new();
            let boards: Vec<String> = m
                .iter()
                .filter(|(b, h)| h.reserved.as_ref().is_some_and(|r| stale(b, h, r)))
                .map(|(b, _)| b.clone())
                .collect();
            for b in boards {
                let Some(h) = m.get_mut(&b) else { continue };
                if h.resources.is_empty() {
                    if let Some(h) = m.remove(&b) {
                        ended.push((b, h));
                    }
                } else {
                    h.reserved = None;
                    kept.push(h.clone());
                }
            }
            (ended, kept)
        });
        for h in kept {
            let _ = state
                .locks
                .renew_outside(&h.lease, &holder_of(&h.place), Some(h.note(max)));
        }
        for (_, h) in &ended {
            let _ = end_lease(state, &place_holder(&h.place), &h.lease, None);
        }
        ended
    }

    /// Records who acquired `place` and renews its leases (with the note naming them).
    pub fn set_user(&self, state: &AppState, place: &str, user: &str) {
        let renew: Vec<Hold> = self.with(|m| {
            m.values_mut()
                .filter(|h| h.place == place && h.user.as_deref() != Some(user))
                .map(|h| {
                    h.user = Some(user.to_string());
                    h.clone()
                })
                .collect()
        });
        let max = state.locks.settings().max_note_bytes;
        for h in renew {
            let _ = state
                .locks
                .renew_outside(&h.lease, &holder_of(&h.place), Some(h.note(max)));
        }
    }

    /// Renews every hold's lease (while the coordinator is there they do not expire).
    pub fn renew_all(&self, state: &AppState) {
        for h in self.snapshot().into_values() {
            let _ = state
                .locks
                .renew_outside(&h.lease, &holder_of(&h.place), None);
        }
    }
}

/// Who holds `board` now, from the lock table. With `left`, an agent's lease says how many
/// seconds it has left (for an answer); without, only its times (for the published
/// resources, which should not change every second).
pub fn holder(state: &AppState, board: &str, left: bool) -> Holder {
    let st = state.locks.key_state(&LockKey::Board(board.to_string()));
    let port = state.config().board(board).and_then(|b| {
        state
            .locks
            .key_state(&LockKey::Port(b.usb.to_string()))
            .filter(|p| p.lease.is_some() || p.running.is_some())
    });
    match (st, port) {
        (Some(KeyState { lease: Some(l), .. }), _) => {
            match l.holder.0.strip_prefix(HOLDER_PREFIX) {
                Some(place) => Holder::Place(place.to_string()),
                None => {
                    let secs = chrono::SecondsFormat::Secs;
                    let remaining = if left {
                        let n = (l.expires_at - Utc::now()).num_seconds().max(0);
                        format!(" ({n} s left)")
                    } else {
                        String::new()
                    };
                    Holder::Other(format!(
                        "gatecmd: board {board} is leased by MCP client {} since {} until {}{remaining}{}",
                        l.holder.0,
                        l.acquired_at.to_rfc3339_opts(secs, true),
                        l.expires_at.to_rfc3339_opts(secs, true),
                        l.note.map(|n| format!(" (note: {n})")).unwrap_or_default()
                    ))
                }
            }
        }
        (
            Some(KeyState {
                running: Some(r), ..
            }),
            _,
        ) => Holder::Other(format!(
            "gatecmd: board {board} is running {:?} for MCP client {}",
            r.command, r.client.0
        )),
        (_, Some(p)) => Holder::Other(format!(
            "gatecmd: board {board}'s USB port is in use by MCP client {}",
            p.lease
                .map(|l| l.holder.0)
                .or(p.running.map(|r| r.client.0))
                .unwrap_or_default()
        )),
        _ => Holder::Free,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gatecmd_domain::config::Config;

    fn state() -> std::sync::Arc<AppState> {
        let text = "boards:\n  - name: b1\n    usb: \"1-2\"\n";
        AppState::new(Config::parse(text, "t.yaml").expect("config"))
    }

    fn note(state: &AppState) -> Option<String> {
        state
            .locks
            .key_state(&LockKey::Board("b1".into()))
            .and_then(|s| s.lease)
            .and_then(|l| l.note)
    }

    /// An agent's `lock_board` on b1, with no wait: whether it got the board (and let go).
    async fn agent_gets_it(state: &AppState) -> bool {
        let ask = Ask {
            client: "vm-a",
            session: None,
            ttl: None,
            note: None,
            wait: Duration::ZERO,
        };
        let cancel = CancellationToken::new();
        match lease_board(state, &ask, Which::Named("b1"), &cancel).await {
            Ok(l) => {
                let agent = ClientIdentity {
                    name: "vm-a".into(),
                    commands: Some(BTreeSet::new()),
                    admin: false,
                };
                end_lease(state, &agent, &l.info.lease_id, None).expect("released");
                true
            }
            Err(_) => false,
        }
    }

    fn alice(token: &str) -> Reserved {
        Reserved {
            token: token.into(),
            owner: "desk/alice".into(),
        }
    }

    /// Reserved → acquired → released but still reserved → unreserved: the board is the
    /// place's from the reservation to its end, whatever the acquisitions in between.
    #[tokio::test]
    async fn a_reservation_holds_the_board_until_it_ends() {
        let state = state();
        let holds = Holds::default();
        assert!(agent_gets_it(&state).await);
        let h = holds
            .reserve(&state, "b1", "p1", alice("T1"))
            .await
            .expect("reserved");
        assert!(h.resources.is_empty() && h.user.is_none());
        assert_eq!(holder(&state, "b1", true), Holder::Place("p1".into()));
        assert_eq!(
            note(&state).as_deref(),
            Some(
                "labgrid place p1 reserved for desk/alice (reservation T1); the board frees when the reservation is cancelled or expires"
            )
        );
        assert!(!agent_gets_it(&state).await);
        // Another place of the board is refused, naming the reservation.
        let other = holds.acquire(&state, "b1", "usb", "p2", None).await;
        assert!(
            matches!(&other, Err(HoldError::HeldByPlace { place, note, .. }) if place == "p1" && note.contains("reserved for desk/alice")),
            "{other:?}"
        );
        // The owner acquires the place: the same hold, now acquired.
        let acquired = holds
            .acquire(&state, "b1", "usb", "p1", None)
            .await
            .expect("acquired");
        assert_eq!(acquired, None, "the reservation's hold is the place's");
        holds.set_user(&state, "p1", "desk/alice");
        assert_eq!(
            note(&state).as_deref(),
            Some("labgrid place p1 acquired by desk/alice (reservation T1)")
        );
        // Released while still reserved: the board stays held, the user forgotten.
        assert_eq!(holds.release(&state, "b1", "usb", None), Ok(None));
        let kept = holds.get("b1").expect("still held");
        assert!(kept.resources.is_empty() && kept.user.is_none() && kept.lease == h.lease);
        assert!(!agent_gets_it(&state).await);
        // Another reservation's end changes nothing; this one's frees the board.
        assert!(
            holds
                .unreserve_where(&state, |_, _, r| r.token == "T9")
                .is_empty()
        );
        let ended = holds.unreserve_where(&state, |_, _, r| r.token == "T1");
        assert_eq!(ended.len(), 1);
        assert_eq!(ended[0].1.reserved, Some(alice("T1")));
        assert_eq!(holder(&state, "b1", true), Holder::Free);
        assert!(holds.get("b1").is_none());
        assert!(agent_gets_it(&state).await);
    }

    /// A reservation that ends while the owner has the place acquired leaves the
    /// acquisition's hold, which the release then ends.
    #[tokio::test]
    async fn an_acquired_place_outlives_its_reservation() {
        let state = state();
        let holds = Holds::default();
        holds
            .reserve(&state, "b1", "p1", alice("T1"))
            .await
            .expect("reserved");
        holds
            .acquire(&state, "b1", "usb", "p1", Some("desk/alice".into()))
            .await
            .expect("acquired");
        assert!(holds.unreserve_where(&state, |_, _, _| true).is_empty());
        assert_eq!(
            note(&state).as_deref(),
            Some("labgrid place p1 acquired by desk/alice")
        );
        assert!(!agent_gets_it(&state).await);
        let ended = holds.release(&state, "b1", "usb", None).expect("released");
        assert!(ended.is_some_and(|h| h.reserved.is_none()));
        assert!(agent_gets_it(&state).await);
        // A board an agent holds is not the reservation's: refused, for a retry.
        let ask = Ask {
            client: "vm-a",
            session: None,
            ttl: None,
            note: None,
            wait: Duration::ZERO,
        };
        let cancel = CancellationToken::new();
        lease_board(&state, &ask, Which::Named("b1"), &cancel)
            .await
            .expect("the agent's");
        let refused = holds.reserve(&state, "b1", "p1", alice("T2")).await;
        assert!(
            matches!(&refused, Err(HoldError::HeldElsewhere(why)) if why.contains("vm-a")),
            "{refused:?}"
        );
    }
}
