//! What callers ask the lock manager for: one command on some keys, or a lease on
//! one key.

use std::time::Duration;

use super::ids::{ClientName, LeaseId, LockKey, SessionId};

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
