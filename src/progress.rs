//! Turning a running command's output into MCP progress notifications.
//!
//! Percentages come from the command's `progress:` regex (first capture group), matched
//! against each output line with escape sequences stripped. They are sent only upward and at
//! most ten a second; the latest value held back by the throttle is sent when the interval
//! passes, so the last percentage is never lost. A command without a regex gets a heartbeat
//! (elapsed seconds) so clients whose timeouts reset on progress keep waiting.

use std::time::Duration;

use regex::Regex;
use rmcp::RoleServer;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::Peer;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::output::strip_ansi;

/// Minimum time between two progress notifications.
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);
/// Heartbeat period for commands that report no percentage.
pub const HEARTBEAT: Duration = Duration::from_secs(5);

/// The percentage a line reports, if the regex finds one (0–100).
pub fn parse_percent(re: &Regex, line: &str) -> Option<f64> {
    let clean = strip_ansi(line);
    let caps = re.captures(&clean)?;
    let v: f64 = caps.get(1)?.as_str().trim().parse().ok()?;
    (0.0..=100.0).contains(&v).then_some(v)
}

/// Where progress goes: an MCP peer and the request's token.
pub struct Sink {
    pub peer: Peer<RoleServer>,
    pub token: ProgressToken,
}

/// Spawns the reporter; feed it output lines through the returned sender. It sends what the
/// throttle held back and stops when the sender is dropped; await the handle before replying
/// so the last percentage reaches the client ahead of the result.
pub fn spawn_reporter(
    sink: Sink,
    regex: Option<Regex>,
) -> (mpsc::UnboundedSender<String>, tokio::task::JoinHandle<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    (tx, tokio::spawn(report(sink, regex, rx)))
}

async fn report(sink: Sink, regex: Option<Regex>, mut lines: mpsc::UnboundedReceiver<String>) {
    let started = Instant::now();
    let mut last_sent: Option<f64> = None;
    let mut last_time = started - MIN_INTERVAL;
    let mut held: Option<(f64, String)> = None;
    let mut heartbeat = tokio::time::interval_at(started + HEARTBEAT, HEARTBEAT);
    loop {
        let flush_at = last_time + MIN_INTERVAL;
        tokio::select! {
            line = lines.recv() => {
                let Some(line) = line else { break };
                let Some(re) = &regex else { continue };
                if let Some(p) = parse_percent(re, &line)
                    && last_sent.is_none_or(|l| p > l) && held.as_ref().is_none_or(|(h, _)| p > *h) {
                        held = Some((p, strip_ansi(&line)));
                    }
            }
            _ = tokio::time::sleep_until(flush_at), if held.is_some() => {}
            _ = heartbeat.tick(), if regex.is_none() => {
                let secs = started.elapsed().as_secs_f64().floor();
                let msg = format!("running for {secs:.0} s");
                send(&sink, secs, None, msg).await;
                continue;
            }
        }
        if Instant::now() >= last_time + MIN_INTERVAL
            && let Some((p, msg)) = held.take()
        {
            send(&sink, p, Some(100.0), msg).await;
            last_sent = Some(p);
            last_time = Instant::now();
        }
    }
    if let Some((p, msg)) = held.take() {
        send(&sink, p, Some(100.0), msg).await;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_from_rkdeveloptool_lines() {
        let re = Regex::new(r"\((\d+)%\)").expect("re");
        assert_eq!(
            parse_percent(&re, "\x1b[1A\x1b[2KWrite LBA from file (42%)"),
            Some(42.0)
        );
        assert_eq!(parse_percent(&re, "Write LBA from file OK."), None);
        assert_eq!(parse_percent(&re, "weird (400%)"), None);
    }
}
