//! What `gatecmd check` says of `labgrid.peers` (docs/LAB.md, "One lab for agents"): for
//! each peer, whether it answers this host's peer token (and with how many boards), refuses
//! it, or does not answer; all asked at once, each within 5 s. Warnings only: a peer that is
//! down does not make this host's configuration invalid.

use gatecmd_domain::config::LabPeer;
use gatecmd_mcp::lab::peer_link::{LIST_TIMEOUT, call};
use serde_json::{Value, json};

/// One line per peer.
pub fn check_lines(peers: &[LabPeer]) -> Vec<String> {
    if peers.is_empty() {
        return Vec::new();
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return vec![format!("lab peers: warning: cannot ask them: {e}")],
    };
    let asked = rt.block_on(futures::future::join_all(
        peers
            .iter()
            .map(|p| call(p, None, "list_boards", json!({}), LIST_TIMEOUT)),
    ));
    peers
        .iter()
        .zip(asked)
        .map(|(p, answer)| match answer {
            Ok(r) => {
                let n = r
                    .structured_content
                    .as_ref()
                    .and_then(|v| v.get("boards"))
                    .and_then(Value::as_array)
                    .map_or(0, Vec::len);
                format!(
                    "lab peer {} ({}): answers this host's peer token; {n} board(s)",
                    p.name, p.url
                )
            }
            Err(e) => format!("lab peer {} ({}): warning: {e}", p.name, p.url),
        })
        .collect()
}
