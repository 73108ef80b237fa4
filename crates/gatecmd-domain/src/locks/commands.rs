//! Locks for one command: all of its keys, in sorted order, at once or by
//! queueing, released when its guard drops.

use std::sync::Arc;
use std::time::Duration;

use super::error::LockError;
use super::guard::{CommandGuard, KeyHold};
use super::ids::LockKey;
use super::manager::LockManager;
use super::plan::{check_presented_lease, command_plan, with_waited};
use super::request::CommandLockRequest;
use super::want::{Grant, Want};

impl LockManager {
    /// Takes every key of `req` for one command, or refuses at once.
    ///
    /// Refuses with `UnknownLease` / `NotYourLease` for a bad lease, and with
    /// `Busy` (naming the holder of the first busy key) if any key is taken;
    /// in that case no key is taken.
    pub fn try_acquire_for_command(
        &self,
        req: CommandLockRequest,
    ) -> Result<CommandGuard, LockError> {
        let plan = command_plan(&req);
        self.try_command(&plan, &req)
            .map_err(|err| self.refused(plan.first().map(|(k, _)| k), &req.client, err))
    }

    /// Takes every key of `req` for one command, queueing (FIFO) for each
    /// busy key in sorted order, with no deadline: wrap it in
    /// `tokio::time::timeout`, or use
    /// [`LockManager::acquire_for_command_wait`]. Dropping the future leaves
    /// the queue at once and releases any key already taken.
    ///
    /// A bad lease is refused at once; a valid one of another client gives
    /// `NotYourLease` rather than waiting. A client with as many requests
    /// waiting as its limit allows gets `TooManyWaiters` instead of a queue
    /// place.
    pub async fn acquire_for_command(
        &self,
        req: CommandLockRequest,
    ) -> Result<CommandGuard, LockError> {
        let plan = command_plan(&req);
        self.shared
            .read(|state| check_presented_lease(state, &req))
            .map_err(|err| self.refused(plan.first().map(|(k, _)| k), &req.client, err))?;
        let mut holds = Vec::with_capacity(plan.len());
        for (key, want) in plan {
            let grant = self
                .acquire_key(&key, want)
                .await
                .map_err(|err| match err {
                    LockError::ShutDown => err,
                    limit => self.refused(Some(&key), &req.client, limit),
                })?;
            match grant {
                Grant::Command(ticket) | Grant::Shared(ticket) => holds.push(KeyHold {
                    shared: Arc::clone(&self.shared),
                    key,
                    ticket,
                }),
                Grant::Lease(_) => unreachable!("a command request is granted a command"),
            }
        }
        Ok(CommandGuard { holds })
    }

    /// Takes every key of `req` for one command, waiting up to `wait` in the
    /// queue. `wait` zero refuses at once. When the wait runs out the error is
    /// `Busy` for the key still in the way, with `waited_secs` set.
    pub async fn acquire_for_command_wait(
        &self,
        req: CommandLockRequest,
        wait: Duration,
    ) -> Result<CommandGuard, LockError> {
        if wait.is_zero() {
            return self.try_acquire_for_command(req);
        }
        match tokio::time::timeout(wait, self.acquire_for_command(req.clone())).await {
            Ok(result) => result,
            // The queue place is gone; one last look, so that a key freed at
            // the very end of the wait is not refused, and so the refusal
            // names whoever is in the way now.
            Err(_elapsed) => {
                let plan = command_plan(&req);
                self.try_command(&plan, &req).map_err(|err| {
                    self.refused(
                        plan.first().map(|(k, _)| k),
                        &req.client,
                        with_waited(err, wait),
                    )
                })
            }
        }
    }

    /// All keys of a command at once, or none.
    fn try_command(
        &self,
        plan: &[(LockKey, Want)],
        req: &CommandLockRequest,
    ) -> Result<CommandGuard, LockError> {
        let tickets = self.shared.with_state(|state| {
            check_presented_lease(state, req)?;
            // Check every key before claiming any, so a refusal leaves no
            // trace (no half-taken keys, no start/finish events).
            if let Some(busy) = plan.iter().find_map(|(key, want)| state.blocker(key, want)) {
                return Err(LockError::Busy(Box::new(busy)));
            }
            let mut tickets = Vec::with_capacity(plan.len());
            for (key, want) in plan {
                let ticket = state.next_ticket();
                match state.try_take(key, want, ticket) {
                    Ok(_) => tickets.push(ticket),
                    Err(busy) => {
                        // Unreachable after the check above; undo for safety.
                        for ((key, _), ticket) in plan.iter().zip(tickets) {
                            state.release_command(key, ticket);
                        }
                        return Err(LockError::Busy(busy));
                    }
                }
            }
            Ok(tickets)
        })?;
        for _ in plan {
            gatecmd_core::metrics::lock_taken_at_once(false);
        }
        Ok(CommandGuard {
            holds: plan
                .iter()
                .zip(tickets)
                .map(|((key, _), ticket)| KeyHold {
                    shared: Arc::clone(&self.shared),
                    key: key.clone(),
                    ticket,
                })
                .collect(),
        })
    }
}
