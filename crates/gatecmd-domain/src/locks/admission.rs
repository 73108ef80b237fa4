//! Who may take a key, and when: the admission rules of the lock table.
//!
//! - A lease admits only its holder's commands (with its id, or from the legacy
//!   session that took it) and its holder's board holds.
//! - Exclusive wants (command, lease) need the key free of running commands,
//!   of leases that do not admit them and of shared holds; shared wants coexist.
//! - FIFO hand-off: a released key goes to the first waiter that may take it; a
//!   shared want does not overtake an exclusive one queued before it.
//! - Per-client limits: how many leases one client may hold, and how many
//!   requests it may have waiting.
//!
//! Pure functions of the table; nothing here changes it.

use tokio::time::Instant;

use super::error::{BusyInfo, HeldBy, LockError, ceil_secs};
use super::ids::{ClientName, LeaseId, LockKey, SessionId};
use super::lane::{Lane, Lease, LeaseOwner, SharedHold, State, Waiter};
use super::want::{CommandWant, Want};

impl LeaseOwner {
    /// Whether the lease this hold belongs to authorizes the command (see
    /// [`Lease::authorizes`]).
    pub(super) fn authorizes(&self, want: &CommandWant) -> bool {
        authorizes(&self.id, &self.holder, self.session.as_ref(), want)
    }
}

/// Whether a command may run under a lease: it presents the lease id and
/// comes from the holder, or presents none and comes from the legacy session
/// that took the lease.
fn authorizes(
    id: &LeaseId,
    holder: &ClientName,
    session: Option<&SessionId>,
    want: &CommandWant,
) -> bool {
    if want.client != *holder {
        return false;
    }
    match &want.lease {
        Some(presented) => presented == id,
        None => want.session.is_some() && want.session.as_ref() == session,
    }
}

impl Lease {
    /// Whether a command may run under this lease: it presents the lease id
    /// and comes from the holder, or presents none and comes from the legacy
    /// session that took the lease.
    pub(super) fn authorizes(&self, want: &CommandWant) -> bool {
        authorizes(&self.id, &self.holder, self.session.as_ref(), want)
    }

    /// Whether a shared hold for `want` may be taken on the leased key: a
    /// command the lease authorizes, or a lease of the same holder.
    pub(super) fn admits_shared(&self, of: &Want) -> bool {
        match of {
            Want::Command(c) => self.authorizes(c),
            Want::Lease(l) => l.client == self.holder,
            Want::Shared { .. } => false,
        }
    }
}

/// Who is in the way of `want` on `lane`, or `None` if it may take the key.
/// `ahead` are the waiters queued before the request.
///
/// - An exclusive want (command, lease) needs no running command, no lease
///   (or, for a command, one that authorizes it) and no shared hold (except
///   those of a lease that authorizes the command).
/// - A shared want needs no running command and no lease (or one that admits
///   it), and no exclusive waiter ahead that only shared holds keep out: a
///   stream of board commands must not starve a whole-VID:PID command.
pub(super) fn blocker<'a>(
    key: &LockKey,
    lane: &Lane,
    want: &Want,
    mut ahead: impl Iterator<Item = &'a Waiter>,
) -> Option<BusyInfo> {
    if exclusive_blocked(lane, want) {
        return lane_busy(key, lane);
    }
    if want.is_shared() {
        let starved = ahead.any(|w| {
            !w.want.is_shared()
                && !exclusive_blocked(lane, &w.want)
                && shared_blocker(lane, &w.want).is_some()
        });
        if starved {
            return lane.shared.first().map(|h| shared_busy(key, lane, h));
        }
        return None;
    }
    shared_blocker(lane, want).map(|h| shared_busy(key, lane, h))
}

/// Whether the running command or the lease keeps `want` out.
fn exclusive_blocked(lane: &Lane, want: &Want) -> bool {
    lane.running.is_some()
        || match (&lane.lease, want) {
            (None, _) => false,
            (Some(_), Want::Lease(_)) => true,
            (Some(lease), Want::Command(c)) => !lease.authorizes(c),
            (Some(lease), Want::Shared { of, .. }) => !lease.admits_shared(of),
        }
}

/// The first shared hold that keeps the exclusive `want` out.
fn shared_blocker<'a>(lane: &'a Lane, want: &Want) -> Option<&'a SharedHold> {
    lane.shared.iter().find(|h| match (want, &h.owner) {
        (Want::Command(c), Some(owner)) => !owner.authorizes(c),
        (Want::Shared { .. }, _) => false,
        _ => true,
    })
}

fn lane_busy(key: &LockKey, lane: &Lane) -> Option<BusyInfo> {
    let command = lane.running.as_ref().map(|r| r.info.command.clone());
    Some(match (&lane.lease, &lane.running) {
        (Some(lease), _) => BusyInfo {
            key: key.clone(),
            holder: lease.holder.clone(),
            held_by: HeldBy::Lease,
            note: lease.note.clone(),
            command,
            since: lease.acquired_at,
            expires_at: Some(lease.expires_at),
            expires_in_secs: Some(ceil_secs(
                lease.deadline.saturating_duration_since(Instant::now()),
            )),
            ttl_secs: Some(lease.ttl.as_secs()),
            queue_len: lane.waiters.len(),
            waited_secs: 0,
            via: None,
        },
        (None, Some(running)) => BusyInfo {
            key: key.clone(),
            holder: running.info.client.clone(),
            held_by: HeldBy::Command,
            note: None,
            command,
            since: running.info.since,
            expires_at: None,
            expires_in_secs: None,
            ttl_secs: None,
            queue_len: lane.waiters.len(),
            waited_secs: 0,
            via: None,
        },
        // Only called when a lease or a running command is in the way.
        (None, None) => return None,
    })
}

fn shared_busy(key: &LockKey, lane: &Lane, h: &SharedHold) -> BusyInfo {
    BusyInfo {
        key: key.clone(),
        holder: h.client.clone(),
        held_by: h.held_by,
        note: None,
        command: h.command.clone(),
        since: h.since,
        expires_at: None,
        expires_in_secs: None,
        ttl_secs: None,
        queue_len: lane.waiters.len(),
        waited_secs: 0,
        via: Some(h.via.clone()),
    }
}

/// The first waiter in `lane`'s queue that may take the key now, if any. A waiter
/// that cannot take it yet (a stranger behind a lease) does not block one that can
/// (the lease holder's own command); the rules above keep a shared want from
/// overtaking an exclusive one queued before it.
pub(super) fn next_admissible(key: &LockKey, lane: &Lane) -> Option<usize> {
    (0..lane.waiters.len())
        .find(|&i| blocker(key, lane, &lane.waiters[i].want, lane.waiters.range(..i)).is_none())
}

impl State {
    /// Refuses a lease request of `client` at its lease limit. Leases it holds and
    /// lease requests it has waiting both count, so that granting a waiter never
    /// takes the client past the limit.
    ///
    /// A scan rather than a per-client counter: the table holds at most the
    /// limits times the configured clients, and a counter would have to be kept
    /// right on every path that ends a lease or a wait.
    pub(super) fn check_lease_limit(&self, client: &ClientName) -> Result<(), LockError> {
        let held = self
            .leases
            .values()
            .filter_map(|key| self.lanes.get(key)?.lease.as_ref())
            .filter(|lease| lease.holder == *client)
            .count();
        let waiting = self
            .waiters_of(client)
            .filter(|w| w.want.is_for_lease())
            .count();
        let max = self.settings.max_leases_per_client;
        if held + waiting >= max {
            return Err(LockError::TooManyLeases {
                client: client.clone(),
                held: held + waiting,
                max,
            });
        }
        Ok(())
    }

    /// Refuses to queue one more request of `client` at its waiter limit.
    pub(super) fn check_waiter_limit(&self, client: &ClientName) -> Result<(), LockError> {
        let waiting = self.waiters_of(client).count();
        let max = self.settings.max_waiters_per_client;
        if waiting >= max {
            return Err(LockError::TooManyWaiters {
                client: client.clone(),
                waiting,
                max,
            });
        }
        Ok(())
    }

    /// Every queued request of `client`, on any key.
    fn waiters_of<'a>(&'a self, client: &'a ClientName) -> impl Iterator<Item = &'a Waiter> {
        self.lanes
            .values()
            .flat_map(|lane| lane.waiters.iter())
            .filter(move |w| w.want.client() == client)
    }
}
