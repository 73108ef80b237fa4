//! What a request wants from one key, and what it is given: the vocabulary shared
//! by the lane table, the admission rules and the operations on them.

use std::time::Duration;

use super::ids::{ClientName, LeaseId, LockKey, SessionId};
use super::view::LeaseInfo;

/// Identifies one request (waiter, running command, or the request that
/// created a lease) so that a guard can undo exactly its own grant.
pub(super) type Ticket = u64;

/// What a request wants from a key.
#[derive(Clone)]
pub(super) enum Want {
    /// To run a command: exclusive.
    Command(CommandWant),
    /// To lease the key: exclusive.
    Lease(LeaseWant),
    /// A shared (intention) hold for a command or lease (`of`) on the key
    /// `via` — a board's `port:` key holding its VID:PID key shared.
    Shared { via: LockKey, of: Box<Want> },
}

impl Want {
    pub(super) fn is_shared(&self) -> bool {
        matches!(self, Want::Shared { .. })
    }

    /// The client the request comes from (for a shared hold: its command's or
    /// lease's), whose limits it counts against.
    pub(super) fn client(&self) -> &ClientName {
        match self {
            Want::Command(c) => &c.client,
            Want::Lease(l) => &l.client,
            Want::Shared { of, .. } => of.client(),
        }
    }

    /// Whether the request would end in a lease: a lease, or a shared hold taken
    /// for one.
    pub(super) fn is_for_lease(&self) -> bool {
        match self {
            Want::Command(_) => false,
            Want::Lease(_) => true,
            Want::Shared { of, .. } => of.is_for_lease(),
        }
    }
}

#[derive(Clone)]
pub(super) struct CommandWant {
    pub(super) client: ClientName,
    pub(super) session: Option<SessionId>,
    pub(super) lease: Option<LeaseId>,
    pub(super) command: String,
}

#[derive(Clone)]
pub(super) struct LeaseWant {
    pub(super) client: ClientName,
    pub(super) session: Option<SessionId>,
    pub(super) ttl: Duration,
    pub(super) note: Option<String>,
}

/// What a request was given.
pub(super) enum Grant {
    /// The key is marked as running this ticket's command.
    Command(Ticket),
    /// A new lease.
    Lease(LeaseInfo),
    /// A shared hold under this ticket.
    Shared(Ticket),
}
