//! Taking a lease, the one way every surface does: `lock_board` and the labgrid bridge's
//! hold for a place lease a board ([`board`]), `lock_device` a device or a lock key
//! ([`key`]). Each builds its lease request here ([`request`]: the note dropped when blank)
//! and hands it to the lock manager here, so that a rule added to leasing reaches every
//! surface. Each surface words the failures.

pub mod board;
pub mod key;

use std::time::Duration;

use crate::locks::{ClientName, LeaseRequest, LockKey, SessionId};

/// The lease asked for.
pub struct Ask<'a> {
    /// The holder: a client's name, or a labgrid place's holder (`labgrid:PLACE`).
    pub client: &'a str,
    pub session: Option<SessionId>,
    /// The lease's lifetime; the server's default when none.
    pub ttl: Option<Duration>,
    /// Shown to others who find the board busy (blank counts as none).
    pub note: Option<&'a str>,
    /// How long to queue when the key is busy (the caller bounds it).
    pub wait: Duration,
}

/// The lease request for `key`, holding `shared` shared, as `ask` asks for it (waiting
/// `wait`): the one place a lease request is built.
fn request(key: LockKey, shared: Vec<LockKey>, ask: &Ask<'_>, wait: Duration) -> LeaseRequest {
    LeaseRequest {
        key,
        client: ClientName(ask.client.to_string()),
        session: ask.session.clone(),
        ttl: ask.ttl,
        note: ask
            .note
            .filter(|n| !n.trim().is_empty())
            .map(str::to_string),
        wait,
        shared,
    }
}
