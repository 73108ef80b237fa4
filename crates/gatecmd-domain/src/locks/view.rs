//! What the lock manager shows the outside: lease and key state for the
//! `gatecmd://locks` resource and tool output, and the change events that the
//! audit log and MCP notifications consume.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::Serialize;

use super::error::HeldBy;
use super::ids::{ClientName, LeaseId, LockKey, SessionId};

/// A lease as its holder sees it (the answer to `lock_device`).
///
/// Contains the lease id, which is half of the capability to use the key:
/// show it to its holder, not to other clients.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct LeaseInfo {
    /// Pass this as `lease` with each command on the key.
    pub lease_id: LeaseId,
    /// The key the lease holds.
    pub key: LockKey,
    /// The client that took the lease.
    pub holder: ClientName,
    /// Free text the holder gave, shown to others who find the key busy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// When the lease was granted (UTC).
    #[schemars(with = "String")]
    pub acquired_at: DateTime<Utc>,
    /// When the lease ends unless renewed by a command or ended earlier (UTC).
    /// While one of its commands runs the lease does not expire; the TTL
    /// restarts when the command ends.
    #[schemars(with = "String")]
    pub expires_at: DateTime<Utc>,
    /// The lease's time to live, applied again at each renewal.
    pub ttl_secs: u64,
    /// The legacy MCP session that took the lease, if any; the lease ends
    /// with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionId>,
}

/// The command currently running on a key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct RunInfo {
    /// The command as the caller named it (e.g. `rkdeveloptool wl 0 image.img`).
    pub command: String,
    /// The client running it.
    pub client: ClientName,
    /// When it started (UTC).
    #[schemars(with = "String")]
    pub since: DateTime<Utc>,
}

/// A shared hold on a key, taken through a board's own key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct SharedInfo {
    /// The board key the hold is for (`port:1-2`).
    pub via: LockKey,
    /// The client of the command or lease.
    pub client: ClientName,
    /// Whether a lease or a command on `via` holds it.
    pub held_by: HeldBy,
    /// The command, when a command holds it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Since when (UTC).
    #[schemars(with = "String")]
    pub since: DateTime<Utc>,
}

/// One key's state: who leases it, what runs on it, how many wait.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct KeyState {
    /// The key.
    pub key: LockKey,
    /// The lease on the key, if any. Includes the lease id: redact it before
    /// showing the state to a client other than the holder.
    pub lease: Option<LeaseInfo>,
    /// The command running on the key, if any.
    pub running: Option<RunInfo>,
    /// Shared holds: boards of this key in use through their own `port:`
    /// key (a command or a lease on one board). Exclusive users of the key
    /// wait for all of them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shared: Vec<SharedInfo>,
    /// How many requests (commands and leases) wait in the FIFO queue.
    pub queue_len: usize,
    /// Who waits, in queue order: for the bench page only (not part of the MCP
    /// resource, whose shape is interface).
    #[serde(skip)]
    #[schemars(skip)]
    pub waiting: Vec<ClientName>,
}

/// Every key that is leased, in use or waited for, ordered by key, up to the
/// listing limit (`leases.max_listed`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct LocksView {
    /// Keys with any state; a free key with no waiters is not listed.
    pub keys: Vec<KeyState>,
    /// Keys in use beyond the listing limit, left out of `keys` (the last ones
    /// in key order). `LockManager::key_state` still answers for any of them.
    pub omitted: usize,
}

/// What happened, in a [`LockEvent`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LockEventKind {
    /// A lease was granted.
    Taken,
    /// A lease's expiry was pushed back by one of its commands.
    Renewed,
    /// A lease was ended by its holder (or its waiter gave up on it).
    Released,
    /// A lease's TTL ran out.
    Expired,
    /// A lease ended with the legacy MCP session that took it.
    SessionEnded,
    /// An operator ended someone's lease.
    ForceReleased,
    /// A command took the key.
    CommandStarted,
    /// A command gave the key back.
    CommandFinished,
    /// A request was refused; `reason` holds the refusal message.
    Refused,
}

/// One change on one key, broadcast by `LockManager::subscribe`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct LockEvent {
    /// What happened.
    pub kind: LockEventKind,
    /// The key it happened on.
    pub key: LockKey,
    /// The client concerned: the lease holder, the command's client, or the
    /// refused requester.
    pub client: ClientName,
    /// The lease concerned, if any. Meant for the audit log; do not forward
    /// it to other clients.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_id: Option<LeaseId>,
    /// Details: the command line, the operator, or the refusal message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When it happened (UTC).
    #[schemars(with = "String")]
    pub at: DateTime<Utc>,
}
