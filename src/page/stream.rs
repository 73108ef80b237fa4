//! `GET /events`: the page's server-sent event stream. A full snapshot on connect, then a
//! new one after each change: a hotplug, a lock event, a run starting, progressing or
//! ending, a decision, a console's state, a reload. Changes that come together are sent
//! as one snapshot ([`SETTLE`] after the first), and snapshots are at least [`MIN_GAP`]
//! apart, so a flood of progress lines costs a few snapshots a second, and any change is
//! on the page well within 250 ms. A comment every [`KEEP_ALIVE`] keeps proxies and the
//! connection's idle timer from closing a quiet stream; `retry:` tells the browser's
//! `EventSource` to reconnect a second after the stream drops (a server restart).
//!
//! The stream lives as long as its session: each frame re-reads it (an open page keeps its
//! session alive), and a session signed out or expired ends the stream; the page's next
//! reconnect then gets 401 and shows the sign-in form.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use gatecmd_core::events::{Events, RecvError, TryRecvError};
use tokio::sync::{broadcast, watch};

use super::{Page, Viewer, denied, plain, snapshot};
use crate::transport::conn_limits::ConnTicket;
use gatecmd_core::throttle::Throttle;

/// Wait this long after a change for the ones that come with it.
pub const SETTLE: Duration = Duration::from_millis(10);
/// At most one snapshot per this long.
pub const MIN_GAP: Duration = gatecmd_core::throttle::TEN_PER_SECOND;
/// How often the lock table's version and the board match queue are looked at: a waiter
/// joining or leaving a queue moves them without a lock event.
pub const QUEUE_POLL: Duration = Duration::from_millis(50);
/// A comment line this often on a quiet stream.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// What the browser waits before reconnecting.
const RETRY_MS: u64 = 1000;

/// `GET /events`.
pub(super) async fn events(State(p): State<Arc<Page>>, req: Request) -> Response {
    let ticket = req.extensions().get::<ConnTicket>();
    let viewer = match p.viewer(req.headers(), ticket) {
        Ok(v) => v,
        Err(d) => return denied(d),
    };
    let page = p.state.config().page.clone();
    // One client's share first, so no viewer takes every stream; admins are not counted
    // against the shared cap, so an admin can always open the page (issue 22).
    let share = match p.state.quotas.take(
        &viewer.client,
        gatecmd_domain::limits::quotas::Kind::PageStreams,
        1,
        page.max_streams_per_client,
    ) {
        Ok(t) => t,
        Err(full) => {
            return plain(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!("too many open page streams: {full}; close a page"),
            );
        }
    };
    let slot = if viewer.admin {
        None
    } else {
        let max = page.max_streams;
        let Some(slot) = StreamSlot::take(&p.streams, max) else {
            return plain(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!("too many open page streams (page.max_streams = {max}); close a page"),
            );
        };
        Some(slot)
    };
    let slot = (slot, share);
    let stream = Stream::new(p.clone(), viewer, slot);
    let body = Body::from_stream(futures::stream::unfold(stream, |mut s| async move {
        let frame = s.next_frame().await?;
        Some((Ok::<_, Infallible>(Bytes::from(frame)), s))
    }));
    let mut r = super::assets::secured(StatusCode::OK, "text/event-stream", String::new());
    *r.body_mut() = body;
    // Proxies (nginx) would otherwise hold frames back.
    r.headers_mut()
        .insert("x-accel-buffering", HeaderValue::from_static("no"));
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// One of `page.max_streams`; given back when the stream is dropped (the browser left).
struct StreamSlot(Arc<AtomicUsize>);

impl StreamSlot {
    fn take(count: &Arc<AtomicUsize>, max: usize) -> Option<StreamSlot> {
        count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| StreamSlot(count.clone()))
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What can change the page.
struct Sources {
    devices: Option<Events<gatecmd_devices::DeviceEvent>>,
    locks: Option<Events<gatecmd_domain::locks::LockEvent>>,
    consoles: Option<broadcast::Receiver<String>>,
    config: Option<broadcast::Receiver<()>>,
    running: watch::Receiver<u64>,
    decisions: watch::Receiver<u64>,
    /// Approval requests made or decided (the pending list).
    approvals: watch::Receiver<u64>,
    /// (lock table version, board match waiters) as last sent.
    queues: (u64, usize),
    poll: tokio::time::Interval,
    page_state: Arc<gatecmd_domain::state::AppState>,
}

/// The page's broadcast sources, tokio's channels and the registry's and lock table's
/// event rings (`gatecmd_core::events`), as "something changed".
trait ChangeStream {
    /// Waits for the next message; `false` once the stream is closed (lagging is a change).
    async fn next_open(&mut self) -> bool;
    /// Takes one waiting message; `false` when none waits or the stream is closed.
    fn take_waiting(&mut self) -> bool;
}

// The same two methods on both kinds of receiver, which share their error types.
macro_rules! change_stream {
    ($($receiver:ty),*) => {$(
        impl<T: Clone> ChangeStream for $receiver {
            async fn next_open(&mut self) -> bool {
                !matches!(self.recv().await, Err(RecvError::Closed))
            }
            fn take_waiting(&mut self) -> bool {
                !matches!(
                    self.try_recv(),
                    Err(TryRecvError::Empty | TryRecvError::Closed)
                )
            }
        }
    )*};
}
change_stream!(broadcast::Receiver<T>, Events<T>);

/// A source's next message as "something changed"; a closed source is dropped so it is
/// not polled again.
async fn changed(rx: &mut Option<impl ChangeStream>) {
    let Some(r) = rx else {
        return std::future::pending().await;
    };
    if !r.next_open().await {
        *rx = None;
    }
}

impl Sources {
    fn new(p: &Page) -> Sources {
        let s = &p.state;
        Sources {
            devices: Some(s.registry.subscribe()),
            locks: Some(s.locks.subscribe()),
            consoles: Some(s.consoles.subscribe()),
            config: Some(s.config_changes()),
            running: s.running.subscribe(),
            decisions: s.audit.recent().subscribe(),
            approvals: s.approvals.version(),
            queues: queues_of(s),
            poll: {
                let mut i = tokio::time::interval(QUEUE_POLL);
                i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                i
            },
            page_state: s.clone(),
        }
    }

    /// Waits for the next change from any source.
    async fn next(&mut self) {
        tokio::select! {
            _ = changed(&mut self.devices) => {}
            _ = changed(&mut self.locks) => {}
            _ = changed(&mut self.consoles) => {}
            _ = changed(&mut self.config) => {}
            r = self.running.changed() => if r.is_err() { std::future::pending::<()>().await },
            r = self.decisions.changed() => if r.is_err() { std::future::pending::<()>().await },
            r = self.approvals.changed() => if r.is_err() { std::future::pending::<()>().await },
            _ = queues_moved(&mut self.poll, &self.page_state, self.queues) => {}
        }
    }

    /// Takes every change already waiting, so that one snapshot answers them all.
    fn drain(&mut self) {
        fn drain_bc(rx: &mut Option<impl ChangeStream>) {
            if let Some(r) = rx {
                while r.take_waiting() {}
            }
        }
        drain_bc(&mut self.devices);
        drain_bc(&mut self.locks);
        drain_bc(&mut self.consoles);
        drain_bc(&mut self.config);
        self.running.mark_unchanged();
        self.decisions.mark_unchanged();
        self.approvals.mark_unchanged();
        self.queues = queues_of(&self.page_state);
    }
}

/// Ticks until the queues differ from `sent`.
async fn queues_moved(
    poll: &mut tokio::time::Interval,
    state: &gatecmd_domain::state::AppState,
    sent: (u64, usize),
) {
    loop {
        poll.tick().await;
        if queues_of(state) != sent {
            return;
        }
    }
}

fn queues_of(s: &gatecmd_domain::state::AppState) -> (u64, usize) {
    (s.locks.version(), s.boards.queue.len())
}

struct Stream {
    page: Arc<Page>,
    viewer: Viewer,
    sources: Sources,
    sent_any: bool,
    /// Snapshots at least [`MIN_GAP`] apart (the first at once).
    throttle: Throttle,
    /// The shared slot (none for an admin) and the client's share, both given back on drop.
    _slot: (Option<StreamSlot>, gatecmd_domain::limits::quotas::Ticket),
}

impl Stream {
    fn new(
        page: Arc<Page>,
        viewer: Viewer,
        slot: (Option<StreamSlot>, gatecmd_domain::limits::quotas::Ticket),
    ) -> Stream {
        Stream {
            sources: Sources::new(&page),
            page,
            viewer,
            sent_any: false,
            throttle: Throttle::new(MIN_GAP),
            _slot: slot,
        }
    }

    /// The next bytes to send; `None` ends the stream.
    async fn next_frame(&mut self) -> Option<String> {
        if !self.sent_any {
            self.sent_any = true;
            self.throttle.pass().await;
            return Some(format!("retry: {RETRY_MS}\n\n{}", self.snapshot()?));
        }
        let wake = tokio::time::timeout(KEEP_ALIVE, self.sources.next()).await;
        if wake.is_err() {
            self.still_signed_in()?;
            return Some(": keep-alive\n\n".into());
        }
        tokio::time::sleep(SETTLE).await;
        // What changes while it waits is in the snapshot built after it.
        self.throttle.pass().await;
        self.sources.drain();
        self.snapshot()
    }

    /// A `snapshot` event, or `None` when the session is gone.
    fn snapshot(&mut self) -> Option<String> {
        self.still_signed_in()?;
        let snap = snapshot::build(&self.page, &self.viewer);
        let json = serde_json::to_string(&snap).ok()?;
        Some(format!("event: snapshot\ndata: {json}\n\n"))
    }

    fn still_signed_in(&self) -> Option<()> {
        let Some(id) = &self.viewer.session_id else {
            // `--no-auth`: no session to lose, only the page switch.
            return self.page.state.config().page.enabled.then_some(());
        };
        let config = self.page.state.config();
        let idle = Duration::from_secs(config.page.session_idle_secs);
        let s = self.page.sessions.get(id, idle)?;
        super::may_still_view(&config, &s.client).map(|_| ())
    }
}
