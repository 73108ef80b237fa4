//! The lock manager's settings: how long leases live, and how much of the table one
//! client may fill. Every limit has a default, so a config without a `leases:`
//! section gets a bounded table.

use std::time::Duration;

use crate::config::LeaseSettings;

/// Longest a caller may queue for a key (`wait_secs` of `execute_command`, `lock_device`
/// and `lock_board`). The manager's waits have no deadline of their own; each caller caps
/// the one it asks for with this.
pub const MAX_WAIT_SECS: u64 = 3600;

/// How long leases live, and the limits on what one client may hold or queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockSettings {
    /// TTL of a lease that does not ask for one (clamped to `max_ttl`).
    pub default_ttl: Duration,
    /// Longest TTL a lease may ask for.
    pub max_ttl: Duration,
    /// Leases one client may hold at once; a lease request that waits in a queue
    /// counts against it too, so a granted waiter never takes the client past it.
    pub max_leases_per_client: usize,
    /// Requests (lease and command waits) one client may have queued at once, over
    /// all keys.
    pub max_waiters_per_client: usize,
    /// Longest lease note, in bytes. A longer one is refused, not truncated.
    pub max_note_bytes: usize,
    /// Most keys one `LocksView` (a snapshot, `list_locks`) lists; the rest are
    /// counted in its `omitted`.
    pub max_listed: usize,
}

impl Default for LockSettings {
    /// The `leases:` section's defaults (declared there, once).
    fn default() -> Self {
        LockSettings::from(&LeaseSettings::default())
    }
}

impl From<&LeaseSettings> for LockSettings {
    /// The lock manager's settings from the config's `leases:` section (at start, and
    /// again for `LockManager::set_settings` on reload).
    fn from(leases: &LeaseSettings) -> Self {
        LockSettings {
            default_ttl: Duration::from_secs(leases.default_ttl_secs),
            max_ttl: Duration::from_secs(leases.max_ttl_secs),
            max_leases_per_client: leases.max_leases_per_client,
            max_waiters_per_client: leases.max_waiters_per_client,
            max_note_bytes: leases.max_note_bytes,
            max_listed: leases.max_listed,
        }
    }
}
