//! `lock_board {scope: "lab"}` (and `lock_board {board: "HOST/BOARD"}`): a free matching
//! board on this host first, else on a peer (its `lock_board`, for the calling agent), in
//! `labgrid.peers` order among the peers whose list shows a free board the match may take
//! (all asked at once: one round trip, not one per peer); with `wait_secs`, queued on every host at once (`queue`). The
//! answer is the lease as `lock_board` gives it plus `host`; a remote lease's `lease_id`
//! and `board` are qualified (`HOST/…`), and every board tool given them goes to that host
//! (`forward`).

use std::future::Future;
use std::time::{Duration, Instant};

use rmcp::model::CallToolResult;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::answers::{LabAsk, message, refusal_reason, with_host};
use super::boards::this_host;
use super::names::remote;
use super::peer_link::{self, PEER_GRACE};
use crate::calls::answer::refusal;
use gatecmd_core::identity::ClientIdentity;
use gatecmd_core::refusal::common::WaitTooLong;
use gatecmd_core::refusal::{Refusal, RefusalReason};
use gatecmd_domain::locks::MAX_WAIT_SECS;
use gatecmd_domain::state::AppState;

/// `lock_board` across the lab. `local(wait_secs)` is this host's `lock_board` (0: one try).
pub async fn lab_lock<F, Fut>(
    state: &AppState,
    ask: LabAsk<'_>,
    ct: &CancellationToken,
    local: F,
) -> CallToolResult
where
    F: Fn(u64) -> Fut,
    Fut: Future<Output = CallToolResult> + Send,
{
    if ask.who.name.contains('/') {
        return refusal(Refusal::new(
            RefusalReason::InvalidRequest,
            format!(
                "{} acts through a lab peer already; scope \"lab\" and HOST/BOARD names are for agents of this host",
                ask.who.name
            ),
        ));
    }
    if let Err(e) = WaitTooLong::check(ask.wait_secs, MAX_WAIT_SECS) {
        return refusal(e.into());
    }
    if let Some((host, board)) = ask
        .args
        .get("board")
        .and_then(Value::as_str)
        .and_then(remote)
    {
        let (host, board) = (host.to_string(), board.to_string());
        return on_peer_named(state, &ask, &host, &board).await;
    }
    let deadline = Instant::now() + Duration::from_secs(ask.wait_secs);
    let here = local(0).await;
    if here.is_error != Some(true) {
        return with_host(here, &this_host(state), None);
    }
    let reason = refusal_reason(&here);
    if !matches!(reason.as_deref(), Some("device_busy" | "not_found")) {
        return here;
    }
    if let Some(down) = directory_down(state, &message(&here)) {
        return down;
    }
    let mut why = vec![format!("{}: {}", this_host(state), message(&here))];
    let survey = super::queue::survey(state, &ask).await;
    why.extend(survey.others);
    let peers = survey.candidates;
    let mut args = ask.args.clone();
    args["wait_secs"] = 0.into();
    for peer in &peers {
        match peer_link::call(
            peer,
            Some(&ask.who.name),
            "lock_board",
            args.clone(),
            PEER_GRACE,
        )
        .await
        {
            Ok(r) if r.is_error != Some(true) => {
                return with_host(r, &peer.name, Some(&peer.name));
            }
            Ok(r) => why.push(format!("{}: {}", peer.name, message(&r))),
            Err(e) => why.push(format!("{}: {e}", peer.name)),
        }
    }
    if ask.wait_secs > 0 {
        return super::queue::wait_lab(
            state,
            &ask,
            survey.ahead,
            &survey.matching,
            deadline,
            ct,
            &local,
        )
        .await;
    }
    refusal(Refusal::new(
        RefusalReason::DeviceBusy,
        format!(
            "no matching board is free on any host of the lab: {}. Pass wait_secs to queue on every host at once (served in arrival order across the lab), or list_boards {{scope: \"lab\"}} to see every board.",
            why.join("; ")
        ),
    ))
}

/// The refusal of a lab allocation when this host has a coordinator and cannot read its
/// listing now: where the lab's boards, people's acquisitions and reservations are found
/// is not known, so no board of another host is taken (docs/DECISIONS.md). `here` is this
/// host's own refusal.
fn directory_down(state: &AppState, here: &str) -> Option<CallToolResult> {
    state.config().labgrid.as_ref()?;
    let d = state.lab.directory.status();
    if d.up {
        return None;
    }
    let since = d
        .stale_secs
        .map(|s| format!(" for {s} s"))
        .unwrap_or_default();
    Some(refusal(Refusal::new(
        RefusalReason::CoordinatorUnreachable,
        format!(
            "no matching board is free on this host ({here}), and the lab's labgrid coordinator {} is not reachable{since} ({}): the lab's boards, people's acquisitions and reservations are listed there, so no board of another host is allocated until it is back. Use lock_board {{match}} without scope for this host's boards (wait_secs to queue), lock_board {{board: \"HOST/BOARD\"}} to ask one host directly, or list_boards {{scope: \"lab\"}} to see the boards as last listed.",
            d.coordinator,
            d.error.unwrap_or_default()
        ),
    )))
}

/// `lock_board {board: "HOST/BOARD"}`: that peer's `lock_board`, waiting there.
async fn on_peer_named(
    state: &AppState,
    ask: &LabAsk<'_>,
    host: &str,
    board: &str,
) -> CallToolResult {
    let peer = match peer_link::find(&state.config().lab_peers, host) {
        Ok(p) => p,
        Err(e) => return refusal(e.into()),
    };
    let mut args = ask.args.clone();
    args["board"] = board.into();
    args["wait_secs"] = ask.wait_secs.into();
    let limit = PEER_GRACE + Duration::from_secs(ask.wait_secs);
    match peer_link::call(&peer, Some(&ask.who.name), "lock_board", args, limit).await {
        Ok(r) if r.is_error != Some(true) => with_host(r, host, Some(host)),
        Ok(r) => r,
        Err(e) => refusal(e.into()),
    }
}

/// `lock_board`'s arguments as a peer takes them.
pub fn peer_args(
    board: Option<&str>,
    matches: Option<Value>,
    ttl_secs: Option<u64>,
    note: Option<&str>,
) -> Value {
    let mut a = json!({});
    if let Some(b) = board {
        a["board"] = b.into();
    }
    if let Some(m) = matches {
        a["match"] = m;
    }
    if let Some(t) = ttl_secs {
        a["ttl_secs"] = t.into();
    }
    if let Some(n) = note {
        a["note"] = n.into();
    }
    a
}

/// What `lock_board` was asked, as the lab sees it.
pub struct LockAsk<'r> {
    pub scope: Option<super::scope::Scope>,
    pub board: Option<&'r str>,
    pub matches: Option<&'r gatecmd_domain::boards::BoardMatch>,
    pub ttl_secs: Option<u64>,
    pub note: Option<&'r str>,
    pub wait_secs: Option<u64>,
}

/// The lab-wide ask of a `lock_board` request, when it is one (`scope: "lab"` or a
/// `HOST/BOARD` name); `None` for a request of this host alone.
pub fn lab_ask<'a>(who: &'a ClientIdentity, req: LockAsk<'_>) -> Option<LabAsk<'a>> {
    let named_remote = req.board.and_then(remote).is_some();
    if req.scope != Some(super::scope::Scope::Lab) && !named_remote {
        return None;
    }
    let matches = req.matches.and_then(|m| serde_json::to_value(m).ok());
    Some(LabAsk {
        who,
        args: peer_args(req.board, matches, req.ttl_secs, req.note),
        wait_secs: req.wait_secs.unwrap_or(0),
    })
}
