//! The lab-wide queue of `lock_board {scope: "lab", wait_secs}`: when no matching board is
//! free anywhere, the waiter queues at once on every host of the lab, this host's queue and
//! each peer's (their `lock_board {match, wait_secs}`, for the agent), and takes the first
//! lease any host grants. Every host serves its queue in arrival order, and a lab waiter
//! enters every queue at the same moment (within the link's latency), so one waiter that
//! arrived before another, on any host, is ahead of it in every queue it shares: first
//! come, first served across hosts, to within the difference in network latency between
//! the hosts (docs/DECISIONS.md). The granted waiter leaves the other queues (its calls
//! there are dropped, which removes it; a lease granted in the same moment is released).
//!
//! Each host's queue length when the waiter arrived (`queued_ahead`) is in the answer, and
//! each host's own busy refusal (with its queue) in the refusal.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use rmcp::model::CallToolResult;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::boards::this_host;
use super::lock::{LabAsk, message, with_host};
use super::peer_link::{self, PEER_GRACE, PeerError};
use crate::calls::answer::refusal;
use gatecmd_core::refusal::{Refusal, RefusalReason};
use gatecmd_domain::config::LabPeer;
use gatecmd_domain::locks::LeaseId;
use gatecmd_domain::state::AppState;

/// How long the other hosts' answers are awaited once one granted a lease: a lease one of
/// them granted in the same moment is released rather than left to its expiry.
const SETTLE: Duration = Duration::from_millis(300);

/// One host's answer: `None` for this host, else the peer.
type Answer = (Option<LabPeer>, Result<CallToolResult, PeerError>);
type Racing<'f> = FuturesUnordered<Pin<Box<dyn Future<Output = Answer> + Send + 'f>>>;

/// Queues on every host until `deadline`; the first lease granted, with `host` and
/// `queued_ahead` (each host's queue when the waiter arrived, from the first try's refusals).
pub async fn wait_lab<F, Fut>(
    state: &AppState,
    ask: &LabAsk<'_>,
    ahead: BTreeMap<String, usize>,
    deadline: Instant,
    ct: &CancellationToken,
    local: &F,
) -> CallToolResult
where
    F: Fn(u64) -> Fut,
    Fut: Future<Output = CallToolResult> + Send,
{
    let here = this_host(state);
    let secs = deadline
        .saturating_duration_since(Instant::now())
        .as_secs()
        .max(1);
    let agent = ask.who.name.as_str();
    let racing: Racing<'_> = FuturesUnordered::new();
    let mine = local(secs);
    racing.push(Box::pin(async move { (None, Ok(mine.await)) }));
    for peer in state.config().lab_peers.iter().cloned() {
        let mut args = ask.args.clone();
        args["wait_secs"] = secs.into();
        racing.push(Box::pin(async move {
            let limit = PEER_GRACE + Duration::from_secs(secs);
            let r = peer_link::call(&peer, Some(agent), "lock_board", args, limit).await;
            (Some(peer), r)
        }));
    }
    let mut racing = racing;
    let mut why = Vec::new();
    loop {
        let next = tokio::select! {
            n = racing.next() => n,
            _ = ct.cancelled() => return refusal(Refusal::new(
                RefusalReason::Cancelled,
                "cancelled while queued for a board of the lab (the queues on every host were left)",
            )),
        };
        let Some((peer, r)) = next else { break };
        let name = peer.as_ref().map_or(here.clone(), |p| p.name.clone());
        match r {
            Ok(r) if r.is_error != Some(true) => {
                settle(state, ask, racing).await;
                let won = with_host(r, &name, peer.as_ref().map(|p| p.name.as_str()));
                return with_queue(won, &ahead);
            }
            Ok(r) => why.push(format!("{name}: {}", message(&r))),
            Err(e) => why.push(format!("{name}: {e}")),
        }
    }
    refusal(Refusal::new(
        RefusalReason::DeviceBusy,
        format!(
            "no matching board came free on any host of the lab within wait_secs (queued on every host, served in arrival order): {}. Pass a longer wait_secs to queue again, or list_boards {{scope: \"lab\"}} to see who holds each board.",
            why.join("; ")
        ),
    ))
}

/// Gives the other hosts [`SETTLE`] to answer and releases any lease one granted; the rest
/// are dropped, which takes the waiter out of their queues.
async fn settle(state: &AppState, ask: &LabAsk<'_>, mut racing: Racing<'_>) {
    let extra = tokio::time::timeout(SETTLE, async {
        let mut got = Vec::new();
        while let Some((peer, r)) = racing.next().await {
            if let Ok(r) = r
                && r.is_error != Some(true)
                && let Some(id) = lease_of(&r)
            {
                got.push((peer, id));
            }
        }
        got
    });
    for (peer, id) in extra.await.unwrap_or_default() {
        match peer {
            None => {
                let _ =
                    gatecmd_domain::usecases::unlock::end_lease(state, ask.who, &LeaseId(id), None);
            }
            Some(p) => {
                let args = serde_json::json!({"lease": id});
                let _ = peer_link::call(&p, Some(&ask.who.name), "unlock_device", args, PEER_GRACE)
                    .await;
            }
        }
    }
}

fn lease_of(r: &CallToolResult) -> Option<String> {
    r.structured_content
        .as_ref()?
        .get("lease_id")?
        .as_str()
        .map(str::to_string)
}

/// The lease answer with `queued_ahead` (host → requests queued there when it arrived).
fn with_queue(mut r: CallToolResult, ahead: &BTreeMap<String, usize>) -> CallToolResult {
    if let Some(s) = r.structured_content.as_mut() {
        s["queued_ahead"] = serde_json::to_value(ahead).unwrap_or(Value::Null);
    }
    let line = ahead
        .iter()
        .map(|(h, n)| format!("{h}: {n}"))
        .collect::<Vec<_>>()
        .join(", ");
    if !line.is_empty()
        && let Some(rmcp::model::ContentBlock::Text(t)) = r.content.first_mut()
    {
        t.text.push_str(&format!(
            " Queued lab-wide; requests queued before yours: {line}."
        ));
    }
    r
}

/// The queue length a host's busy refusal names (`…; N other match request(s) queued`).
pub fn queued_in(message: &str) -> Option<usize> {
    let at = message.find(" other match request(s) queued")?;
    let digits: String = message[..at]
        .chars()
        .rev()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.chars().rev().collect::<String>().parse().ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_queue_length_is_read_from_a_busy_refusal() {
        let m = "every board with soc=rk3588 is in use; b1: leased by x; 2 other match request(s) queued. Pass wait_secs";
        assert_eq!(super::queued_in(m), Some(2));
        assert_eq!(super::queued_in("no board has soc=x now"), None);
    }
}
