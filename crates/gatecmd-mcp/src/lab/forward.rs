//! A board tool on another host's board: a call whose `board` is `HOST/BOARD` (or whose
//! `lease` is `HOST/LEASE`) goes to that peer as it is, with the names made the peer's
//! own, for the calling agent (`Gatecmd-On-Behalf-Of`), and the peer's answer comes back
//! unchanged. The peer's approvals and board rules apply there. A peer that does not answer
//! within the call's own wait plus [`PEER_GRACE`] is refused `host_unreachable`.

use std::time::Duration;

use rmcp::model::CallToolResult;
use serde::Serialize;
use serde_json::Value;

use super::names::remote;
use super::peer_link::{self, PEER_GRACE};
use crate::calls::answer::refusal;
use gatecmd_core::identity::ClientIdentity;
use gatecmd_core::refusal::{Refusal, RefusalReason};
use gatecmd_domain::state::AppState;

/// The answer of `tool` on the peer when `req` names a remote board or lease; `None` for a
/// local call (the tool then does its own work). `wait_secs` is how long the call itself
/// may take (its `timeout_secs`, `wait_secs`), added to the grace.
pub async fn remote_call<T: Serialize>(
    state: &AppState,
    who: &ClientIdentity,
    tool: &str,
    req: &T,
    wait_secs: u64,
) -> Option<CallToolResult> {
    let mut args = serde_json::to_value(req).ok()?;
    let board = field(&args, "board");
    let lease = field(&args, "lease");
    let board_at = board.as_deref().and_then(remote);
    let lease_at = lease.as_deref().and_then(remote);
    let host = match (board_at, lease_at) {
        (None, None) => return None,
        (Some((h, _)), None) | (None, Some((h, _))) => h,
        (Some((h, _)), Some((l, _))) if h == l => h,
        (Some((h, _)), Some((l, _))) => {
            return Some(refusal(Refusal::new(
                RefusalReason::InvalidRequest,
                format!("board is on lab host {h:?} but the lease is on {l:?}; pass the lease lock_board gave for that board"),
            )));
        }
    }
    .to_string();
    if who.name.contains('/') {
        return Some(refusal(Refusal::new(
            RefusalReason::InvalidRequest,
            format!(
                "{} acts through a lab peer already; a call from another host cannot go on to a third (name this host's boards without a HOST/ prefix)",
                who.name
            ),
        )));
    }
    if let Some((_, b)) = board_at {
        args["board"] = b.into();
    }
    if let Some((_, l)) = lease_at {
        args["lease"] = l.into();
    }
    if let Some(o) = args.as_object_mut() {
        o.retain(|_, v| !v.is_null());
    }
    let peer = match peer_link::find(&state.config().lab_peers, &host) {
        Ok(p) => p,
        Err(e) => return Some(refusal(e.into())),
    };
    let limit = PEER_GRACE + Duration::from_secs(wait_secs.min(3600));
    Some(
        match peer_link::call(&peer, Some(&who.name), tool, args, limit).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(host = %host, tool, error = %e, "lab: peer call failed");
                refusal(e.into())
            }
        },
    )
}

fn field(args: &Value, key: &str) -> Option<String> {
    args.get(key).and_then(Value::as_str).map(str::to_string)
}
