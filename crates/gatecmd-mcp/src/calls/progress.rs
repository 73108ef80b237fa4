//! Turning a running command's output into MCP progress notifications.
//!
//! Percentages come from the command's `progress:` regex (`parse_percent` in the domain's
//! `progress`). They are sent only upward and at most ten a second ([`Throttle`]); the
//! latest value held back is sent when the interval passes, so the last percentage is never
//! lost. Between the command and the reporter sits one value, not a queue: a client that
//! does not read costs the server nothing per line. A command without a regex gets a
//! heartbeat (elapsed seconds) so clients whose timeouts reset on progress keep waiting.

use std::time::Duration;

use regex::Regex;
use rmcp::RoleServer;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::Peer;
use tokio::sync::watch;
use tokio::time::Instant;

use gatecmd_core::output::strip_ansi;
use gatecmd_core::throttle::{TEN_PER_SECOND, Throttle};
pub use gatecmd_domain::exec::progress::parse_percent;

/// Minimum time between two progress notifications.
pub const MIN_INTERVAL: Duration = TEN_PER_SECOND;
/// Heartbeat period for commands that report no percentage.
pub const HEARTBEAT: Duration = Duration::from_secs(5);

/// Where progress goes: an MCP peer and the request's token.
pub struct Sink {
    pub peer: Peer<RoleServer>,
    pub token: ProgressToken,
}

/// The running command's side of a reporter: offer it every output line. It keeps only the
/// highest percentage seen so far (the latest wins), so whatever the command prints and
/// however slowly the client reads, a reporter holds one line, never a backlog.
pub struct Tap {
    regex: Option<Regex>,
    latest: watch::Sender<Option<(f64, String)>>,
}

impl Tap {
    /// Looks for a percentage in `line`; a higher one replaces what is held. Returns whether
    /// the line reported one (then older lines of the same output chunk need no look).
    pub fn offer(&self, line: &str) -> bool {
        let Some(re) = &self.regex else { return true };
        let Some(p) = parse_percent(re, line) else {
            return false;
        };
        self.latest.send_if_modified(|held| {
            if held.as_ref().is_none_or(|(h, _)| p > *h) {
                *held = Some((p, strip_ansi(line)));
                true
            } else {
                false
            }
        });
        true
    }
}

/// Spawns the reporter; feed it output lines through the returned [`Tap`]. It sends what the
/// throttle held back and stops when the tap is dropped; await the handle before replying so
/// the last percentage reaches the client ahead of the result (and abort it if the client
/// does not take it in time).
pub fn spawn_reporter(sink: Sink, regex: Option<Regex>) -> (Tap, tokio::task::JoinHandle<()>) {
    let (latest, rx) = watch::channel(None);
    let heartbeat = regex.is_none();
    (
        Tap { regex, latest },
        tokio::spawn(report(sink, rx, heartbeat)),
    )
}

/// A reporter for a request that carries a progress token (else `None`).
pub fn for_request(
    ctx: &rmcp::service::RequestContext<RoleServer>,
    regex: Option<Regex>,
) -> Option<(Tap, tokio::task::JoinHandle<()>)> {
    let token = ctx.meta.get_progress_token()?;
    let sink = Sink {
        peer: ctx.peer.clone(),
        token,
    };
    Some(spawn_reporter(sink, regex))
}

async fn report(sink: Sink, mut latest: watch::Receiver<Option<(f64, String)>>, heartbeat: bool) {
    let started = Instant::now();
    let mut last_sent: Option<f64> = None;
    let mut throttle = Throttle::new(MIN_INTERVAL);
    let mut beat = tokio::time::interval_at(started + HEARTBEAT, HEARTBEAT);
    loop {
        tokio::select! {
            changed = latest.changed() => {
                let open = changed.is_ok();
                let higher = |held: &Option<(f64, String)>| {
                    held.as_ref().is_some_and(|(p, _)| last_sent.is_none_or(|l| *p > l))
                };
                let owed = higher(&latest.borrow());
                if owed {
                    // What arrives while it waits collapses into the watch's one value, and
                    // that value is what goes.
                    throttle.pass().await;
                    let held = latest.borrow_and_update().clone();
                    if let Some((p, msg)) = held {
                        send(&sink, p, Some(100.0), msg).await;
                        last_sent = Some(p);
                    }
                }
                if !open {
                    break;
                }
            }
            _ = beat.tick(), if heartbeat => {
                let secs = started.elapsed().as_secs_f64().floor();
                send(&sink, secs, None, format!("running for {secs:.0} s")).await;
            }
        }
    }
}

async fn send(sink: &Sink, progress: f64, total: Option<f64>, message: String) {
    let mut param =
        ProgressNotificationParam::new(sink.token.clone(), progress).with_message(message);
    param.total = total;
    if let Err(e) = sink.peer.notify_progress(param).await {
        tracing::debug!(error = %e, "progress notification not delivered");
    }
}
