//! The lock table: one lane per key, holding its lease, its running command,
//! its shared holds and its FIFO queue of waiters; and the read-only questions
//! asked of it (who holds a lease, what a key looks like).
//!
//! Who may take a key is decided in `admission.rs`; the changes (take, queue,
//! release, hand on, expire) are in `ops.rs`. Everything here runs with the
//! state mutex held and never awaits; the async parts (waiting, expiry) live in
//! `mod.rs` and `expiry.rs`.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use gatecmd_core::events::{Broadcast, Events};
use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;

use super::error::HeldBy;
use super::ids::{ClientName, LeaseId, LockKey, SessionId};
use super::settings::LockSettings;
use super::view::{KeyState, LeaseInfo, LockEvent, LockEventKind, RunInfo, SharedInfo};
use super::want::{Grant, Ticket, Want};

/// State shared by every handle, guard and the expiry task.
pub(super) struct Shared {
    /// A `std` mutex, not a tokio one: no critical section awaits, and each
    /// is a few map operations, so blocking briefly beats the overhead of an
    /// async lock. It also lets guards release in `Drop`, which cannot await.
    state: Mutex<State>,
    /// Wakes the expiry task when a deadline may have moved earlier (a new
    /// lease, or a lease whose command ended and whose TTL restarted).
    pub(super) expiry: Notify,
    /// Bumped whenever the state is taken for writing (see `lock`), so that readers can
    /// keep views derived from it until it moves.
    version: AtomicU64,
}

impl Shared {
    pub(super) fn new(settings: LockSettings, events: Broadcast<LockEvent>) -> Self {
        Shared {
            state: Mutex::new(State {
                lanes: BTreeMap::new(),
                leases: HashMap::new(),
                next_ticket: 0,
                shutdown: false,
                expiry_dirty: false,
                events,
                settings,
            }),
            expiry: Notify::new(),
            version: AtomicU64::new(0),
        }
    }

    /// Runs `f` on the locked state, then wakes the expiry task if `f`
    /// changed a deadline. The notification is sent after unlocking so the
    /// task does not wake only to block on the mutex.
    pub(super) fn with_state<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let mut state = self.lock();
        let result = f(&mut state);
        let dirty = std::mem::take(&mut state.expiry_dirty);
        drop(state);
        if dirty {
            self.expiry.notify_one();
        }
        result
    }

    /// Runs `f` on the locked state without counting as a change.
    pub(super) fn read<R>(&self, f: impl FnOnce(&State) -> R) -> R {
        f(&self.raw_lock())
    }

    /// The state, taken for writing: the version moves before anything can change or
    /// any event is sent, and under the mutex. A reader that sees the new version then
    /// waits on the mutex for the change to finish; one that saw the old version finds
    /// it stale next time.
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        let state = self.raw_lock();
        self.version.fetch_add(1, Ordering::AcqRel);
        state
    }

    /// The number behind `LockManager::version`: it moves with every write.
    pub(super) fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// A panic inside a critical section would poison the mutex. Every
    /// mutation here is a handful of infallible map operations, so rather
    /// than turn one bug into every later lock call panicking, keep serving
    /// with the state as it is.
    fn raw_lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

pub(super) struct State {
    /// A `BTreeMap` so snapshots come out ordered by key.
    pub(super) lanes: BTreeMap<LockKey, Lane>,
    /// Where each live lease is, to find it by id.
    pub(super) leases: HashMap<LeaseId, LockKey>,
    next_ticket: Ticket,
    pub(super) shutdown: bool,
    pub(super) expiry_dirty: bool,
    events: Broadcast<LockEvent>,
    /// Under the state mutex, not beside it, so that a config reload
    /// (`LockManager::set_settings`) is seen whole by every check and never
    /// changes under one.
    pub(super) settings: LockSettings,
}

#[derive(Default)]
pub(super) struct Lane {
    pub(super) lease: Option<Lease>,
    pub(super) running: Option<Running>,
    /// Shared (intention) holds: boards of this VID:PID in use through their
    /// own `port:` key. Any number coexist; they keep out exclusive users.
    pub(super) shared: Vec<SharedHold>,
    pub(super) waiters: VecDeque<Waiter>,
}

impl Lane {
    /// Whether a board command admitted under lease `id` still runs: the
    /// lease cannot expire meanwhile, as with its own commands.
    pub(super) fn holds_shared_under(&self, id: &LeaseId) -> bool {
        self.shared
            .iter()
            .any(|h| h.under_lease.as_ref() == Some(id))
    }

    pub(super) fn is_idle(&self) -> bool {
        self.lease.is_none()
            && self.running.is_none()
            && self.shared.is_empty()
            && self.waiters.is_empty()
    }
}

/// One shared hold on a key, taken for a command or a lease on `via`.
pub(super) struct SharedHold {
    pub(super) ticket: Ticket,
    pub(super) via: LockKey,
    pub(super) client: ClientName,
    pub(super) held_by: HeldBy,
    pub(super) command: Option<String>,
    pub(super) since: DateTime<Utc>,
    /// The lease on this key the hold was admitted under, if any: it renews
    /// when the hold ends and does not expire while the hold lasts.
    pub(super) under_lease: Option<LeaseId>,
    /// For a hold that belongs to a lease on `via`: that lease, whose
    /// commands the hold does not keep out (the lease holder may still run a
    /// whole-VID:PID command).
    pub(super) owner: Option<LeaseOwner>,
}

/// What authorizes commands under a lease, copied into its shared holds.
pub(super) struct LeaseOwner {
    pub(super) id: LeaseId,
    pub(super) holder: ClientName,
    pub(super) session: Option<SessionId>,
}

pub(super) struct Lease {
    pub(super) id: LeaseId,
    pub(super) holder: ClientName,
    pub(super) session: Option<SessionId>,
    pub(super) note: Option<String>,
    pub(super) ttl: Duration,
    pub(super) acquired_at: DateTime<Utc>,
    /// Drives expiry; tokio's clock so paused-time tests can advance it.
    pub(super) deadline: Instant,
    /// Display twin of `deadline`.
    pub(super) expires_at: DateTime<Utc>,
    /// The request that created the lease, so a waiter that is handed the
    /// lease but gives up before receiving it can end it again.
    pub(super) origin: Ticket,
    /// Shared holds the lease keeps on other keys (a board lease's VID:PID
    /// key), released when the lease ends.
    pub(super) shared: Vec<(LockKey, Ticket)>,
}

impl Lease {
    pub(super) fn renew(&mut self) {
        self.deadline = Instant::now() + self.ttl;
        self.expires_at = utc_after(self.ttl);
    }

    pub(super) fn info(&self, key: &LockKey) -> LeaseInfo {
        LeaseInfo {
            lease_id: self.id.clone(),
            key: key.clone(),
            holder: self.holder.clone(),
            note: self.note.clone(),
            acquired_at: self.acquired_at,
            expires_at: self.expires_at,
            ttl_secs: self.ttl.as_secs(),
            session: self.session.clone(),
        }
    }
}

pub(super) struct Running {
    pub(super) info: RunInfo,
    pub(super) ticket: Ticket,
    /// The lease the command runs under, renewed when it ends.
    pub(super) lease: Option<LeaseId>,
}

pub(super) struct Waiter {
    pub(super) ticket: Ticket,
    pub(super) want: Want,
    pub(super) grant: oneshot::Sender<Grant>,
}

pub(super) fn utc_after(d: Duration) -> DateTime<Utc> {
    let now = Utc::now();
    TimeDelta::from_std(d)
        .ok()
        .and_then(|d| now.checked_add_signed(d))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

impl State {
    pub(super) fn next_ticket(&mut self) -> Ticket {
        self.next_ticket += 1;
        self.next_ticket
    }

    pub(super) fn emit(
        &self,
        kind: LockEventKind,
        key: &LockKey,
        client: &ClientName,
        lease_id: Option<&LeaseId>,
        reason: Option<String>,
    ) {
        // Sent under the mutex so subscribers see events in the order the
        // state changed. Nobody listening is fine.
        self.events.send(LockEvent {
            kind,
            key: key.clone(),
            client: client.clone(),
            lease_id: lease_id.cloned(),
            reason,
            at: Utc::now(),
        });
    }

    pub(super) fn subscribe(&self) -> Events<LockEvent> {
        self.events.subscribe()
    }

    /// Records a refusal on the event stream.
    pub(super) fn emit_refused(&self, key: &LockKey, client: &ClientName, message: String) {
        self.emit(LockEventKind::Refused, key, client, None, Some(message));
    }

    /// The key a live lease is on.
    pub(super) fn lease_key(&self, id: &LeaseId) -> Option<&LockKey> {
        self.leases.get(id)
    }

    /// The holder and details of a live lease.
    pub(super) fn lease_info(&self, id: &LeaseId) -> Option<LeaseInfo> {
        let key = self.leases.get(id)?;
        let lease = self.lanes.get(key)?.lease.as_ref()?;
        Some(lease.info(key))
    }

    /// The live lease `client` holds on `key`, if any.
    pub(super) fn lease_of(&self, key: &LockKey, client: &ClientName) -> Option<LeaseInfo> {
        let lease = self.lanes.get(key)?.lease.as_ref()?;
        (lease.holder == *client).then(|| lease.info(key))
    }

    /// Keys holding a live lease taken in `session`.
    pub(super) fn session_keys(&self, session: &SessionId) -> Vec<LockKey> {
        self.lanes
            .iter()
            .filter(|(_, lane)| {
                lane.lease
                    .as_ref()
                    .is_some_and(|l| l.session.as_ref() == Some(session))
            })
            .map(|(key, _)| key.clone())
            .collect()
    }

    pub(super) fn key_state(&self, key: &LockKey) -> Option<KeyState> {
        self.lanes.get(key).map(|lane| KeyState {
            key: key.clone(),
            lease: lane.lease.as_ref().map(|l| l.info(key)),
            running: lane.running.as_ref().map(|r| r.info.clone()),
            shared: lane
                .shared
                .iter()
                .map(|h| SharedInfo {
                    via: h.via.clone(),
                    client: h.client.clone(),
                    held_by: h.held_by,
                    command: h.command.clone(),
                    since: h.since,
                })
                .collect(),
            queue_len: lane.waiters.len(),
            waiting: lane
                .waiters
                .iter()
                .map(|w| w.want.client().clone())
                .collect(),
        })
    }

    pub(super) fn keys(&self) -> impl Iterator<Item = &LockKey> {
        self.lanes.keys()
    }
}
