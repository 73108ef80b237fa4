//! The HTTP connection layer: our own accept loop over hyper's HTTP/1 server, so that no
//! caller without a token can hold what authenticated clients need (docs/SECURITY.md,
//! "Connections").
//!
//! - A connection must pass the token check within `header_read_timeout_secs` of opening,
//!   or it is closed, whatever it sent meanwhile (half a header, one byte at a time, or
//!   answers to `/health`). An authenticated one waits up to `http_idle_timeout_secs` for
//!   each next request header (hyper's header-read timer on a Tokio timer: the keep-alive
//!   idle limit) and is closed after as long without traffic in either direction.
//! - At most `max_connections` are open; past that a new one is answered 503 and closed.
//! - At most `max_unauthenticated_connections` (and `max_unauthenticated_per_peer` per
//!   address) have not yet passed the token check. Past either cap the OLDEST such
//!   connection is closed, not the new one: NAT guests all arrive from 127.0.0.1, so a
//!   per-address refusal would let one guest lock the others out.
//! - Accept errors (EMFILE under a low open-file limit) pause the loop briefly instead of
//!   ending or spinning it.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// The connection limits (`limits:` in the configuration); read once at start.
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    pub max_connections: usize,
    pub max_unauthenticated: usize,
    pub max_unauthenticated_per_peer: usize,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
}

impl ConnLimits {
    /// From the configured limits; a zero cap would refuse everyone, so each is at least 1.
    pub fn from_config(l: &gatecmd_domain::config::Limits) -> Self {
        ConnLimits {
            max_connections: l.max_connections.max(1),
            max_unauthenticated: l.max_unauthenticated_connections.max(1),
            max_unauthenticated_per_peer: l.max_unauthenticated_per_peer.max(1),
            header_read_timeout: Duration::from_secs(l.header_read_timeout_secs.max(1)),
            idle_timeout: Duration::from_secs(l.http_idle_timeout_secs.max(1)),
        }
    }
}

/// The address a connection reached, in its requests' extensions (defined in the core so
/// that the MCP surface can read it: the approval link names this listener's port).
pub use gatecmd_core::identity::LocalAddr;

/// One connection's handle, in its requests' extensions: the request guard calls
/// [`ConnTicket::authenticated`] once a request passed the token check.
#[derive(Clone)]
pub struct ConnTicket {
    inner: Arc<TicketInner>,
}

struct TicketInner {
    id: u64,
    authenticated: AtomicBool,
    table: Arc<Table>,
}

impl ConnTicket {
    /// Marks the connection as authenticated: it no longer counts against the
    /// unauthenticated caps and cannot be evicted by a newcomer.
    pub fn authenticated(&self) {
        if !self.inner.authenticated.swap(true, Ordering::AcqRel) {
            self.inner.table.forget_unauthenticated(self.inner.id);
        }
    }

    fn is_authenticated(&self) -> bool {
        self.inner.authenticated.load(Ordering::Acquire)
    }
}

impl Drop for TicketInner {
    fn drop(&mut self) {
        self.table.forget_unauthenticated(self.id);
        self.table.open.fetch_sub(1, Ordering::AcqRel);
        self.table.closed.notify_waiters();
    }
}

/// An unauthenticated connection: where it comes from and how to close it.
struct Pending {
    peer: IpAddr,
    since: Instant,
    evict: CancellationToken,
}

/// An unauthenticated connection younger than this is never evicted by the unauthenticated
/// caps: a burst of honest clients (all NAT guests come from 127.0.0.1) must not push each
/// other out while their first request is still on its way through a busy server. Past
/// those caps with only young connections the newcomer is admitted anyway;
/// `max_connections` still bounds the total, and at it the oldest goes whatever its age.
const EVICT_MIN_AGE: Duration = Duration::from_millis(500);

#[derive(Default)]
struct Unauthenticated {
    /// By connection id, which grows with accept order: the first entry is the oldest.
    by_age: BTreeMap<u64, Pending>,
    per_peer: HashMap<IpAddr, usize>,
}

struct Table {
    limits: ConnLimits,
    /// [`EVICT_MIN_AGE`]; zero in unit tests.
    evict_min_age: Duration,
    open: AtomicUsize,
    next_id: AtomicU64,
    // A std mutex: held for a few map operations, never across an await.
    unauthenticated: Mutex<Unauthenticated>,
    closed: tokio::sync::Notify,
}

impl Table {
    fn lock(&self) -> std::sync::MutexGuard<'_, Unauthenticated> {
        match self.unauthenticated.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Registers a new connection as unauthenticated, evicting the oldest ones past the caps.
    fn admit(self: &Arc<Self>, peer: IpAddr) -> (ConnTicket, CancellationToken) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let evict = CancellationToken::new();
        let mut evicted = 0usize;
        {
            let mut u = self.lock();
            u.by_age.insert(
                id,
                Pending {
                    peer,
                    since: Instant::now(),
                    evict: evict.clone(),
                },
            );
            *u.per_peer.entry(peer).or_default() += 1;
            while u.per_peer.get(&peer).copied().unwrap_or(0)
                > self.limits.max_unauthenticated_per_peer
            {
                let oldest = u
                    .by_age
                    .iter()
                    .find(|(_, p)| p.peer == peer)
                    .filter(|(_, p)| p.since.elapsed() >= self.evict_min_age)
                    .map(|(k, _)| *k);
                let Some(k) = oldest else { break };
                Self::evict_locked(&mut u, k);
                evicted += 1;
            }
            while u.by_age.len() > self.limits.max_unauthenticated {
                let Some(k) = u
                    .by_age
                    .iter()
                    .next()
                    .filter(|(_, p)| p.since.elapsed() >= self.evict_min_age)
                    .map(|(k, _)| *k)
                else {
                    break;
                };
                Self::evict_locked(&mut u, k);
                evicted += 1;
            }
        }
        if evicted > 0 {
            tracing::debug!(%peer, evicted, "unauthenticated connection cap: closed the oldest");
        }
        let ticket = ConnTicket {
            inner: Arc::new(TicketInner {
                id,
                authenticated: AtomicBool::new(false),
                table: self.clone(),
            }),
        };
        (ticket, evict)
    }

    /// At `max_connections`: closes the oldest unauthenticated connection, whatever its
    /// age, making room for the newcomer; false when every open connection authenticated.
    ///
    /// No [`EVICT_MIN_AGE`] here: a flood fast enough to fill the server within that window
    /// would otherwise leave only young connections and answer every newcomer 503 (seen in
    /// CI: 517 sockets, `/health` refused). The oldest has had the longest chance to send
    /// its request, and an honest burst of `max_connections` newcomers is not a case.
    fn evict_one_for_room(&self) -> bool {
        let mut u = self.lock();
        let Some(k) = u.by_age.keys().next().copied() else {
            return false;
        };
        Self::evict_locked(&mut u, k);
        true
    }

    /// Waits until fewer than `max_connections` are open, or `patience` has passed.
    async fn wait_for_room(&self, patience: Duration) {
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            // Created before the check: `notify_waiters` reaches it from here on.
            let closed = self.closed.notified();
            if self.open.load(Ordering::Acquire) < self.limits.max_connections {
                return;
            }
            if tokio::time::timeout_at(deadline, closed).await.is_err() {
                return;
            }
        }
    }

    fn evict_locked(u: &mut Unauthenticated, id: u64) {
        if let Some(p) = u.by_age.remove(&id) {
            Self::uncount(u, p.peer);
            p.evict.cancel();
        }
    }

    fn uncount(u: &mut Unauthenticated, peer: IpAddr) {
        if let Some(n) = u.per_peer.get_mut(&peer) {
            *n -= 1;
            if *n == 0 {
                u.per_peer.remove(&peer);
            }
        }
    }

    fn forget_unauthenticated(&self, id: u64) {
        let mut u = self.lock();
        if let Some(p) = u.by_age.remove(&id) {
            Self::uncount(&mut u, p.peer);
        }
    }
}

/// A TCP stream that remembers when bytes last moved, for the idle timeouts.
struct Watched {
    tcp: TcpStream,
    last: Arc<AtomicU64>,
    epoch: Instant,
}

impl Watched {
    fn touch(&self) {
        let ms = self.epoch.elapsed().as_millis() as u64;
        self.last.store(ms, Ordering::Relaxed);
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.tcp).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.touch();
        }
        r
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.tcp).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            this.touch();
        }
        r
    }

    // Vectored writes as the socket does them: hyper then sends head and body without copying
    // them into one buffer first.
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.tcp).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            this.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

/// Sent to a connection past `max_connections` before it is closed.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
connection: close\r\nretry-after: 1\r\ncontent-length: 87\r\n\r\n\
{\"error\":\"busy\",\"message\":\"too many open connections (limits.max_connections); retry\"}\n";

/// How long a newcomer at `max_connections` waits for the connection it evicted to close.
const ROOM_PATIENCE: Duration = Duration::from_millis(100);

/// How long shutdown waits for open connections to finish their answers.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Serves `router` on `listener` under `limits` until `shutdown` is cancelled, then lets
/// open connections finish their current answer (up to a grace period).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnLimits,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let table = Arc::new(Table {
        limits,
        evict_min_age: EVICT_MIN_AGE,
        open: AtomicUsize::new(0),
        next_id: AtomicU64::new(0),
        unauthenticated: Mutex::new(Unauthenticated::default()),
        closed: tokio::sync::Notify::new(),
    });
    let mut last_accept_error: Option<Instant> = None;
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            a = listener.accept() => a,
        };
        let (tcp, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // EMFILE/ENFILE/ENOBUFS and aborted handshakes: the listener is fine. Pause
                // so evicted connections can close, and log once per burst, not per error.
                if last_accept_error.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
                    tracing::warn!(error = %e, "accept failed; pausing briefly");
                    last_accept_error = Some(Instant::now());
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        // Full: the oldest unauthenticated connection gives way, else 503.
        if table.open.load(Ordering::Acquire) >= limits.max_connections {
            if !table.evict_one_for_room() {
                // Best effort: the 503 fits any socket buffer; a peer that is gone gets nothing.
                let _ = tcp.try_write(BUSY);
                drop(tcp);
                gatecmd_core::metrics::http_answer("other", 503);
                continue;
            }
            // The evicted connection closes on its own task; wait for that (briefly), so
            // the open sockets stay at the cap instead of running ahead of the closes
            // while a flood keeps the accept loop busy.
            table.wait_for_room(ROOM_PATIENCE).await;
        }
        table.open.fetch_add(1, Ordering::AcqRel);
        let (ticket, evict) = table.admit(peer.ip());
        tokio::spawn(serve_connection(
            tcp,
            peer,
            router.clone(),
            ticket,
            evict,
            limits,
            shutdown.clone(),
        ));
    }
    let deadline = tokio::time::Instant::now() + SHUTDOWN_GRACE;
    loop {
        let closed = table.closed.notified();
        if table.open.load(Ordering::Acquire) == 0 {
            break;
        }
        if tokio::time::timeout_at(deadline, closed).await.is_err() {
            tracing::warn!(
                open = table.open.load(Ordering::Acquire),
                "connections still open at the end of the shutdown grace"
            );
            break;
        }
    }
    Ok(())
}

async fn serve_connection(
    tcp: TcpStream,
    peer: SocketAddr,
    router: Router,
    ticket: ConnTicket,
    evict: CancellationToken,
    limits: ConnLimits,
    shutdown: CancellationToken,
) {
    // Without TCP_NODELAY, a response written in pieces (headers, then SSE events) meets the
    // peer's delayed ACK: ~40 ms per call for clients that do not set it themselves.
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!(error = %e, "cannot set TCP_NODELAY");
    }
    let epoch = Instant::now();
    let last = Arc::new(AtomicU64::new(0));
    let req_ticket = ticket.clone();
    let local = tcp.local_addr().ok().map(LocalAddr);
    let io = TokioIo::new(Watched {
        tcp,
        last: last.clone(),
        epoch,
    });
    let service = hyper::service::service_fn(move |mut req: hyper::Request<_>| {
        req.extensions_mut().insert(ConnectInfo(peer));
        if let Some(local) = local {
            req.extensions_mut().insert(local);
        }
        req.extensions_mut().insert(req_ticket.clone());
        let mut router = router.clone();
        async move {
            // Router is always ready; `call` without `poll_ready` is what axum does too.
            tower_service::Service::call(&mut router, req).await
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        // hyper's timer runs from the moment it waits for a request head, including between
        // requests on a kept-alive connection, so it is the keep-alive idle limit too; the
        // stricter limit for connections that have not authenticated is the watchdog's.
        .header_read_timeout(limits.idle_timeout)
        .serve_connection(io, service);
    tokio::pin!(conn);
    let tick = (limits.header_read_timeout / 4).max(Duration::from_millis(250));
    let mut shutting_down = false;
    loop {
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, %peer, "connection ended with an error");
                }
                return;
            }
            // Evicted: closed at once, whatever it was doing (it had not authenticated).
            _ = evict.cancelled() => return,
            _ = shutdown.cancelled(), if !shutting_down => {
                shutting_down = true;
                conn.as_mut().graceful_shutdown();
            }
            _ = tokio::time::sleep(tick) => {
                if !ticket.is_authenticated() {
                    if epoch.elapsed() >= limits.header_read_timeout {
                        return;
                    }
                    continue;
                }
                let idle = epoch.elapsed().saturating_sub(Duration::from_millis(last.load(Ordering::Relaxed)));
                if idle >= limits.idle_timeout {
                    // Nothing moved for the whole limit: a second tick like this ends it even
                    // if the graceful close is waiting on a stuck answer.
                    if shutting_down {
                        return;
                    }
                    shutting_down = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(total: usize, per_peer: usize) -> Arc<Table> {
        table_aged(total, per_peer, Duration::ZERO)
    }

    fn table_aged(total: usize, per_peer: usize, evict_min_age: Duration) -> Arc<Table> {
        Arc::new(Table {
            evict_min_age,
            limits: ConnLimits {
                max_connections: 100,
                max_unauthenticated: total,
                max_unauthenticated_per_peer: per_peer,
                header_read_timeout: Duration::from_secs(10),
                idle_timeout: Duration::from_secs(120),
            },
            // As if the accept loop had counted them (each ticket's drop counts down).
            open: AtomicUsize::new(100),
            next_id: AtomicU64::new(0),
            unauthenticated: Mutex::new(Unauthenticated::default()),
            closed: tokio::sync::Notify::new(),
        })
    }

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    #[test]
    fn past_the_caps_the_oldest_unauthenticated_connection_goes() {
        let t = table(4, 2);
        // One peer: its third connection evicts its first, not another peer's.
        let (_a0, e0) = t.admit(ip(1));
        let (_b0, f0) = t.admit(ip(2));
        let (_a1, e1) = t.admit(ip(1));
        let (_a2, e2) = t.admit(ip(1));
        assert!(e0.is_cancelled() && !e1.is_cancelled() && !e2.is_cancelled());
        assert!(!f0.is_cancelled());
        // Total cap 4: a fifth pushes out the oldest overall, peer 2's.
        let (_c, g) = t.admit(ip(3));
        assert!(!f0.is_cancelled() && !g.is_cancelled());
        let (_d, h) = t.admit(ip(4));
        assert!(f0.is_cancelled() && !h.is_cancelled());
    }

    #[test]
    fn young_connections_are_not_evicted_and_old_ones_give_way_when_full() {
        let t = table_aged(2, 2, Duration::from_millis(200));
        let (_a, ea) = t.admit(ip(1));
        let (_b, eb) = t.admit(ip(1));
        // Over both caps, but nobody has had time to send a request: all admitted.
        let (_c, ec) = t.admit(ip(1));
        assert!(!ea.is_cancelled() && !eb.is_cancelled() && !ec.is_cancelled());
        std::thread::sleep(Duration::from_millis(250));
        // Now the next one pushes out the oldest.
        let (_d, ed) = t.admit(ip(1));
        assert!(ea.is_cancelled() && !ed.is_cancelled());
    }

    #[test]
    fn a_full_server_makes_room_by_closing_the_oldest_unauthenticated_even_young() {
        let t = table_aged(8, 8, Duration::from_secs(60));
        let (a, ea) = t.admit(ip(1));
        a.authenticated();
        let (_b, eb) = t.admit(ip(1));
        let (_c, ec) = t.admit(ip(1));
        assert!(
            t.evict_one_for_room(),
            "a full server of young connections answered 503"
        );
        assert!(!ea.is_cancelled() && eb.is_cancelled() && !ec.is_cancelled());
        assert!(t.evict_one_for_room());
        assert!(ec.is_cancelled());
        // Only the authenticated one is left: now the newcomer is refused.
        assert!(!t.evict_one_for_room());
        assert!(!ea.is_cancelled());
    }

    #[test]
    fn an_authenticated_connection_is_never_evicted() {
        let t = table(2, 2);
        let (a, ea) = t.admit(ip(1));
        a.authenticated();
        let (_b, eb) = t.admit(ip(1));
        let (_c, ec) = t.admit(ip(1));
        let (_d, ed) = t.admit(ip(1));
        assert!(
            !ea.is_cancelled(),
            "an authenticated connection was evicted"
        );
        assert!(eb.is_cancelled() && !ec.is_cancelled() && !ed.is_cancelled());
        drop(a);
        assert_eq!(t.lock().by_age.len(), 2);
    }
}
