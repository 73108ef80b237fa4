//! Leases: taking one (at once or by queueing, with the shared holds of a
//! board lease), and ending it by its holder, an operator, or the end of the
//! legacy session that took it. Expiry is the task in `expiry.rs`.

use super::error::LockError;
use super::error::Retake;
use super::guard::{LeaseUndo, SharedHolds};
use super::ids::{ClientName, LeaseId, LockKey, SessionId};
use super::manager::LockManager;
use super::plan::{lease_plan, with_waited};
use super::request::LeaseRequest;
use super::view::{LeaseInfo, LockEventKind};
use super::want::{Grant, LeaseWant, Want};

impl LockManager {
    /// Takes a lease on `req.key`, waiting up to `req.wait` (FIFO) while
    /// another lease or a running command is in the way.
    ///
    /// Refuses: `ZeroTtl`, `TtlTooLong`, `NoteTooLong`; `AlreadyHeld` if this
    /// client already leases the key (no second lease is made);
    /// `TooManyLeases` / `TooManyWaiters` at the client's limits; `Busy` when
    /// the wait runs out. Works whether or not a device is attached for the key.
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
        if let Some(note) = &req.note
            && note.len() > settings.max_note_bytes
        {
            return Err(LockError::NoteTooLong {
                bytes: note.len(),
                max: settings.max_note_bytes,
            });
        }
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
        let taken = self.shared.with_state(|state| {
            if let Some(held) = state.lease_of(&req.key, &req.client) {
                return Err(LockError::AlreadyHeld {
                    key: held.key,
                    client: held.holder,
                    lease_id: held.lease_id,
                    expires_at: held.expires_at,
                });
            }
            state.check_lease_limit(&req.client)?;
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
        });
        if taken.is_ok() {
            for _ in plan {
                gatecmd_core::metrics::lock_taken_at_once(true);
            }
        }
        taken
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

    /// The lease `lease`, while it lasts (whoever holds it).
    pub fn lease(&self, lease: &LeaseId) -> Option<LeaseInfo> {
        self.shared.with_state(|state| state.lease_info(lease))
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
                    retake: Retake::Either,
                })?;
            if info.holder != *client {
                let err = LockError::NotYourLease {
                    lease_id: lease.clone(),
                    owner: info.holder.clone(),
                    client: client.clone(),
                    retake: Retake::for_keys([&info.key]),
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
                    retake: Retake::Either,
                })?;
            let info = state
                .end_lease(
                    &key,
                    LockEventKind::ForceReleased,
                    Some(format!("force-unlocked by {operator}")),
                )
                .ok_or_else(|| LockError::UnknownLease {
                    lease_id: lease.clone(),
                    retake: Retake::Either,
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
    /// session ends) and returns them. A lease a running command uses (a job
    /// outlives the session that started it) is kept: it leaves the session and
    /// its TTL counts from the command's end, like any lease's.
    pub fn release_session(&self, session: &SessionId) -> Vec<LeaseInfo> {
        self.shared.with_state(|state| {
            let mut ended = Vec::new();
            for key in state.session_keys(session) {
                if let Some(lane) = state.lanes.get_mut(&key)
                    && let (Some(lease), Some(run)) = (lane.lease.as_mut(), lane.running.as_ref())
                    && run.lease.as_ref() == Some(&lease.id)
                {
                    lease.session = None;
                    continue;
                }
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
}
