//! `flash_board` on `HOST/BOARD`: the image (and bmap) named as for a local flash, paths
//! in this host's file roots, are sent to the board's host (`upload`), then that host's
//! `flash_board` runs there as a job for the agent (`background: true` on the peer, always,
//! so no flash hangs on a connection of ours). Its job is `HOST/JOB` here: `background`
//! answers with it at once; otherwise this host follows it with the peer's `wait_job` in
//! waits of [`POLL_SECS`], relaying its progress to the agent, and answers with the flash's
//! result as a local flash does. An agent that gives up leaves the flash running there,
//! followed with `wait_job {job: "HOST/JOB"}`. The loader (`loader`) is the board's host's
//! file: its `flash.loaders` roots decide, as for its own agents.

use std::time::{Duration, Instant};

use rmcp::RoleServer;
use rmcp::model::{CallToolResult, ContentBlock, ProgressNotificationParam};
use rmcp::service::RequestContext;
use serde_json::{Value, json};

use super::boards::this_host;
use super::jobs::qualified;
use super::names::{qualify, remote};
use super::peer_link::{self, PEER_GRACE};
use super::upload::{Sender, push};
use crate::calls::answer::refusal;
use gatecmd_core::identity::ClientIdentity;
use gatecmd_core::refusal::{Classified, Refusal, RefusalReason};
use gatecmd_domain::config::LabPeer;
use gatecmd_domain::state::AppState;

/// Each wait on the peer's job, between progress relays.
const POLL_SECS: u64 = 5;
/// A flash's limit when the call gives none (flash_board's default).
const DEFAULT_FLASH_SECS: u64 = 1800;

/// `flash_board`'s arguments as this host's part needs them.
pub struct RemoteFlash<'a> {
    pub board: &'a str,
    pub lease: Option<&'a str>,
    pub image: &'a str,
    pub bmap: Option<&'a str>,
    pub background: bool,
    pub timeout_secs: Option<u64>,
    /// The rest of the call as the peer takes it (`loader`, `wait_for`, `note`, …).
    pub args: Value,
}

/// The answer of a flash of `HOST/BOARD`; `None` when `req.board` is this host's.
pub async fn remote_flash(
    state: &AppState,
    who: &ClientIdentity,
    req: RemoteFlash<'_>,
    ctx: &RequestContext<RoleServer>,
) -> Option<CallToolResult> {
    let (host, board) = remote(req.board)?;
    Some(match start(state, who, &req, host, board).await {
        Ok((_, started)) if req.background || started.is_error == Some(true) => {
            qualified(started, host)
        }
        Ok((peer, started)) => follow(&peer, who, &req, host, started, ctx).await,
        Err(r) => refusal(r),
    })
}

/// Sends the files and starts the flash on the peer; its `flash_board` answer.
async fn start(
    state: &AppState,
    who: &ClientIdentity,
    req: &RemoteFlash<'_>,
    host: &str,
    board: &str,
) -> Result<(LabPeer, CallToolResult), Refusal> {
    if who.name.contains('/') {
        return Err(Refusal::new(
            RefusalReason::InvalidRequest,
            format!(
                "{} acts through a lab peer already; a call from another host cannot go on to a third (name this host's boards without a HOST/ prefix)",
                who.name
            ),
        ));
    }
    let lease = match req.lease.map(|l| (l, remote(l))) {
        Some((_, Some((h, id)))) if h == host => Some(id),
        Some((l, _)) => {
            return Err(Refusal::new(
                RefusalReason::InvalidRequest,
                format!(
                    "lease {l:?} is not a lease of lab host {host:?}; pass the lease lock_board {{board: \"{host}/{board}\"}} gave (HOST/LEASE)"
                ),
            ));
        }
        None => None,
    };
    let peer = peer_link::find(&state.config().lab_peers, host)?;
    let here = this_host(state);
    let send = |what| Sender {
        here: &here,
        agent: &who.name,
        what,
    };
    precheck(&peer, &who.name, host, board).await?;
    let mut args = req.args.clone();
    args["board"] = board.into();
    args["image"] = push(state, &peer, &send("image"), req.image).await?.into();
    if let Some(b) = req.bmap {
        args["bmap"] = push(state, &peer, &send("bmap"), b).await?.into();
    }
    if let Some(l) = lease {
        args["lease"] = l.into();
    }
    args["background"] = true.into();
    if let Some(o) = args.as_object_mut() {
        o.retain(|_, v| !v.is_null());
    }
    // The peer answers once its checks (and any approval there) passed and the job started.
    let limit = PEER_GRACE + Duration::from_secs(flash_secs(req));
    let started = peer_link::call(&peer, Some(&who.name), "flash_board", args, limit).await?;
    Ok((peer, started))
}

/// What the board's host shows the agent before any byte is sent: a flash it would refuse
/// at once (flashing off for this agent there, the board another's) costs no transfer.
/// The board's host still decides when the flash is asked (this is one look, not a hold).
async fn precheck(peer: &LabPeer, agent: &str, host: &str, board: &str) -> Result<(), Refusal> {
    let list = peer_link::call(
        peer,
        Some(agent),
        "list_boards",
        json!({}),
        peer_link::LIST_TIMEOUT,
    )
    .await?;
    let Some(b) = (list.structured_content.as_ref())
        .and_then(|v| v.get("boards"))
        .and_then(Value::as_array)
        .and_then(|bs| {
            bs.iter()
                .find(|b| b.get("name").and_then(Value::as_str) == Some(board))
        })
    else {
        // Unknown there: the peer's own flash_board says so, with its words.
        return Ok(());
    };
    if b.pointer("/flash/enabled") == Some(&Value::Bool(false)) {
        return Err(Refusal::new(
            RefusalReason::NotConfigured,
            format!(
                "flash_board is not enabled for board {host}/{board} for you on lab host {host} (its flash settings); nothing was sent. list_boards {{scope: \"lab\"}} shows each board's flash.enabled"
            ),
        ));
    }
    // The peer names the agent `PEER-CLIENT/AGENT` after the client this host is there,
    // which need not be this host's own name (`local` without a coordinator): a holder
    // that may be this agent is left to the peer to judge.
    if let Some(holder) = b.pointer("/lock/holder").and_then(Value::as_str)
        && !holder.ends_with(&format!("/{agent}"))
    {
        return Err(Refusal::new(
            RefusalReason::DeviceBusy,
            format!(
                "board {host}/{board} is held by {holder} on lab host {host}; nothing was sent. lock_board {{board: \"{host}/{board}\", wait_secs: 60}} queues for it"
            ),
        ));
    }
    Ok(())
}

fn flash_secs(req: &RemoteFlash<'_>) -> u64 {
    req.timeout_secs.unwrap_or(DEFAULT_FLASH_SECS).min(3600)
}

/// Follows the peer's job until it ends (or the flash's own limit passed), relaying its
/// progress; the flash's result as a local foreground flash answers it.
async fn follow(
    peer: &LabPeer,
    who: &ClientIdentity,
    req: &RemoteFlash<'_>,
    host: &str,
    started: CallToolResult,
    ctx: &RequestContext<RoleServer>,
) -> CallToolResult {
    let Some(job) = job_of(&started) else {
        return qualified(started, host);
    };
    let named = qualify(host, &job);
    let deadline = Instant::now() + Duration::from_secs(flash_secs(req)) + PEER_GRACE;
    let token = ctx.meta.get_progress_token();
    let mut sent: Option<f64> = None;
    while Instant::now() < deadline {
        let ask = json!({"job": job, "timeout_secs": POLL_SECS});
        let limit = PEER_GRACE + Duration::from_secs(POLL_SECS);
        let waited = tokio::select! {
            w = peer_link::call(peer, Some(&who.name), "wait_job", ask, limit) => w,
            _ = ctx.ct.cancelled() => return refusal(Refusal::new(
                RefusalReason::Cancelled,
                format!("the wait was cancelled; the flash goes on as job {named} on lab host {host}: wait_job {{\"job\": \"{named}\"}} follows it"),
            )),
        };
        let w = match waited {
            Ok(w) if w.is_error != Some(true) => w,
            Ok(w) => return qualified(w, host),
            Err(e) => {
                return refusal(Refusal::new(
                    e.reason(),
                    format!(
                        "{e}. The flash may go on there as job {named}: wait_job {{\"job\": \"{named}\"}} follows it once the host answers"
                    ),
                ));
            }
        };
        let s = w.structured_content.unwrap_or_default();
        let state = s.get("state").and_then(Value::as_str).unwrap_or("lost");
        if let (Some(t), Some(p)) = (&token, s.get("progress").and_then(Value::as_f64))
            && sent.is_none_or(|was| p > was)
        {
            sent = Some(p);
            let mut param = ProgressNotificationParam::new(t.clone(), p)
                .with_message(format!("flash_board {}: {state} {p}%", req.board));
            param.total = Some(100.0);
            let _ = ctx.peer.notify_progress(param).await;
        }
        if !matches!(state, "running" | "awaiting_approval") {
            return ended(&s, req, &named, host, state);
        }
    }
    qualified(started, host)
}

fn job_of(r: &CallToolResult) -> Option<String> {
    r.structured_content
        .as_ref()?
        .get("job")?
        .as_str()
        .map(str::to_string)
}

/// The ended job's flash result, as a local flash answers (an error unless it succeeded).
fn ended(s: &Value, req: &RemoteFlash<'_>, named: &str, host: &str, state: &str) -> CallToolResult {
    let mut result = s.get("result").cloned().unwrap_or_else(
        || json!({"board": req.board, "state": state, "steps": [], "verified": false}),
    );
    result["job"] = named.into();
    result["board"] = req.board.into();
    let mut text = format!(
        "flash of {} to board {} (job {named} on lab host {host}): {state}",
        req.image, req.board
    );
    for (label, key) in [
        ("", "/failure/message"),
        (" next: ", "/failure/next_action"),
    ] {
        if let Some(m) = result.pointer(key).and_then(Value::as_str) {
            text.push_str(&format!(";{label} {m}"));
        }
    }
    // The steps and the boot log's last lines, as a local flash's text shows them.
    let steps: Vec<String> = (result.get("steps").and_then(Value::as_array))
        .into_iter()
        .flatten()
        .filter_map(|s| Some(format!("{} {} ms", s.get("step")?.as_str()?, s.get("ms")?)))
        .collect();
    if !steps.is_empty() {
        text.push_str(&format!("\nsteps: {}", steps.join(", ")));
    }
    if let Some(log) = result.pointer("/flashed/boot_log").and_then(Value::as_str) {
        text.push_str(&crate::calls::boot_log::tail(log));
    }
    let mut r = CallToolResult::structured(result);
    r.content = vec![ContentBlock::text(text)];
    r.is_error = Some(state != "succeeded");
    r
}
