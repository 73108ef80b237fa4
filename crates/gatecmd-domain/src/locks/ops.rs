//! The changes to the lock table: taking a key, queueing for it, releasing it,
//! handing it to the next waiter, ending and expiring leases. Each runs with the
//! state mutex held and ends with the key handed on (or says it does not).

use chrono::Utc;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::admission;
use super::error::{BusyInfo, HeldBy, rfc3339};
use super::ids::{LeaseId, LockKey};
use super::lane::{Lane, Lease, LeaseOwner, Running, SharedHold, State, Waiter, utc_after};
use super::view::{LeaseInfo, LockEventKind, RunInfo};
use super::want::{Grant, Ticket, Want};

impl State {
    /// Who is in the way of `want` on `key` right now.
    pub(super) fn blocker(&self, key: &LockKey, want: &Want) -> Option<BusyInfo> {
        self.lanes
            .get(key)
            .and_then(|lane| admission::blocker(key, lane, want, lane.waiters.iter()))
    }

    /// Takes `key` for `want` if nothing is in the way, else says who is.
    /// Never barges: a key with waiters someone could serve is never free,
    /// because every change ends in [`State::dispatch`].
    pub(super) fn try_take(
        &mut self,
        key: &LockKey,
        want: &Want,
        ticket: Ticket,
    ) -> Result<Grant, Box<BusyInfo>> {
        match self.blocker(key, want) {
            Some(busy) => Err(Box::new(busy)),
            None => Ok(self.claim(key, want, ticket)),
        }
    }

    /// Queues a waiter at the back of `key`'s lane.
    pub(super) fn enqueue(
        &mut self,
        key: &LockKey,
        want: Want,
        ticket: Ticket,
    ) -> oneshot::Receiver<Grant> {
        let (grant, granted) = oneshot::channel();
        let lane = self.lanes.entry(key.clone()).or_default();
        lane.waiters.push_back(Waiter {
            ticket,
            want,
            grant,
        });
        granted
    }

    /// Gives `key` to `want`. The caller has checked there is no blocker.
    fn claim(&mut self, key: &LockKey, want: &Want, ticket: Ticket) -> Grant {
        let lane = self.lanes.entry(key.clone()).or_default();
        match want {
            Want::Command(c) => {
                // A command under the lease renews it at start; it cannot
                // expire while the command runs in any case.
                let lease = lane.lease.as_mut().map(|lease| {
                    lease.renew();
                    lease.id.clone()
                });
                lane.running = Some(Running {
                    info: RunInfo {
                        command: c.command.clone(),
                        client: c.client.clone(),
                        since: Utc::now(),
                    },
                    ticket,
                    lease: lease.clone(),
                });
                self.emit(
                    LockEventKind::CommandStarted,
                    key,
                    &c.client,
                    lease.as_ref(),
                    Some(c.command.clone()),
                );
                Grant::Command(ticket)
            }
            Want::Lease(l) => {
                let lease = Lease {
                    id: LeaseId::generate(),
                    holder: l.client.clone(),
                    session: l.session.clone(),
                    note: l.note.clone(),
                    ttl: l.ttl,
                    acquired_at: Utc::now(),
                    deadline: Instant::now() + l.ttl,
                    expires_at: utc_after(l.ttl),
                    origin: ticket,
                    shared: Vec::new(),
                };
                let info = lease.info(key);
                lane.lease = Some(lease);
                self.leases.insert(info.lease_id.clone(), key.clone());
                self.expiry_dirty = true;
                self.emit(
                    LockEventKind::Taken,
                    key,
                    &info.holder,
                    Some(&info.lease_id),
                    info.note.clone(),
                );
                Grant::Lease(info)
            }
            Want::Shared { via, of } => {
                // Admitted under the key's lease (a whole-VID:PID lease whose
                // holder runs a board command): renew it, like a command.
                let under_lease = lane.lease.as_mut().map(|lease| {
                    lease.renew();
                    lease.id.clone()
                });
                let (client, held_by, command) = match of.as_ref() {
                    Want::Command(c) => {
                        (c.client.clone(), HeldBy::Command, Some(c.command.clone()))
                    }
                    Want::Lease(l) => (l.client.clone(), HeldBy::Lease, None),
                    Want::Shared { .. } => {
                        unreachable!("a shared hold is for a command or a lease")
                    }
                };
                lane.shared.push(SharedHold {
                    ticket,
                    via: via.clone(),
                    client,
                    held_by,
                    command,
                    since: Utc::now(),
                    under_lease,
                    owner: None,
                });
                Grant::Shared(ticket)
            }
        }
    }

    /// Ends the shared hold `ticket` on `key`, renewing the lease it was
    /// admitted under (its TTL restarts now). Does not dispatch.
    fn finish_shared(&mut self, key: &LockKey, ticket: Ticket) {
        let Some(lane) = self.lanes.get_mut(key) else {
            return;
        };
        let Some(pos) = lane.shared.iter().position(|h| h.ticket == ticket) else {
            return;
        };
        let hold = lane.shared.remove(pos);
        if let Some(lease) = lane.lease.as_mut()
            && hold.under_lease.as_ref() == Some(&lease.id)
        {
            lease.renew();
            self.expiry_dirty = true;
        }
    }

    /// Ties shared holds, taken for a lease request, to the lease `id` on
    /// `key`: they end with it. False if that lease is gone (the caller then
    /// releases the holds).
    pub(super) fn attach_shared(
        &mut self,
        key: &LockKey,
        id: &LeaseId,
        holds: Vec<(LockKey, Ticket)>,
    ) -> bool {
        let Some(lease) = self
            .lanes
            .get_mut(key)
            .and_then(|lane| lane.lease.as_mut())
            .filter(|lease| lease.id == *id)
        else {
            return false;
        };
        let (holder, session) = (lease.holder.clone(), lease.session.clone());
        lease.shared.extend(holds.iter().cloned());
        for (skey, ticket) in &holds {
            if let Some(hold) = self
                .lanes
                .get_mut(skey)
                .and_then(|lane| lane.shared.iter_mut().find(|h| h.ticket == *ticket))
            {
                hold.owner = Some(LeaseOwner {
                    id: id.clone(),
                    holder: holder.clone(),
                    session: session.clone(),
                });
            }
        }
        true
    }

    /// Ends the command `ticket` runs on `key`, renewing its lease (the TTL
    /// restarts now). Does not dispatch.
    fn finish_command(&mut self, key: &LockKey, ticket: Ticket, reason: Option<String>) {
        let Some(lane) = self.lanes.get_mut(key) else {
            return;
        };
        if lane.running.as_ref().map(|r| r.ticket) != Some(ticket) {
            return;
        }
        let Some(run) = lane.running.take() else {
            return;
        };
        let mut renewed = None;
        if let Some(lease) = lane.lease.as_mut()
            && run.lease.as_ref() == Some(&lease.id)
        {
            lease.renew();
            renewed = Some((lease.id.clone(), lease.holder.clone(), lease.expires_at));
        }
        self.emit(
            LockEventKind::CommandFinished,
            key,
            &run.info.client,
            run.lease.as_ref(),
            reason.or(Some(run.info.command)),
        );
        if let Some((id, holder, expires_at)) = renewed {
            self.expiry_dirty = true;
            self.emit(
                LockEventKind::Renewed,
                key,
                &holder,
                Some(&id),
                Some(format!("expires {}", rfc3339(&expires_at))),
            );
        }
    }

    /// Called when a command's guard is dropped: frees the key and hands it
    /// on.
    pub(super) fn release_command(&mut self, key: &LockKey, ticket: Ticket) {
        self.finish_command(key, ticket, None);
        self.finish_shared(key, ticket);
        self.dispatch(key);
    }

    /// Removes `key`'s lease and reports it with `kind`. A command running
    /// under it keeps the key until it ends; the lease id is dead at once.
    /// Does not dispatch.
    pub(super) fn end_lease(
        &mut self,
        key: &LockKey,
        kind: LockEventKind,
        reason: Option<String>,
    ) -> Option<LeaseInfo> {
        let lease = self.lanes.get_mut(key)?.lease.take()?;
        self.leases.remove(&lease.id);
        let info = lease.info(key);
        self.emit(kind, key, &lease.holder, Some(&lease.id), reason);
        // Its shared holds are on other keys: free them and hand those on.
        for (skey, ticket) in &lease.shared {
            self.finish_shared(skey, *ticket);
            self.dispatch(skey);
        }
        Some(info)
    }

    /// Hands `key` to waiters, in queue order, for as long as the one found
    /// can take it. A waiter that cannot take the key yet (a stranger behind
    /// a lease) does not block one that can (the lease holder's own command).
    pub(super) fn dispatch(&mut self, key: &LockKey) {
        loop {
            let Some(lane) = self.lanes.get_mut(key) else {
                return;
            };
            let Some(pos) = admission::next_admissible(key, lane) else {
                break;
            };
            let Some(waiter) = lane.waiters.remove(pos) else {
                break;
            };
            if waiter.grant.is_closed() {
                // Its future is gone; its guard will find nothing to undo.
                continue;
            }
            let grant = self.claim(key, &waiter.want, waiter.ticket);
            if waiter.grant.send(grant).is_err() {
                self.undo(key, waiter.ticket);
            }
        }
        self.gc(key);
    }

    /// Reverts whatever `ticket` was granted on `key` (a waiter that gave up
    /// just as the key was handed to it). Does not dispatch.
    fn undo(&mut self, key: &LockKey, ticket: Ticket) {
        self.finish_command(
            key,
            ticket,
            Some("the waiter gave up before it could start".to_owned()),
        );
        self.finish_shared(key, ticket);
        let abandoned_lease = self
            .lanes
            .get(key)
            .and_then(|lane| lane.lease.as_ref())
            .is_some_and(|lease| lease.origin == ticket);
        if abandoned_lease {
            self.end_lease(
                key,
                LockEventKind::Released,
                Some("the waiter gave up before receiving the lease".to_owned()),
            );
        }
    }

    /// A waiting future was dropped: take it out of the queue, or, if the key
    /// was already handed to it, give the key back and pass it on.
    pub(super) fn abandon(&mut self, key: &LockKey, ticket: Ticket) {
        let Some(lane) = self.lanes.get_mut(key) else {
            return;
        };
        let before = lane.waiters.len();
        lane.waiters.retain(|w| w.ticket != ticket);
        if lane.waiters.len() == before {
            self.undo(key, ticket);
        }
        self.dispatch(key);
    }

    /// Forgets lanes with nothing in them, so the table only holds keys in
    /// use.
    fn gc(&mut self, key: &LockKey) {
        if self.lanes.get(key).is_some_and(Lane::is_idle) {
            self.lanes.remove(key);
        }
    }

    /// Ends leases past their deadline, except those with a command running
    /// (they cannot expire until it ends), hands their keys on, and returns
    /// the next deadline to sleep until.
    ///
    /// A scan rather than a sorted deadline index: a bench has a handful of
    /// keys, and renewals on every command would churn an index for nothing.
    pub(super) fn expire_due(&mut self, now: Instant) -> Option<Instant> {
        self.expiry_dirty = false;
        let due: Vec<LockKey> = self
            .lanes
            .iter()
            .filter(|(_, lane)| {
                lane.running.is_none()
                    && lane
                        .lease
                        .as_ref()
                        .is_some_and(|l| l.deadline <= now && !lane.holds_shared_under(&l.id))
            })
            .map(|(key, _)| key.clone())
            .collect();
        for key in &due {
            let ttl = self
                .lanes
                .get(key)
                .and_then(|lane| lane.lease.as_ref())
                .map_or(0, |l| l.ttl.as_secs());
            self.end_lease(
                key,
                LockEventKind::Expired,
                Some(format!("unused for its ttl of {ttl}s")),
            );
            self.dispatch(key);
        }
        self.expiry_dirty = false;
        self.lanes
            .values()
            .filter(|lane| lane.running.is_none())
            .filter_map(|lane| {
                lane.lease
                    .as_ref()
                    .filter(|l| !lane.holds_shared_under(&l.id))
            })
            .map(|l| l.deadline)
            .min()
    }

    /// Stops everything: waiters are dropped, so their futures end with
    /// `ShutDown`. Held keys stay held until their guards drop.
    pub(super) fn shut_down(&mut self) {
        self.shutdown = true;
        for lane in self.lanes.values_mut() {
            lane.waiters.clear();
        }
    }
}
