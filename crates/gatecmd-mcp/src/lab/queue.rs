//! The lab-wide queue of `lock_board {scope: "lab", wait_secs}`: when no matching board is
//! free anywhere, the waiter queues at once on every host of the lab, this host's queue and
//! each peer's (their `lock_board {match, wait_secs}`, for the agent), and takes the first
//! lease any host grants. Every host serves its queue in arrival order, and a lab waiter
//! enters every queue at the same moment (within the link's latency), so one waiter that
//! arrived before another, on any host, is ahead of it in every queue it shares: first
//! come, first served across hosts, to within the difference in network latency between
//! the hosts (docs/DECISIONS.md). The granted waiter's calls to the other hosts are
//! followed to their end in the background, and a lease any of them brings is released
//! at once (`drain`).
//!
//! Each host's queue when the waiter arrived (`queued_ahead`, from the boards' listed
//! `match_waiting`) is in the answer, and each host's own busy refusal in the refusal.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use rmcp::model::CallToolResult;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::answers::{LabAsk, message, with_host};
use super::boards::this_host;
use super::peer_link::{self, PEER_GRACE, PeerError};
use crate::calls::answer::refusal;
use gatecmd_core::refusal::{Refusal, RefusalReason};
use gatecmd_domain::config::LabPeer;
use gatecmd_domain::lab::LabWait;
use gatecmd_domain::state::AppState;

/// One peer's answer.
type Answer = (LabPeer, Result<CallToolResult, PeerError>);
type Racing = FuturesUnordered<Pin<Box<dyn Future<Output = Answer> + Send + 'static>>>;

/// Queues on this host and every peer of `queue_on` (those with a board the match may
/// take) until `deadline`; the first lease granted, with `host` and
/// `queued_ahead` (each host's queue when the waiter arrived).
pub async fn wait_lab<F, Fut>(
    state: &AppState,
    ask: &LabAsk<'_>,
    ahead: BTreeMap<String, usize>,
    queue_on: &[LabPeer],
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
    let mut racing: Racing = FuturesUnordered::new();
    // One wait, named alike on every host, arriving now: each host queues it by this
    // arrival, and it is withdrawn from the others once served (`withdraw_rest`).
    let wait = LabWait::now();
    // Open for the other hosts' claims: the first host to free a board for it is told
    // yes, the others no (`gatecmd_domain::lab::claims`).
    let open = state.lab.claims.open(&wait.id);
    let served = || {
        if let Some(o) = &open {
            o.served();
        }
    };
    let mut pending: Vec<LabPeer> = queue_on.to_vec();
    for peer in queue_on.iter().cloned() {
        let mut args = ask.args.clone();
        args["wait_secs"] = secs.into();
        let agent = ask.who.name.clone();
        // Named only when it is open for claims here: a host that asked about a wait this
        // host does not know would be told no, and never give the waiter a board.
        let wait = open.is_some().then(|| wait.clone());
        racing.push(Box::pin(async move {
            let limit = PEER_GRACE + Duration::from_secs(secs);
            let r = peer_link::call_queued(
                &peer,
                Some(&agent),
                "lock_board",
                args,
                limit,
                wait.as_ref(),
            )
            .await;
            (peer, r)
        }));
    }
    let mine = local(secs);
    tokio::pin!(mine);
    let mut mine_done = false;
    let mut why = Vec::new();
    loop {
        tokio::select! {
            r = &mut mine, if !mine_done => {
                mine_done = true;
                if r.is_error != Some(true) {
                    served();
                    withdraw_rest(pending, ask.who.name.clone(), wait);
                    drain(racing, ask.who.name.clone());
                    return with_queue(with_host(r, &here, None), &ahead);
                }
                why.push(format!("{here}: {}", message(&r)));
            }
            n = racing.next(), if !racing.is_empty() => {
                let Some((peer, r)) = n else { continue };
                pending.retain(|p| p.name != peer.name);
                match r {
                    Ok(r) if r.is_error != Some(true) => {
                        served();
                        withdraw_rest(pending, ask.who.name.clone(), wait);
                        // This host's own wait ends here (`mine` is dropped: its queue guard
                        // leaves the queue or gives back a key handed over meanwhile).
                        drain(racing, ask.who.name.clone());
                        let won = with_host(r, &peer.name, Some(&peer.name));
                        return with_queue(won, &ahead);
                    }
                    Ok(r) => why.push(format!("{}: {}", peer.name, message(&r))),
                    Err(e) => why.push(format!("{}: {e}", peer.name)),
                }
            }
            _ = ct.cancelled() => {
                withdraw_rest(pending, ask.who.name.clone(), wait);
                drain(racing, ask.who.name.clone());
                return refusal(Refusal::new(
                    RefusalReason::Cancelled,
                    "cancelled while queued for a board of the lab (a lease another host grants now is released at once)",
                ));
            }
        }
        if mine_done && racing.is_empty() {
            break;
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

/// Withdraws the served (or cancelled) waiter's wait from every host still holding it, at
/// once and in the background (each within `wait_link::WAIT_LINK_WITHIN`): the board such a
/// host frees next goes to its next waiter at once. A host that grants the wait before
/// the withdrawal reaches it is answered by `drain`'s release.
fn withdraw_rest(pending: Vec<LabPeer>, agent: String, wait: LabWait) {
    if pending.is_empty() {
        return;
    }
    tokio::spawn(async move {
        let each = pending
            .iter()
            .map(|p| super::wait_link::withdraw(p, &agent, &wait));
        futures::future::join_all(each).await;
    });
}

/// The other hosts' waits of a served (or cancelled) waiter, followed to their end in the
/// background, each bounded by its own limit: a lease one of them grants is released at
/// once, so that the board goes to the next in that host's queue. (Dropping them instead
/// would leave the peer to notice the closed connection, which it does only when it next
/// writes to it: a lease granted meanwhile would stay held by nobody until its expiry.)
fn drain(mut racing: Racing, agent: String) {
    if racing.is_empty() {
        return;
    }
    tokio::spawn(async move {
        while let Some((peer, r)) = racing.next().await {
            let Some(id) = r
                .ok()
                .filter(|r| r.is_error != Some(true))
                .and_then(|r| lease_of(&r))
            else {
                continue;
            };
            let args = serde_json::json!({"lease": id});
            let _ = peer_link::call(&peer, Some(&agent), "unlock_device", args, PEER_GRACE).await;
        }
    });
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

/// What one look at the lab's boards (every host asked at once) says of a match.
pub struct Survey {
    /// The peers worth a try without waiting, in `labgrid.peers` order: those that list a
    /// free board the match may take.
    pub candidates: Vec<LabPeer>,
    /// Each host's queue for such a board (`match_waiting`, the most of its boards').
    pub ahead: BTreeMap<String, usize>,
    /// Why each other peer is not worth a try (its boards held, or it did not answer).
    pub others: Vec<String>,
    /// The peers with any board the match may take, free or not, in `labgrid.peers`
    /// order: those a waiter queues on (a host without one could never serve it).
    pub matching: Vec<LabPeer>,
}

/// Looks at the lab for `ask`'s match. A board "may take" it when none of its listed tags
/// contradicts the match (a tag a board does not list may come from its device, and mode,
/// family and attached are the board's host's to judge, so they rule nothing out here).
pub async fn survey(state: &AppState, ask: &LabAsk<'_>) -> Survey {
    let lab = super::boards::lab_boards(state, &ask.who.name).await;
    let wanted = ask.args.get("match").and_then(Value::as_object);
    let fits = |b: &Value| {
        let tags = b.get("tags").and_then(Value::as_object);
        wanted.is_none_or(|m| {
            m.iter()
                .filter(|(k, _)| !matches!(k.as_str(), "family" | "mode" | "attached"))
                .all(|(k, v)| tags.and_then(|t| t.get(k)).is_none_or(|t| t == v))
        })
    };
    let may_take = |b: &Value| b.get("reachable") == Some(&Value::Bool(true)) && fits(b);
    let mut open: Vec<&str> = Vec::new();
    let mut any: Vec<&str> = Vec::new();
    let mut ahead = BTreeMap::new();
    let mut held: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for b in lab.boards.iter().filter(|b| may_take(b)) {
        let Some(host) = b.get("host").and_then(Value::as_str) else {
            continue;
        };
        any.push(host);
        let waiting = b.get("match_waiting").and_then(Value::as_u64).unwrap_or(0) as usize;
        let n = ahead.entry(host.to_string()).or_insert(0);
        *n = (*n).max(waiting);
        let lock = b.get("lock");
        let taken = lock.and_then(|l| l.get("held")).and_then(Value::as_bool);
        let holder = lock.and_then(|l| l.get("holder")).and_then(Value::as_str);
        if taken.unwrap_or(holder.is_some()) {
            let note = lock
                .and_then(|l| l.get("note"))
                .and_then(Value::as_str)
                .map(|n| format!(" ({n})"))
                .unwrap_or_default();
            let name = b.get("name").and_then(Value::as_str).unwrap_or_default();
            held.entry(host).or_default().push(format!(
                "{name} held by {}{note}",
                holder.unwrap_or("a command or a port lease")
            ));
        } else {
            open.push(host);
        }
    }
    let matching = (state.config().lab_peers.iter())
        .filter(|p| any.contains(&p.name.as_str()))
        .cloned()
        .collect();
    let (candidates, not): (Vec<LabPeer>, Vec<LabPeer>) = state
        .config()
        .lab_peers
        .iter()
        .cloned()
        .partition(|p| open.contains(&p.name.as_str()));
    // Hosts the coordinator lists with a board the match may take that this host cannot
    // reach (no `labgrid.peers` entry): said, so that the agent knows why not.
    let unpeered = lab.hosts.iter().filter(|h| {
        h.host != this_host(state)
            && !state.config().lab_peers.iter().any(|p| p.name == h.host)
            && lab
                .boards
                .iter()
                .any(|b| b.get("host").and_then(Value::as_str) == Some(h.host.as_str()) && fits(b))
    });
    let unpeered: Vec<String> = unpeered
        .map(|h| {
            let line = format!(
                "{}: {}",
                h.host,
                h.error.as_deref().unwrap_or("not reachable")
            );
            gatecmd_core::output::one_line(&line, 300)
        })
        .collect();
    let others = not
        .iter()
        .map(|p| {
            let seen = lab.hosts.iter().find(|h| h.host == p.name);
            let line = match seen.and_then(|h| h.error.as_deref()) {
                Some(e) => format!("{}: {e}", p.name),
                None => format!(
                    "{}: {} ({} match request(s) queued)",
                    p.name,
                    held.get(p.name.as_str())
                        .map_or_else(|| "no board that may match".to_string(), |h| h.join(", ")),
                    ahead.get(&p.name).copied().unwrap_or(0)
                ),
            };
            // As each host's own refusal in `lock`, one line of at most 300 characters.
            gatecmd_core::output::one_line(&line, 300)
        })
        .chain(unpeered)
        .collect();
    Survey {
        candidates,
        ahead,
        others,
        matching,
    }
}
