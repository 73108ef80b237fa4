//! The place ↔ lease bridge: which boards labgrid places hold, as gatecmd board leases
//! with holder `labgrid:<place>` (taken by the lease use case `lock_board` uses,
//! `gatecmd_domain::usecases::lease::board`, and ended by the one `unlock_device` uses,
//! `gatecmd_domain::usecases::unlock`), and who else holds a board when labgrid asks for it.
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
    /// [`UNNAMED_HOLD`] is released.
    pub since: Instant,
}

/// How long a place may hold a board before the coordinator has said who acquired it (its
/// place update follows the acquire within milliseconds). Past this the hold is released:
/// a board is held only for a listed person (`labgrid.people`), and an acquirer nobody
/// named is not one.
pub const UNNAMED_HOLD: Duration = Duration::from_secs(5);

impl Hold {
    /// The lease note others read when they find the board busy: the user as a clean,
    /// short label, the whole within the lease settings' `max_note_bytes`.
    pub fn note(&self, max_bytes: usize) -> String {
        let note = match &self.user {
            Some(u) => format!(
                "labgrid place {} acquired by {}",
                self.place,
                super::names::user_label(u)
            ),
            None => format!("labgrid place {}", self.place),
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
            return Ok(None);
        }
        if !super::names::valid_place(place) {
            return Err(HoldError::PlaceName);
        }
        let mut hold = Hold {
            place: place.to_string(),
            lease: LeaseId(String::new()),
            resources: BTreeSet::from([resource.to_string()]),
            user,
            since: Instant::now(),
        };
        let settings = state.locks.settings();
        let by = holder_of(place);
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
                Ok(Some(hold))
            }
            Err(LeaseError::UnknownBoard(_)) => Err(HoldError::NoBoard(board.to_string())),
            Err(_) => Err(match holder(state, board, true) {
                Holder::Other(why) => HoldError::HeldElsewhere(why),
                _ => HoldError::Busy(board.to_string()),
            }),
        }
    }

    /// Marks `resource` of `board` released; the last one released ends the lease, which is
    /// returned with its place. Releasing what no place holds is a no-op (labgrid repeats
    /// releases after a reconnect); another place's board is refused.
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
    pub fn release_unnamed(&self, state: &AppState) -> Vec<(String, Hold)> {
        self.release_where(state, |_, h| {
            h.user.is_none() && h.since.elapsed() >= UNNAMED_HOLD
        })
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
