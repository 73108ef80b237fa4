//! The lock manager's handle: one cheap-to-clone value over the shared lock
//! table, the expiry task's lifetime, the views of the table, and the one
//! primitive every operation builds on (take a key, or queue for it).
//! Commands and leases are in `commands.rs` and `leases.rs`.

use std::sync::Arc;

use gatecmd_core::events::{Broadcast, Events};

use super::error::LockError;
use super::expiry;
use super::guard::WaitGuard;
use super::ids::{ClientName, LockKey};
use super::lane::Shared;
use super::settings::LockSettings;
use super::view::{KeyState, LockEvent, LocksView};
use super::want::{Grant, Ticket, Want};

/// The lock manager: a cheap-to-clone handle to one shared lock table.
///
/// [`LockManager::new`] spawns the expiry task; it stops when
/// [`LockManager::shutdown`] is called or the last clone is dropped.
#[derive(Clone)]
pub struct LockManager {
    pub(super) shared: Arc<Shared>,
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
        let events = Broadcast::new(EVENT_CAPACITY);
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
        self.shared.read(|state| state.settings)
    }

    /// Replaces the settings (a config reload). Leases already granted keep
    /// their TTL, and a client already past a lowered limit keeps what it
    /// holds; the new values apply to every request from now on.
    pub fn set_settings(&self, settings: LockSettings) {
        self.shared.with_state(|state| state.settings = settings);
    }

    /// A stream of every change (and refusal), for the audit log and MCP
    /// notifications. Events carry lease ids: do not forward those to other
    /// clients.
    pub fn subscribe(&self) -> Events<LockEvent> {
        self.shared.read(|state| state.subscribe())
    }

    /// Every key in use, ordered by key, up to `max_listed` of them; the
    /// number left out is in `omitted`, so a long table is never cut silently.
    pub fn snapshot(&self) -> LocksView {
        self.shared.read(|state| {
            let max = state.settings.max_listed;
            let total = state.keys().count();
            LocksView {
                keys: state
                    .keys()
                    .take(max)
                    .filter_map(|key| state.key_state(key))
                    .collect(),
                omitted: total.saturating_sub(max),
            }
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

    /// Takes one key for `want`, queueing if it is busy. No deadline; drop
    /// the future to leave the queue.
    ///
    /// The client's limits are checked here, under the same lock as the take
    /// or the enqueue, so that concurrent requests cannot pass them together.
    pub(super) async fn acquire_key(&self, key: &LockKey, want: Want) -> Result<Grant, LockError> {
        let for_lease = want.is_for_lease();
        let queued = self.shared.with_state(|state| {
            if state.shutdown {
                return Err(LockError::ShutDown);
            }
            if let Want::Lease(l) = &want {
                state.check_lease_limit(&l.client)?;
            }
            let ticket = state.next_ticket();
            Ok(match state.try_take(key, &want, ticket) {
                Ok(grant) => Attempt::Taken(grant),
                Err(_) => {
                    state.check_waiter_limit(want.client())?;
                    Attempt::Queued(ticket, state.enqueue(key, want, ticket))
                }
            })
        })?;
        let (ticket, granted) = match queued {
            Attempt::Taken(grant) => {
                gatecmd_core::metrics::lock_taken_at_once(for_lease);
                return Ok(grant);
            }
            Attempt::Queued(ticket, granted) => (ticket, granted),
        };
        // Dropped with this future when the caller stops waiting: then it counts as given up.
        let timer = gatecmd_core::metrics::lock_queued(for_lease);
        let mut guard = WaitGuard {
            shared: &self.shared,
            key,
            ticket,
            armed: true,
        };
        // The sender is only dropped unsent on shutdown.
        let grant = granted.await.map_err(|_| LockError::ShutDown)?;
        guard.armed = false;
        timer.granted();
        Ok(grant)
    }

    /// Records a refusal on the event stream and passes it through. The
    /// event names the busy key, else `key` (the request's first key).
    pub(super) fn refused(
        &self,
        key: Option<&LockKey>,
        client: &ClientName,
        err: LockError,
    ) -> LockError {
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
    Queued(Ticket, tokio::sync::oneshot::Receiver<Grant>),
}
