//! Which keys a request takes, in which order, wanting what: the plan that
//! `LockManager` then carries out key by key. Commands take their keys in sorted
//! order, which rules out deadlock between two of them; a lease takes its own key
//! first (see `lease_plan`).

use std::time::Duration;

use super::error::{LockError, Retake, ceil_secs};
use super::ids::LockKey;
use super::lane::State;
use super::request::{CommandLockRequest, LeaseRequest};
use super::want::{CommandWant, Want};

fn sorted(keys: &[LockKey]) -> Vec<LockKey> {
    let mut keys = keys.to_vec();
    keys.sort();
    keys.dedup();
    keys
}

/// A command's keys in acquisition (sorted) order, each with what it wants
/// of it: exclusive keys run the command, the others are held shared for it.
pub(super) fn command_plan(req: &CommandLockRequest) -> Vec<(LockKey, Want)> {
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

/// A lease's key and its shared keys, in acquisition order: the leased key first, then
/// the shared keys sorted.
///
/// The leased key comes first because a request still queued for it must hold nothing: a
/// board lease's shared hold on the board's VID:PID, taken while the request waited for
/// `board:NAME`, kept the board's holder from running its own commands on that device
/// until the waiter gave up. Once the key is leased, the shared keys can only be kept
/// out by a running command (which ends) or by a lease on that VID:PID (docs/LOCKS.md
/// "Boards": a wait that is bounded by `wait_secs`).
pub(super) fn lease_plan(req: &LeaseRequest, want: &Want) -> Vec<(LockKey, Want)> {
    let mut plan: Vec<(LockKey, Want)> = vec![(req.key.clone(), want.clone())];
    plan.extend(
        sorted(&req.shared)
            .into_iter()
            .filter(|k| *k != req.key)
            .map(|k| {
                let shared = Want::Shared {
                    via: req.key.clone(),
                    of: Box::new(want.clone()),
                };
                (k, shared)
            }),
    );
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
pub(super) fn check_presented_lease(
    state: &State,
    req: &CommandLockRequest,
) -> Result<(), LockError> {
    let Some(id) = &req.lease else {
        return Ok(());
    };
    let info = state
        .lease_info(id)
        .ok_or_else(|| LockError::UnknownLease {
            lease_id: id.clone(),
            retake: Retake::for_keys(&req.keys),
        })?;
    if info.holder != req.client {
        return Err(LockError::NotYourLease {
            lease_id: id.clone(),
            owner: info.holder,
            client: req.client.clone(),
            retake: Retake::for_keys(&req.keys),
        });
    }
    Ok(())
}

pub(super) fn with_waited(err: LockError, wait: Duration) -> LockError {
    match err {
        LockError::Busy(mut busy) => {
            busy.waited_secs = ceil_secs(wait);
            LockError::Busy(busy)
        }
        other => other,
    }
}
