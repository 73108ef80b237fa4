//! Locks on devices: who may run a command on a board, and when.
//!
//! Each [`LockKey`] has a lane holding at most one lease, at most one running
//! command, and a FIFO queue of waiters (lease requests and command requests
//! in one queue). The rules, in short (docs/LOCKS.md has the long form):
//!
//! - **One command per key at a time**, always — even two commands of the
//!   same lease run one after the other.
//! - **A lease** ([`LockManager::lock`]) holds a key across commands. While
//!   it lives, only commands carrying its id from its client (or, with no id,
//!   from the legacy MCP session that took it) run on the key; everyone else
//!   waits or is refused. It renews with each of its commands, never expires
//!   while one of them runs, and ends by [`LockManager::unlock`], expiry,
//!   [`LockManager::force_unlock`] or [`LockManager::release_session`].
//! - **Waiting** is FIFO. A released key is handed straight to the first
//!   waiter that may take it, so a newcomer never barges in. Waiting has no
//!   deadline of its own: wrap it in a timeout, and drop the future to leave
//!   the queue ([`LockManager::acquire_for_command_wait`] does both).
//! - **Several keys** are taken in sorted order, so two commands never
//!   deadlock; a command never keeps some keys after failing to get others.
//! - **Shared holds** (intention locks): a command or lease on one board
//!   (`port:1-2`) also holds the board's VID:PID key *shared*. Any number of
//!   board holds coexist; a whole-VID:PID command or lease (exclusive) waits
//!   for all of them, and they wait for it. A queued exclusive request is
//!   not overtaken by later shared ones.
//!
//! Everything is in memory: a restart releases every lease.

mod error;
mod expiry;
mod guard;
mod ids;
mod lane;
mod view;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast;

pub use error::{BusyInfo, HeldBy, LockError};
pub use guard::CommandGuard;
pub use ids::{ClientName, LeaseId, LockKey, ParseLockKeyError, SessionId};
pub use view::{KeyState, LeaseInfo, LockEvent, LockEventKind, LocksView, RunInfo, SharedInfo};

use error::ceil_secs;
use guard::{KeyHold, LeaseUndo, SharedHolds, WaitGuard};
use lane::{CommandWant, Grant, LeaseWant, Shared, Want};

/// How long leases live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockSettings {
    /// TTL of a lease that does not ask for one (clamped to `max_ttl`).
    pub default_ttl: Duration,
    /// Longest TTL a lease may ask for.
    pub max_ttl: Duration,
}

impl Default for LockSettings {
    /// 10 minutes by default, at most an hour.
    fn default() -> Self {
        LockSettings {
            default_ttl: Duration::from_secs(600),
            max_ttl: Duration::from_secs(3600),
        }
    }
}

/// A request to run one command on some keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandLockRequest {
    /// Every key the command touches; order and duplicates do not matter.
    pub keys: Vec<LockKey>,
    /// Keys held shared for the command's duration: the VID:PID (or group)
    /// key of the board an isolated command runs on. A key also in `keys`
    /// is taken exclusively only.
    pub shared: Vec<LockKey>,
    /// Who asks.
    pub client: ClientName,
    /// The legacy MCP session it comes from, if any.
    pub session: Option<SessionId>,
    /// The lease the caller presents, if any.
    pub lease: Option<LeaseId>,
    /// The command line, shown to others who find the key busy.
    pub command: String,
}

/// A request for a lease on one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRequest {
    /// The key to lease.
    pub key: LockKey,
    /// Who asks; becomes the holder.
    pub client: ClientName,
    /// The legacy MCP session it comes from, if any; the lease then ends
    /// with that session, and commands from it may omit the lease id.
    pub session: Option<SessionId>,
    /// Time to live; `None` for the default. Zero and more than the maximum
    /// are refused.
    pub ttl: Option<Duration>,
    /// Shown to others who find the key busy.
    pub note: Option<String>,
    /// How long to queue if the key is busy; zero refuses at once.
    pub wait: Duration,
    /// Keys held shared while the lease lives: for a board lease
    /// (`port:1-2`), the board's VID:PID key, so that nobody takes the whole
    /// VID:PID meanwhile.
    pub shared: Vec<LockKey>,
}

/// The lock manager: a cheap-to-clone handle to one shared lock table.
///
/// [`LockManager::new`] spawns the expiry task; it stops when
/// [`LockManager::shutdown`] is called or the last clone is dropped.
#[derive(Clone)]
pub struct LockManager {
    shared: Arc<Shared>,
    /// Shared by the clones only (not by guards or the expiry task), so its
    /// drop marks the moment the last handle went away.
    _stop: Arc<StopOnDrop>,
}

struct StopOnDrop(Arc<Shared>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        stop(&self.0);
    }
}

fn stop(shared: &Shared) {
    shared.with_state(|state| state.shut_down());
    shared.expiry.notify_one();
}

/// Capacity of the event channel: a subscriber more than this many events
/// behind gets `Lagged` and should resynchronise from [`LockManager::snapshot`].
const EVENT_CAPACITY: usize = 1024;

impl LockManager {
    /// Creates an empty lock table and spawns its expiry task.
    ///
    /// # Panics
    /// Outside a tokio runtime (it spawns a task).
    pub fn new(settings: LockSettings) -> Self {
        let (events, _) = broadcast::channel(EVENT_CAPACITY);
        let shared = Arc::new(Shared::new(settings, events));
        tokio::spawn(expiry::run(Arc::clone(&shared)));
        LockManager {
            _stop: Arc::new(StopOnDrop(Arc::clone(&shared))),
            shared,
        }
    }

    /// Stops the expiry task and ends every queued wait with
    /// [`LockError::ShutDown`]. Held keys stay held until their guards drop;
    /// leases no longer expire.
    pub fn shutdown(&self) {
        stop(&self.shared);
    }

    /// The settings in force.
    pub fn settings(&self) -> LockSettings {
        *self
            .shared
            .settings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Replaces the settings (config reload): new leases get the new TTLs; a lease
    /// already granted keeps its own.
    pub fn set_settings(&self, settings: LockSettings) {
        *self
            .shared
            .settings
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = settings;
    }

    /// A stream of every change (and refusal), for the audit log and MCP
    /// notifications. Events carry lease ids: do not forward those to other
    /// clients.
    pub fn subscribe(&self) -> broadcast::Receiver<LockEvent> {
        self.shared.read(|state| state.subscribe())
    }

    /// Every key in use, ordered by key.
    pub fn snapshot(&self) -> LocksView {
        self.shared.read(|state| LocksView {
            keys: state
                .keys()
                .filter_map(|key| state.key_state(key))
                .collect(),
        })
    }

    /// One key's state; `None` when it is free and nobody waits for it.
    pub fn key_state(&self, key: &LockKey) -> Option<KeyState> {
        self.shared.read(|state| state.key_state(key))
    }

    /// A number that moves whenever the table may have changed (a lease, a command, a
    /// waiter). Read it before deriving a view from [`LockManager::key_state`]: while it
    /// has the same value, the view is current.
    pub fn version(&self) -> u64 {
        self.shared.version()
    }

    /// Takes every key of `req` for one command, or refuses at once.
    ///
    /// Refuses with `UnknownLease` / `NotYourLease` for a bad lease, and with
    /// `Busy` (naming the holder of the first busy key) if any key is taken;
    /// in that case no key is taken.
    pub fn try_acquire_for_command(
        &self,
        req: CommandLockRequest,
    ) -> Result<CommandGuard, LockError> {
        let plan = command_plan(&req);
        self.try_command(&plan, &req)
            .map_err(|err| self.refused(plan.first().map(|(k, _)| k), &req.client, err))
    }

    /// Takes every key of `req` for one command, queueing (FIFO) for each
    /// busy key in sorted order, with no deadline: wrap it in
    /// `tokio::time::timeout`, or use
    /// [`LockManager::acquire_for_command_wait`]. Dropping the future leaves
    /// the queue at once and releases any key already taken.
    ///
    /// A bad lease is refused at once; a valid one of another client gives
    /// `NotYourLease` rather than waiting.
    pub async fn acquire_for_command(
        &self,
        req: CommandLockRequest,
    ) -> Result<CommandGuard, LockError> {
        let plan = command_plan(&req);
        self.shared
            .read(|state| check_presented_lease(state, &req))
            .map_err(|err| self.refused(plan.first().map(|(k, _)| k), &req.client, err))?;
        let mut holds = Vec::with_capacity(plan.len());
        for (key, want) in plan {
            match self.acquire_key(&key, want).await? {
                Grant::Command(ticket) | Grant::Shared(ticket) => holds.push(KeyHold {
                    shared: Arc::clone(&self.shared),
                    key,
                    ticket,
                }),
                Grant::Lease(_) => unreachable!("a command request is granted a command"),
            }
        }
        Ok(CommandGuard { holds })
    }

    /// Takes every key of `req` for one command, waiting up to `wait` in the
    /// queue. `wait` zero refuses at once. When the wait runs out the error is
    /// `Busy` for the key still in the way, with `waited_secs` set.
    pub async fn acquire_for_command_wait(
        &self,
        req: CommandLockRequest,
        wait: Duration,
    ) -> Result<CommandGuard, LockError> {
        if wait.is_zero() {
            return self.try_acquire_for_command(req);
        }
        match tokio::time::timeout(wait, self.acquire_for_command(req.clone())).await {
            Ok(result) => result,
            // The queue place is gone; one last look, so that a key freed at
            // the very end of the wait is not refused, and so the refusal
            // names whoever is in the way now.
            Err(_elapsed) => {
                let plan = command_plan(&req);
                self.try_command(&plan, &req).map_err(|err| {
                    self.refused(
                        plan.first().map(|(k, _)| k),
                        &req.client,
                        with_waited(err, wait),
                    )
                })
            }
        }
    }

    /// Takes a lease on `req.key`, waiting up to `req.wait` (FIFO) while
    /// another lease or a running command is in the way.
    ///
    /// Refuses: `ZeroTtl`, `TtlTooLong`; `AlreadyHeld` if this client
    /// already leases the key (no second lease is made); `Busy` when the wait
    /// runs out. Works whether or not a device is attached for the key.
    pub async fn lock(&self, req: LeaseRequest) -> Result<LeaseInfo, LockError> {
        let result = self.lock_inner(&req).await;
        result.map_err(|err| self.refused(Some(&req.key), &req.client, err))
    }

    async fn lock_inner(&self, req: &LeaseRequest) -> Result<LeaseInfo, LockError> {
        let settings = self.settings();
        let ttl = match req.ttl {
            None => settings.default_ttl.min(settings.max_ttl),
            Some(ttl) if ttl.is_zero() => {
                return Err(LockError::ZeroTtl {
                    default: settings.default_ttl,
                });
            }
            Some(ttl) if ttl > settings.max_ttl => {
                return Err(LockError::TtlTooLong {
                    requested: ttl,
                    max: settings.max_ttl,
                });
            }
            Some(ttl) => ttl,
        };
        let want = Want::Lease(LeaseWant {
            client: req.client.clone(),
            session: req.session.clone(),
            ttl,
            note: req.note.clone(),
        });
        let plan = lease_plan(req, &want);
        let busy = match self.try_lease(req, &plan) {
            Ok(info) => return Ok(info),
            Err(LockError::Busy(_)) if !req.wait.is_zero() => {
                match tokio::time::timeout(req.wait, self.lease_queued(&req.key, &plan)).await {
                    Ok(result) => return result,
                    Err(_elapsed) => self.try_lease(req, &plan),
                }
            }
            Err(err) => return Err(err),
        };
        busy.map_err(|err| with_waited(err, req.wait))
    }

    /// The lease (and its shared holds) of `plan`, now or never.
    fn try_lease(
        &self,
        req: &LeaseRequest,
        plan: &[(LockKey, Want)],
    ) -> Result<LeaseInfo, LockError> {
        self.shared.with_state(|state| {
            if let Some(held) = state.lease_of(&req.key, &req.client) {
                return Err(LockError::AlreadyHeld {
                    key: held.key,
                    client: held.holder,
                    lease_id: held.lease_id,
                    expires_at: held.expires_at,
                });
            }
            // Check every key before claiming any: a refusal leaves no trace.
            if let Some(busy) = plan.iter().find_map(|(key, want)| state.blocker(key, want)) {
                return Err(LockError::Busy(Box::new(busy)));
            }
            let mut info = None;
            let mut holds = Vec::new();
            for (key, want) in plan {
                let ticket = state.next_ticket();
                match state.try_take(key, want, ticket) {
                    Ok(Grant::Lease(i)) => info = Some(i),
                    Ok(Grant::Shared(t)) => holds.push((key.clone(), t)),
                    Ok(Grant::Command(_)) => unreachable!("a lease request is granted a lease"),
                    // Unreachable after the check above.
                    Err(busy) => return Err(LockError::Busy(busy)),
                }
            }
            let info = info.ok_or(LockError::ShutDown)?;
            state.attach_shared(&req.key, &info.lease_id, holds);
            Ok(info)
        })
    }

    /// Queues for every key of a lease's `plan` in order, then ties the
    /// shared holds to the new lease. Dropping the future gives back
    /// whatever was taken so far, the lease included.
    async fn lease_queued(
        &self,
        key: &LockKey,
        plan: &[(LockKey, Want)],
    ) -> Result<LeaseInfo, LockError> {
        let mut holds = SharedHolds {
            shared: &self.shared,
            holds: Vec::new(),
        };
        let mut lease = LeaseUndo {
            shared: &self.shared,
            taken: None,
        };
        for (k, want) in plan {
            match self.acquire_key(k, want.clone()).await? {
                Grant::Shared(ticket) => holds.holds.push((k.clone(), ticket)),
                Grant::Lease(info) => lease.taken = Some(info),
                Grant::Command(_) => unreachable!("a lease request is granted a lease"),
            }
        }
        let info = lease.taken.take().ok_or(LockError::ShutDown)?;
        let taken = std::mem::take(&mut holds.holds);
        self.shared
            .with_state(|state| state.attach_shared(key, &info.lease_id, taken));
        Ok(info)
    }

    /// Ends `client`'s lease `lease` and hands the key on.
    ///
    /// Refuses `NotYourLease` for another client's lease (it stays) and
    /// `UnknownLease` for one that is gone. If a command of the lease is
    /// running, the lease ends now (its id stops working) but the key stays
    /// with that command until it finishes, then passes to the queue.
    pub fn unlock(&self, lease: &LeaseId, client: &ClientName) -> Result<LeaseInfo, LockError> {
        self.shared.with_state(|state| {
            let info = state
                .lease_info(lease)
                .ok_or_else(|| LockError::UnknownLease {
                    lease_id: lease.clone(),
                })?;
            if info.holder != *client {
                let err = LockError::NotYourLease {
                    lease_id: lease.clone(),
                    owner: info.holder.clone(),
                    client: client.clone(),
                };
                state.emit_refused(&info.key, client, err.to_string());
                return Err(err);
            }
            state.end_lease(&info.key, LockEventKind::Released, None);
            state.dispatch(&info.key);
            Ok(info)
        })
    }

    /// Ends any client's lease, for an operator. Logged at warn. A running
    /// command of the lease keeps the key until it finishes, as with
    /// [`LockManager::unlock`].
    pub fn force_unlock(&self, lease: &LeaseId, operator: &str) -> Result<LeaseInfo, LockError> {
        self.shared.with_state(|state| {
            let key = state
                .lease_key(lease)
                .cloned()
                .ok_or_else(|| LockError::UnknownLease {
                    lease_id: lease.clone(),
                })?;
            let info = state
                .end_lease(
                    &key,
                    LockEventKind::ForceReleased,
                    Some(format!("force-unlocked by {operator}")),
                )
                .ok_or_else(|| LockError::UnknownLease {
                    lease_id: lease.clone(),
                })?;
            tracing::warn!(
                operator,
                key = %key,
                holder = %info.holder,
                lease = %lease,
                "lease force-unlocked"
            );
            state.dispatch(&key);
            Ok(info)
        })
    }

    /// Ends every lease taken in the legacy MCP `session` (call it when the
    /// session ends) and returns them.
    pub fn release_session(&self, session: &SessionId) -> Vec<LeaseInfo> {
        self.shared.with_state(|state| {
            let mut ended = Vec::new();
            for key in state.session_keys(session) {
                ended.extend(state.end_lease(
                    &key,
                    LockEventKind::SessionEnded,
                    Some(format!("session {session} ended")),
                ));
                state.dispatch(&key);
            }
            ended
        })
    }

    /// Takes one key for `want`, queueing if it is busy. No deadline; drop
    /// the future to leave the queue.
    async fn acquire_key(&self, key: &LockKey, want: Want) -> Result<Grant, LockError> {
        let queued = self.shared.with_state(|state| {
            if state.shutdown {
                return Err(LockError::ShutDown);
            }
            let ticket = state.next_ticket();
            Ok(match state.try_take(key, &want, ticket) {
                Ok(grant) => Attempt::Taken(grant),
                Err(_) => Attempt::Queued(ticket, state.enqueue(key, want, ticket)),
            })
        })?;
        let (ticket, granted) = match queued {
            Attempt::Taken(grant) => return Ok(grant),
            Attempt::Queued(ticket, granted) => (ticket, granted),
        };
        let mut guard = WaitGuard {
            shared: &self.shared,
            key,
            ticket,
            armed: true,
        };
        // The sender is only dropped unsent on shutdown.
        let grant = granted.await.map_err(|_| LockError::ShutDown)?;
        guard.armed = false;
        Ok(grant)
    }

    /// All keys of a command at once, or none.
    fn try_command(
        &self,
        plan: &[(LockKey, Want)],
        req: &CommandLockRequest,
    ) -> Result<CommandGuard, LockError> {
        let tickets = self.shared.with_state(|state| {
            check_presented_lease(state, req)?;
            // Check every key before claiming any, so a refusal leaves no
            // trace (no half-taken keys, no start/finish events).
            if let Some(busy) = plan.iter().find_map(|(key, want)| state.blocker(key, want)) {
                return Err(LockError::Busy(Box::new(busy)));
            }
            let mut tickets = Vec::with_capacity(plan.len());
            for (key, want) in plan {
                let ticket = state.next_ticket();
                match state.try_take(key, want, ticket) {
                    Ok(_) => tickets.push(ticket),
                    Err(busy) => {
                        // Unreachable after the check above; undo for safety.
                        for ((key, _), ticket) in plan.iter().zip(tickets) {
                            state.release_command(key, ticket);
                        }
                        return Err(LockError::Busy(busy));
                    }
                }
            }
            Ok(tickets)
        })?;
        Ok(CommandGuard {
            holds: plan
                .iter()
                .zip(tickets)
                .map(|((key, _), ticket)| KeyHold {
                    shared: Arc::clone(&self.shared),
                    key: key.clone(),
                    ticket,
                })
                .collect(),
        })
    }

    /// Records a refusal on the event stream and passes it through. The
    /// event names the busy key, else `key` (the request's first key).
    fn refused(&self, key: Option<&LockKey>, client: &ClientName, err: LockError) -> LockError {
        if let Some(key) = err.busy().map(|b| &b.key).or(key) {
            self.shared
                .with_state(|state| state.emit_refused(key, client, err.to_string()));
        }
        err
    }
}

impl std::fmt::Debug for LockManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockManager")
            .field("settings", &self.settings())
            .finish_non_exhaustive()
    }
}

/// The outcome of the first look at a key in [`LockManager::acquire_key`].
enum Attempt {
    Taken(Grant),
    Queued(lane::Ticket, tokio::sync::oneshot::Receiver<Grant>),
}

fn sorted(keys: &[LockKey]) -> Vec<LockKey> {
    let mut keys = keys.to_vec();
    keys.sort();
    keys.dedup();
    keys
}

/// A command's keys in acquisition (sorted) order, each with what it wants
/// of it: exclusive keys run the command, the others are held shared for it.
fn command_plan(req: &CommandLockRequest) -> Vec<(LockKey, Want)> {
    let c = command_want(req);
    let exclusive = sorted(&req.keys);
    // The shared hold is shown as being "through" the board's own key.
    let via = exclusive
        .iter()
        .find(|k| matches!(k, LockKey::Port(_)))
        .or(exclusive.first())
        .cloned();
    let mut plan: Vec<(LockKey, Want)> = sorted(&req.shared)
        .into_iter()
        .filter(|k| !exclusive.contains(k))
        .map(|k| {
            let want = Want::Shared {
                via: via.clone().unwrap_or_else(|| k.clone()),
                of: Box::new(Want::Command(c.clone())),
            };
            (k, want)
        })
        .collect();
    plan.extend(exclusive.into_iter().map(|k| (k, Want::Command(c.clone()))));
    plan.sort_by(|a, b| a.0.cmp(&b.0));
    plan
}

/// A lease's key and its shared keys, in acquisition (sorted) order.
fn lease_plan(req: &LeaseRequest, want: &Want) -> Vec<(LockKey, Want)> {
    let mut plan: Vec<(LockKey, Want)> = sorted(&req.shared)
        .into_iter()
        .filter(|k| *k != req.key)
        .map(|k| {
            let shared = Want::Shared {
                via: req.key.clone(),
                of: Box::new(want.clone()),
            };
            (k, shared)
        })
        .collect();
    plan.push((req.key.clone(), want.clone()));
    plan.sort_by(|a, b| a.0.cmp(&b.0));
    plan
}

fn command_want(req: &CommandLockRequest) -> CommandWant {
    CommandWant {
        client: req.client.clone(),
        session: req.session.clone(),
        lease: req.lease.clone(),
        command: req.command.clone(),
    }
}

/// A presented lease must exist and be the caller's. Checked before any
/// queueing: waiting would not change the answer.
fn check_presented_lease(state: &lane::State, req: &CommandLockRequest) -> Result<(), LockError> {
    let Some(id) = &req.lease else {
        return Ok(());
    };
    let info = state
        .lease_info(id)
        .ok_or_else(|| LockError::UnknownLease {
            lease_id: id.clone(),
        })?;
    if info.holder != req.client {
        return Err(LockError::NotYourLease {
            lease_id: id.clone(),
            owner: info.holder,
            client: req.client.clone(),
        });
    }
    Ok(())
}

fn with_waited(err: LockError, wait: Duration) -> LockError {
    match err {
        LockError::Busy(mut busy) => {
            busy.waited_secs = ceil_secs(wait);
            LockError::Busy(busy)
        }
        other => other,
    }
}
