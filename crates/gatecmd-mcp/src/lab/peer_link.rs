//! The peer link: one tool call on another gatecmd host of the lab, as that host's client
//! with `peer: true`, acting for an agent of this host (`Gatecmd-On-Behalf-Of`). Each call
//! is one stateless 2026-07-28 `tools/call` POST (no session: nothing on the peer ends
//! with a connection of ours), bounded in time and in the bytes read back, and the token
//! is read at each call (an owner-only `token_file` may be rotated) and never logged.

use std::sync::OnceLock;
use std::time::Duration;

use rmcp::model::CallToolResult;
use serde_json::{Value, json};

use gatecmd_core::refusal::{Classified, RefusalReason};
use gatecmd_domain::config::LabPeer;
use gatecmd_domain::lab::LabWait;

/// How long a peer may take beyond the call's own wait to end its answer before it counts
/// as unreachable.
pub const PEER_GRACE: Duration = Duration::from_secs(10);
/// How long a peer may take to start its answer (its headers; a gatecmd sends them within
/// about 2 s, streaming a slower call), so that a peer that stopped is found within 10 s
/// whatever the call's own wait.
pub const HEADERS_WITHIN: Duration = Duration::from_secs(8);
/// How long `list_boards {scope: "lab"}` waits for each host.
pub const LIST_TIMEOUT: Duration = Duration::from_secs(5);
/// The headers naming a lab wait and its arrival (the receiving side's
/// `transport::lab_waits`; the wait's own routes are `wait_link`'s).
const LAB_WAIT: &str = "gatecmd-lab-wait";
const LAB_ARRIVAL: &str = "gatecmd-lab-arrival";
/// Most bytes of one peer answer read (a `console_read` or `board_run` answer is far less).
const MAX_ANSWER_BYTES: usize = 8 * 1024 * 1024;
/// The header a peer names its agent in (the receiving side's `transport::on_behalf`).
pub const ON_BEHALF_OF: &str = "gatecmd-on-behalf-of";

/// Why a call on a peer got no answer of the peer's tool.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error(
        "lab host {host:?} is not one of this host's labgrid.peers ({known}); list_boards {{scope: \"lab\"}} shows the lab's boards by HOST/BOARD"
    )]
    UnknownHost { host: String, known: String },
    #[error(
        "lab host {host:?} did not answer: {why}. Its boards cannot be reached from here now; list_boards {{scope: \"lab\"}} shows which hosts answer, and a lease there ends by its own expiry"
    )]
    Unreachable { host: String, why: String },
    #[error(
        "lab host {host:?} refused this host's peer token ({why}); the operator of both hosts must match labgrid.peers' token with a client with peer: true there"
    )]
    Refused { host: String, why: String },
    #[error(
        "the peer token for lab host {host:?} cannot be read: {why}; the operator fixes labgrid.peers"
    )]
    Token { host: String, why: String },
}

impl Classified for PeerError {
    fn reason(&self) -> RefusalReason {
        match self {
            PeerError::UnknownHost { .. } => RefusalReason::NotFound,
            PeerError::Unreachable { .. } | PeerError::Refused { .. } => {
                RefusalReason::HostUnreachable
            }
            PeerError::Token { .. } => RefusalReason::NotConfigured,
        }
    }
}

/// The peer named `host` of the configuration in force.
pub fn find(peers: &[LabPeer], host: &str) -> Result<LabPeer, PeerError> {
    gatecmd_domain::config::peer(peers, host)
        .cloned()
        .ok_or_else(|| PeerError::UnknownHost {
            host: host.into(),
            known: if peers.is_empty() {
                "none are configured".into()
            } else {
                peers
                    .iter()
                    .map(|p| p.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        })
}

pub(super) fn client() -> &'static reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(3))
            .pool_idle_timeout(Duration::from_secs(30))
            .build()
            .unwrap_or_default()
    })
}

/// Calls `tool` with `args` on `peer` for `agent` (`None`: as the peer client itself),
/// waiting at most `limit` for the whole answer. The peer's tool answer (a result or its
/// refusal) is returned as it is.
pub async fn call(
    peer: &LabPeer,
    agent: Option<&str>,
    tool: &str,
    args: Value,
    limit: Duration,
) -> Result<CallToolResult, PeerError> {
    call_queued(peer, agent, tool, args, limit, None).await
}

/// [`call`] for a lab waiter: the request names the wait (`Gatecmd-Lab-Wait`) and when
/// the agent arrived (`Gatecmd-Lab-Arrival`), so that the peer queues it by that arrival
/// and lets this host withdraw it ([`withdraw`]).
pub async fn call_queued(
    peer: &LabPeer,
    agent: Option<&str>,
    tool: &str,
    args: Value,
    limit: Duration,
    wait: Option<&LabWait>,
) -> Result<CallToolResult, PeerError> {
    let token = peer.token.read().map_err(|why| PeerError::Token {
        host: peer.name.clone(),
        why,
    })?;
    let unreachable = |why: String| PeerError::Unreachable {
        host: peer.name.clone(),
        why,
    };
    match tokio::time::timeout(limit, exchange(peer, &token, agent, tool, args, wait)).await {
        Ok(r) => r,
        Err(_) => Err(unreachable(format!(
            "no answer within {} s",
            limit.as_secs()
        ))),
    }
}

async fn exchange(
    peer: &LabPeer,
    token: &str,
    agent: Option<&str>,
    tool: &str,
    args: Value,
    wait: Option<&LabWait>,
) -> Result<CallToolResult, PeerError> {
    let unreachable = |why: String| PeerError::Unreachable {
        host: peer.name.clone(),
        why,
    };
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {
            "name": tool, "arguments": args,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "gatecmd-peer", "version": env!("CARGO_PKG_VERSION")}
            }
        }
    });
    let mut req = client()
        .post(&peer.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("authorization", format!("Bearer {token}"))
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", tool);
    if let Some(a) = agent {
        req = req.header(ON_BEHALF_OF, a);
    }
    if let Some(w) = wait {
        req = req
            .header(LAB_WAIT, &w.id)
            .header(LAB_ARRIVAL, w.arrived_ms.to_string());
    }
    // A gatecmd answers every POST's headers within about 2 s (a slower call streams), so
    // a peer that sends none in time has stopped, whatever the call's own wait.
    let mut resp = tokio::time::timeout(HEADERS_WITHIN, req.body(body.to_string()).send())
        .await
        .map_err(|_| unreachable(format!("no answer within {} s", HEADERS_WITHIN.as_secs())))?
        .map_err(|e| unreachable(cause(&e)))?;
    let status = resp.status();
    if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
        // The peer's one-line reason (its gate answers `{"error", "message"}`), bounded.
        let said = tokio::time::timeout(Duration::from_secs(2), resp.chunk())
            .await
            .ok()
            .and_then(Result::ok)
            .flatten()
            .and_then(|b| serde_json::from_slice::<Value>(&b[..b.len().min(4096)]).ok())
            .and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_string))
            .map(|m| format!(": {}", gatecmd_core::output::one_line(&m, 300)))
            .unwrap_or_default();
        return Err(PeerError::Refused {
            host: peer.name.clone(),
            why: format!("HTTP {}{said}", status.as_u16()),
        });
    }
    let mut bytes = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| unreachable(cause(&e)))? {
        if bytes.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(unreachable(format!(
                "its answer passed {MAX_ANSWER_BYTES} bytes"
            )));
        }
        bytes.extend_from_slice(&chunk);
    }
    if !status.is_success() {
        return Err(unreachable(format!("HTTP {}", status.as_u16())));
    }
    let msg = answer_message(&String::from_utf8_lossy(&bytes))
        .ok_or_else(|| unreachable("its answer held no JSON-RPC response".into()))?;
    if let Some(result) = msg.get("result") {
        return serde_json::from_value(result.clone())
            .map_err(|e| unreachable(format!("its answer was not a tool result: {e}")));
    }
    let message = msg
        .pointer("/error/message")
        .and_then(Value::as_str)
        .unwrap_or("an error without a message");
    Err(unreachable(format!(
        "it answered with an error: {}",
        gatecmd_core::output::one_line(message, 200)
    )))
}

/// One JSON body, or the last `data:` of an SSE stream that carries an `id`.
fn answer_message(text: &str) -> Option<Value> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .rfind(|v| v.get("id").is_some())
        .or_else(|| serde_json::from_str(text).ok())
}

/// A reqwest error's cause, one line, without the URL's query (there is none) or a token
/// (never in the URL).
pub(super) fn cause(e: &reqwest::Error) -> String {
    let mut s = if e.is_connect() {
        "cannot connect".to_string()
    } else if e.is_timeout() {
        "timed out".to_string()
    } else {
        "the connection failed".to_string()
    };
    let mut src = std::error::Error::source(e);
    while let Some(inner) = src {
        s = format!("{s}: {inner}");
        src = inner.source();
    }
    gatecmd_core::output::one_line(&s, 200)
}
