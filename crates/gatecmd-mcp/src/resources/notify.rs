//! Resource change notifications, for both protocol eras.
//!
//! One change stream merges the device registry's, the lock manager's and the consoles' events into
//! [`Change`]s. A 2025-11-25 session gets a forwarder task (started when the client says
//! `initialized`) that sends `list_changed` always and `updated` for the URIs it subscribed
//! to with `resources/subscribe`. A 2026-07-28 client opens `subscriptions/listen`, and the
//! handler's `listen` sends what its accepted filter asks for.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use gatecmd_core::events::{Events, RecvError};
use rmcp::RoleServer;
use rmcp::model::{ResourceUpdatedNotificationParam, SubscriptionFilter};
use rmcp::service::{Peer, SubscriptionContext};
use tokio::sync::broadcast;

use crate::resources::Change;
use gatecmd_devices::DeviceEvent;
use gatecmd_domain::locks::{LockEvent, LockEventKind};
use gatecmd_domain::state::AppState;

/// The merged change stream of one subscriber.
pub struct Changes {
    state: Arc<AppState>,
    /// Board resource updates, at most 10 per second each (held-back ones follow).
    pace: crate::resources::pace::Pacer,
    devices: Events<DeviceEvent>,
    locks: Events<LockEvent>,
    config: broadcast::Receiver<()>,
    consoles: broadcast::Receiver<String>,
    jobs: broadcast::Receiver<gatecmd_domain::jobs::JobId>,
    /// New boots and changed outcomes (gatecmd-domain's `boards::boot_reports`).
    boots: broadcast::Receiver<gatecmd_domain::boards::boot_reports::BootChange>,
    /// Moves when an approval request is made or decided.
    approvals: tokio::sync::watch::Receiver<u64>,
    /// When the change last returned came off the stream (for the delivery lag metric).
    received: Instant,
    /// Times this subscriber fell behind a stream since [`Changes::take_missed`].
    missed: u64,
}

impl Changes {
    /// Subscribes now: changes from this moment on are seen.
    pub fn new(state: Arc<AppState>) -> Self {
        Changes {
            pace: Default::default(),
            devices: state.registry.subscribe(),
            locks: state.locks.subscribe(),
            config: state.config_changes(),
            consoles: state.consoles.subscribe(),
            jobs: state.jobs.subscribe(),
            boots: state.boots.subscribe(),
            approvals: state.approvals.version(),
            state,
            received: Instant::now(),
            missed: 0,
        }
    }

    /// The next change; `None` when both sources are gone. Board resource updates come at
    /// most 10 per second each: a held-back one comes as its own change when its time is up.
    pub async fn next(&mut self) -> Option<Change> {
        loop {
            let due = self.pace.next_due();
            let now = tokio::time::Instant::now();
            tokio::select! {
                _ = tokio::time::sleep_until(due.unwrap_or(now)), if due.is_some() => {
                    // Their 100 ms are over: they go as they are (counted as sent).
                    let updated = self.pace.due(tokio::time::Instant::now());
                    if !updated.is_empty() {
                        self.received = Instant::now();
                        return Some(Change { updated, list_changed: false });
                    }
                }
                // Every receiver in it is cancel-safe: a change is not lost when the
                // timer wins.
                change = self.next_unpaced() => {
                    let mut change = change?;
                    self.received = Instant::now();
                    change.updated = self.pace.admit(change.updated, tokio::time::Instant::now());
                    if !change.updated.is_empty() || change.list_changed {
                        return Some(change);
                    }
                }
            }
        }
    }

    /// When the change [`Changes::next`] last returned came off the stream (a held-back
    /// board update: when its pause ended).
    pub fn received_at(&self) -> Instant {
        self.received
    }

    /// How many times this subscriber fell behind since the last call (each time it was
    /// given "everything changed" instead of the changes it missed).
    pub fn take_missed(&mut self) -> u64 {
        std::mem::take(&mut self.missed)
    }

    async fn next_unpaced(&mut self) -> Option<Change> {
        loop {
            tokio::select! {
                ev = self.devices.recv() => match ev {
                    Ok(ev) => return Some(Change::from_device(&self.state, &ev)),
                    // Missed events: say that everything may have changed.
                    Err(RecvError::Lagged(_)) => {
                        self.missed += 1;
                        return Some(Change::everything(&self.state));
                    }
                    Err(RecvError::Closed) => return None,
                },
                // A reload changes the commands (and classes, so the device views).
                ev = self.config.recv() => match ev {
                    Ok(()) | Err(RecvError::Lagged(_)) => {
                        let mut c = Change::everything(&self.state);
                        c.updated.push(crate::resources::COMMANDS.to_string());
                        c.list_changed = false;
                        return Some(c);
                    }
                    Err(RecvError::Closed) => return None,
                },
                // Console output or state: already coalesced per board (src/console/).
                ev = self.consoles.recv() => match ev {
                    Ok(board) => return Some(Change {
                        updated: vec![crate::resources::console_uri(&board)],
                        list_changed: false,
                    }),
                    Err(RecvError::Lagged(_)) => return Some(Change {
                        updated: self.state.consoles.boards().iter().map(|b| crate::resources::console_uri(b)).collect(),
                        list_changed: false,
                    }),
                    Err(RecvError::Closed) => return None,
                },
                // A job's state, progress or detach (paced like the boards: src/pace.rs).
                ev = self.jobs.recv() => match ev {
                    Ok(id) => return Some(Change::from_job(&id.0)),
                    Err(RecvError::Lagged(_)) => {
                        let mut updated = vec![crate::resources::JOBS.to_string()];
                        updated.extend(self.state.jobs.all().iter().map(|v| crate::resources::job_uri(&v.id.0)));
                        return Some(Change { updated, list_changed: false });
                    }
                    Err(RecvError::Closed) => return None,
                },
                // A boot started or its outcome changed.
                ev = self.boots.recv() => match ev {
                    Ok(c) => return Some(Change::from_boot(&c)),
                    Err(RecvError::Lagged(_)) => {
                        let boards = self.state.boots.boards();
                        let mut updated = Vec::new();
                        for b in &boards {
                            updated.push(crate::resources::boots_uri(b));
                            if let Some(n) = self.state.boots.latest(b) {
                                updated.push(crate::resources::boot_uri(b, n));
                            }
                        }
                        return Some(Change { updated, list_changed: false });
                    }
                    Err(RecvError::Closed) => return None,
                },
                // Several changes between two reads come as one (a watch keeps the latest).
                r = self.approvals.changed() => match r {
                    Ok(()) => return Some(Change {
                        updated: vec![crate::resources::APPROVALS.to_string()],
                        list_changed: false,
                    }),
                    Err(_) => return None,
                },
                ev = self.locks.recv() => match ev {
                    // A refusal changes nothing anyone can read.
                    Ok(ev) if ev.kind == LockEventKind::Refused => continue,
                    Ok(ev) => return Some(Change::from_lock(&self.state, &ev)),
                    Err(RecvError::Lagged(_)) => {
                        self.missed += 1;
                        return Some(Change::everything(&self.state));
                    }
                    Err(RecvError::Closed) => return None,
                },
            }
        }
    }
}

/// URIs a legacy session subscribed to (bounded: src/subscriptions.rs).
pub type Subscriptions = crate::resources::subscriptions::SessionSubscriptions;

/// Forwards changes to one 2025-11-25 session until the session is gone.
pub fn spawn_legacy_forwarder(state: Arc<AppState>, peer: Peer<RoleServer>, subs: Subscriptions) {
    let mut changes = Changes::new(state);
    tokio::spawn(async move {
        while let Some(change) = changes.next().await {
            if peer.is_transport_closed() {
                break;
            }
            for _ in 0..changes.take_missed() {
                gatecmd_core::metrics::notification_changes_missed(true);
            }
            if change.list_changed && peer.notify_resource_list_changed().await.is_err() {
                break;
            }
            let wanted = subs.wanted(&change.updated);
            for uri in wanted {
                if peer
                    .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                    .await
                    .is_err()
                {
                    return;
                }
                gatecmd_core::metrics::notification_sent(true, changes.received_at().elapsed());
            }
        }
        tracing::debug!("legacy notification forwarder ended");
    });
}

/// Serves one 2026-07-28 `subscriptions/listen` until the client closes it. `_share` is
/// the stream's slot and its URIs' share of the client's caps, held for the stream's life.
pub async fn listen(
    state: Arc<AppState>,
    ctx: SubscriptionContext,
    _share: crate::resources::subscriptions::StreamShare,
) {
    let accepted: SubscriptionFilter = ctx.accepted().clone();
    let want_list = accepted.resources_list_changed == Some(true);
    let uris: HashSet<String> = accepted
        .resource_subscriptions
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    let mut changes = Changes::new(state);
    loop {
        let change = tokio::select! {
            c = changes.next() => match c { Some(c) => c, None => return },
            _ = ctx.cancelled() => return,
        };
        if want_list
            && change.list_changed
            && ctx.sink().notify_resource_list_changed().await.is_err()
        {
            return;
        }
        for _ in 0..changes.take_missed() {
            gatecmd_core::metrics::notification_changes_missed(false);
        }
        for uri in change.updated.iter().filter(|u| uris.contains(*u)) {
            if ctx
                .sink()
                .notify_resource_updated(uri.clone())
                .await
                .is_err()
            {
                return;
            }
            gatecmd_core::metrics::notification_sent(false, changes.received_at().elapsed());
        }
    }
}
