//! The lock table: one lane per key, holding its lease, its running command
//! and its FIFO queue of waiters, and the rules for who may take a key.
//!
//! Everything here runs with the state mutex held and never awaits; the async
//! parts (waiting, expiry) live in `mod.rs` and `expiry.rs`.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use tokio::sync::{Notify, broadcast, oneshot};
use tokio::time::Instant;

use super::LockSettings;
use super::error::{BusyInfo, HeldBy, ceil_secs};
use super::ids::{ClientName, LeaseId, LockKey, SessionId};
use super::view::{KeyState, LeaseInfo, LockEvent, LockEventKind, RunInfo, SharedInfo};

/// Identifies one request (waiter, running command, or the request that
/// created a lease) so that a guard can undo exactly its own grant.
pub(super) type Ticket = u64;

/// State shared by every handle, guard and the expiry task.
pub(super) struct Shared {
    /// A `std` mutex, not a tokio one: no critical section awaits, and each
    /// is a few map operations, so blocking briefly beats the overhead of an
    /// async lock. It also lets guards release in `Drop`, which cannot await.
    state: Mutex<State>,
    /// Wakes the expiry task when a deadline may have moved earlier (a new
    /// lease, or a lease whose command ended and whose TTL restarted).
    pub(super) expiry: Notify,
    /// Replaced on config reload; a lease keeps the TTL it was granted.
    pub(super) settings: Mutex<LockSettings>,
    /// Bumped whenever the state is taken for writing (see `lock`), so that readers can
    /// keep views derived from it until it moves.
    version: AtomicU64,
}

impl Shared {
    pub(super) fn new(settings: LockSettings, events: broadcast::Sender<LockEvent>) -> Self {
        Shared {
            state: Mutex::new(State {
                lanes: BTreeMap::new(),
                leases: HashMap::new(),
                next_ticket: 0,
                shutdown: false,
                expiry_dirty: false,
                events,
            }),
            expiry: Notify::new(),
            settings: Mutex::new(settings),
            version: AtomicU64::new(0),
        }
    }

    /// Runs `f` on the locked state, then wakes the expiry task if `f`
    /// changed a deadline. The notification is sent after unlocking so the
    /// task does not wake only to block on the mutex.
    pub(super) fn with_state<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let mut state = self.lock();
        let result = f(&mut state);
        let dirty = std::mem::take(&mut state.expiry_dirty);
        drop(state);
        if dirty {
            self.expiry.notify_one();
        }
        result
    }

    /// Runs `f` on the locked state without counting as a change.
    pub(super) fn read<R>(&self, f: impl FnOnce(&State) -> R) -> R {
        f(&self.raw_lock())
    }

    /// The state, taken for writing: the version moves before anything can change or
    /// any event is sent, and under the mutex. A reader that sees the new version then
    /// waits on the mutex for the change to finish; one that saw the old version finds
    /// it stale next time.
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        let state = self.raw_lock();
        self.version.fetch_add(1, Ordering::AcqRel);
        state
    }

    /// See [`LockManager::version`](super::LockManager::version).
    pub(super) fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// A panic inside a critical section would poison the mutex. Every
    /// mutation here is a handful of infallible map operations, so rather
    /// than turn one bug into every later lock call panicking, keep serving
    /// with the state as it is.
    fn raw_lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

pub(super) struct State {
    /// A `BTreeMap` so snapshots come out ordered by key.
    lanes: BTreeMap<LockKey, Lane>,
    /// Where each live lease is, to find it by id.
    leases: HashMap<LeaseId, LockKey>,
    next_ticket: Ticket,
    pub(super) shutdown: bool,
    expiry_dirty: bool,
    events: broadcast::Sender<LockEvent>,
}

#[derive(Default)]
struct Lane {
    lease: Option<Lease>,
    running: Option<Running>,
    /// Shared (intention) holds: boards of this VID:PID in use through their
    /// own `port:` key. Any number coexist; they keep out exclusive users.
    shared: Vec<SharedHold>,
    waiters: VecDeque<Waiter>,
}

impl Lane {
    /// Whether a board command admitted under lease `id` still runs: the
    /// lease cannot expire meanwhile, as with its own commands.
    fn holds_shared_under(&self, id: &LeaseId) -> bool {
        self.shared
            .iter()
            .any(|h| h.under_lease.as_ref() == Some(id))
    }

    fn is_idle(&self) -> bool {
        self.lease.is_none()
            && self.running.is_none()
            && self.shared.is_empty()
            && self.waiters.is_empty()
    }
}

/// One shared hold on a key, taken for a command or a lease on `via`.
struct SharedHold {
    ticket: Ticket,
    via: LockKey,
    client: ClientName,
    held_by: HeldBy,
    command: Option<String>,
    since: DateTime<Utc>,
    /// The lease on this key the hold was admitted under, if any: it renews
    /// when the hold ends and does not expire while the hold lasts.
    under_lease: Option<LeaseId>,
    /// For a hold that belongs to a lease on `via`: that lease, whose
    /// commands the hold does not keep out (the lease holder may still run a
    /// whole-VID:PID command).
    owner: Option<LeaseOwner>,
}

/// What authorizes commands under a lease, copied into its shared holds.
struct LeaseOwner {
    id: LeaseId,
    holder: ClientName,
    session: Option<SessionId>,
}

impl LeaseOwner {
    fn authorizes(&self, want: &CommandWant) -> bool {
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

struct Lease {
    id: LeaseId,
    holder: ClientName,
    session: Option<SessionId>,
    note: Option<String>,
    ttl: Duration,
    acquired_at: DateTime<Utc>,
    /// Drives expiry; tokio's clock so paused-time tests can advance it.
    deadline: Instant,
    /// Display twin of `deadline`.
    expires_at: DateTime<Utc>,
    /// The request that created the lease, so a waiter that is handed the
    /// lease but gives up before receiving it can end it again.
    origin: Ticket,
    /// Shared holds the lease keeps on other keys (a board lease's VID:PID
    /// key), released when the lease ends.
    shared: Vec<(LockKey, Ticket)>,
}

impl Lease {
    /// Whether a command may run under this lease: it presents the lease id
    /// and comes from the holder, or presents none and comes from the legacy
    /// session that took the lease.
    fn authorizes(&self, want: &CommandWant) -> bool {
        authorizes(&self.id, &self.holder, self.session.as_ref(), want)
    }

    /// Whether a shared hold for `want` may be taken on the leased key: a
    /// command the lease authorizes, or a lease of the same holder.
    fn admits_shared(&self, of: &Want) -> bool {
        match of {
            Want::Command(c) => self.authorizes(c),
            Want::Lease(l) => l.client == self.holder,
            Want::Shared { .. } => false,
        }
    }

    fn renew(&mut self) {
        self.deadline = Instant::now() + self.ttl;
        self.expires_at = utc_after(self.ttl);
    }

    fn info(&self, key: &LockKey) -> LeaseInfo {
        LeaseInfo {
            lease_id: self.id.clone(),
            key: key.clone(),
            holder: self.holder.clone(),
            note: self.note.clone(),
            acquired_at: self.acquired_at,
            expires_at: self.expires_at,
            ttl_secs: self.ttl.as_secs(),
            session: self.session.clone(),
        }
    }
}

struct Running {
    info: RunInfo,
    ticket: Ticket,
    /// The lease the command runs under, renewed when it ends.
    lease: Option<LeaseId>,
}

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
    fn is_shared(&self) -> bool {
        matches!(self, Want::Shared { .. })
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

struct Waiter {
    ticket: Ticket,
    want: Want,
    grant: oneshot::Sender<Grant>,
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
fn blocker<'a>(
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

pub(super) fn utc_after(d: Duration) -> DateTime<Utc> {
    let now = Utc::now();
    TimeDelta::from_std(d)
        .ok()
        .and_then(|d| now.checked_add_signed(d))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

impl State {
    pub(super) fn next_ticket(&mut self) -> Ticket {
        self.next_ticket += 1;
        self.next_ticket
    }

    fn emit(
        &self,
        kind: LockEventKind,
        key: &LockKey,
        client: &ClientName,
        lease_id: Option<&LeaseId>,
        reason: Option<String>,
    ) {
        // Sent under the mutex so subscribers see events in the order the
        // state changed. `send` only fails when nobody listens.
        let _ = self.events.send(LockEvent {
            kind,
            key: key.clone(),
            client: client.clone(),
            lease_id: lease_id.cloned(),
            reason,
            at: Utc::now(),
        });
    }

    pub(super) fn subscribe(&self) -> broadcast::Receiver<LockEvent> {
        self.events.subscribe()
    }

    /// Records a refusal on the event stream.
    pub(super) fn emit_refused(&self, key: &LockKey, client: &ClientName, message: String) {
        self.emit(LockEventKind::Refused, key, client, None, Some(message));
    }

    /// The key a live lease is on.
    pub(super) fn lease_key(&self, id: &LeaseId) -> Option<&LockKey> {
        self.leases.get(id)
    }

    /// The holder and details of a live lease.
    pub(super) fn lease_info(&self, id: &LeaseId) -> Option<LeaseInfo> {
        let key = self.leases.get(id)?;
        let lease = self.lanes.get(key)?.lease.as_ref()?;
        Some(lease.info(key))
    }

    /// The live lease `client` holds on `key`, if any.
    pub(super) fn lease_of(&self, key: &LockKey, client: &ClientName) -> Option<LeaseInfo> {
        let lease = self.lanes.get(key)?.lease.as_ref()?;
        (lease.holder == *client).then(|| lease.info(key))
    }

    /// Who is in the way of `want` on `key` right now.
    pub(super) fn blocker(&self, key: &LockKey, want: &Want) -> Option<BusyInfo> {
        self.lanes
            .get(key)
            .and_then(|lane| blocker(key, lane, want, lane.waiters.iter()))
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
                Some(format!("expires {}", super::error::rfc3339(&expires_at))),
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
            let Some(pos) = (0..lane.waiters.len()).find(|&i| {
                blocker(key, lane, &lane.waiters[i].want, lane.waiters.range(..i)).is_none()
            }) else {
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

    /// Keys holding a live lease taken in `session`.
    pub(super) fn session_keys(&self, session: &SessionId) -> Vec<LockKey> {
        self.lanes
            .iter()
            .filter(|(_, lane)| {
                lane.lease
                    .as_ref()
                    .is_some_and(|l| l.session.as_ref() == Some(session))
            })
            .map(|(key, _)| key.clone())
            .collect()
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

    pub(super) fn key_state(&self, key: &LockKey) -> Option<KeyState> {
        self.lanes.get(key).map(|lane| KeyState {
            key: key.clone(),
            lease: lane.lease.as_ref().map(|l| l.info(key)),
            running: lane.running.as_ref().map(|r| r.info.clone()),
            shared: lane
                .shared
                .iter()
                .map(|h| SharedInfo {
                    via: h.via.clone(),
                    client: h.client.clone(),
                    held_by: h.held_by,
                    command: h.command.clone(),
                    since: h.since,
                })
                .collect(),
            queue_len: lane.waiters.len(),
        })
    }

    pub(super) fn keys(&self) -> impl Iterator<Item = &LockKey> {
        self.lanes.keys()
    }
}
