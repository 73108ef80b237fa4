//! A board tool on another host's board: a call whose `board` is `HOST/BOARD` (or whose
//! `lease` is `HOST/LEASE`, or whose `job` is `HOST/JOB`) goes to that peer as it is, with
//! the names made the peer's own, for the calling agent (`Gatecmd-On-Behalf-Of`), and the
//! peer's answer comes back as it is but for a job it names, made `HOST/JOB` (`jobs`). The
//! peer's approvals and board rules apply there. A peer that does not answer within the
//! call's own wait plus [`PEER_GRACE`] is refused `host_unreachable`.

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
    let host = match target_host(&args) {
        Ok(None) => return None,
        Ok(Some(h)) => h,
        Err(r) => return Some(refusal(r)),
    };
    if who.name.contains('/') {
        return Some(refusal(Refusal::new(
            RefusalReason::InvalidRequest,
            format!(
                "{} acts through a lab peer already; a call from another host cannot go on to a third (name this host's boards without a HOST/ prefix)",
                who.name
            ),
        )));
    }
    for key in NAMED {
        if let Some((_, name)) = field(&args, key).as_deref().and_then(remote) {
            args[key] = name.into();
        }
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
            Ok(r) => super::jobs::qualified(r, &host),
            Err(e) => {
                tracing::warn!(host = %host, tool, error = %e, "lab: peer call failed");
                refusal(e.into())
            }
        },
    )
}

/// The arguments that may name something of another host (`HOST/NAME`).
const NAMED: [&str; 3] = ["board", "lease", "job"];

/// The one host the call's `board`, `lease` and `job` name (`None`: all are this host's);
/// a refusal when they name two.
fn target_host(args: &Value) -> Result<Option<String>, Refusal> {
    let mut host: Option<(String, &str)> = None;
    for key in NAMED {
        let Some(v) = field(args, key) else { continue };
        let Some((h, _)) = remote(&v) else { continue };
        match &host {
            None => host = Some((h.to_string(), key)),
            Some((first, by)) if first != h => {
                return Err(Refusal::new(
                    RefusalReason::InvalidRequest,
                    format!(
                        "{by} is on lab host {first:?} but {key} is on {h:?}; pass the lease lock_board gave for that board (and the job its flash_board gave)"
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    Ok(host.map(|(h, _)| h))
}

fn field(args: &Value, key: &str) -> Option<String> {
    args.get(key).and_then(Value::as_str).map(str::to_string)
}
