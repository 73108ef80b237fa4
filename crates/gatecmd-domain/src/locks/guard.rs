//! RAII values: a command's hold on its keys, and a waiter's place in a
//! queue. Dropping either gives back what it holds and hands the key on, so
//! cancellation (dropping a future) needs no extra code paths.

use std::fmt;
use std::sync::Arc;

use super::ids::LockKey;
use super::lane::Shared;
use super::view::{LeaseInfo, LockEventKind};
use super::want::Ticket;

/// The right to run one command on its keys. Hold it for exactly as long as
/// the command (its process) runs; dropping it frees the keys, renews the
/// lease the command ran under (its TTL restarts), and wakes the next waiter.
#[must_use = "the keys are released as soon as the guard is dropped"]
pub struct CommandGuard {
    pub(super) holds: Vec<KeyHold>,
}

impl CommandGuard {
    /// The keys held, in acquisition (sorted) order. Empty for a command
    /// that touches no device.
    pub fn keys(&self) -> impl Iterator<Item = &LockKey> {
        self.holds.iter().map(|h| &h.key)
    }
}

impl fmt::Debug for CommandGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CommandGuard")
            .field("keys", &self.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// One key marked as running one command.
pub(super) struct KeyHold {
    pub(super) shared: Arc<Shared>,
    pub(super) key: LockKey,
    pub(super) ticket: Ticket,
}

impl Drop for KeyHold {
    fn drop(&mut self) {
        self.shared
            .with_state(|state| state.release_command(&self.key, self.ticket));
    }
}

/// A queued request. Unless defused after the grant was received, dropping
/// it leaves the queue, or, if the key was handed over in the meantime,
/// gives the key back.
pub(super) struct WaitGuard<'a> {
    pub(super) shared: &'a Shared,
    pub(super) key: &'a LockKey,
    pub(super) ticket: Ticket,
    pub(super) armed: bool,
}

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.shared
                .with_state(|state| state.abandon(self.key, self.ticket));
        }
    }
}

/// Shared holds taken for a lease request that is still queueing for its
/// other keys. Dropped before being handed to the lease, it gives them back.
pub(super) struct SharedHolds<'a> {
    pub(super) shared: &'a Shared,
    pub(super) holds: Vec<(LockKey, Ticket)>,
}

impl Drop for SharedHolds<'_> {
    fn drop(&mut self) {
        if self.holds.is_empty() {
            return;
        }
        self.shared.with_state(|state| {
            for (key, ticket) in &self.holds {
                state.release_command(key, *ticket);
            }
        });
    }
}

/// A lease granted to a request that still queues for a later key of its
/// plan. Dropped while still holding it, it ends the lease again.
pub(super) struct LeaseUndo<'a> {
    pub(super) shared: &'a Shared,
    pub(super) taken: Option<LeaseInfo>,
}

impl Drop for LeaseUndo<'_> {
    fn drop(&mut self) {
        if let Some(info) = self.taken.take() {
            self.shared.with_state(|state| {
                state.end_lease(
                    &info.key,
                    LockEventKind::Released,
                    Some("the waiter gave up before receiving the lease".to_owned()),
                );
                state.dispatch(&info.key);
            });
        }
    }
}
