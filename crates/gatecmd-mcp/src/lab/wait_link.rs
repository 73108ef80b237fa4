//! The lab wait routes of another host (its `transport::lab_waits`), beside the peer link's
//! tool calls: withdrawing this host's agent's wait queued there once it is served
//! elsewhere (`DELETE /lab/waits/ID`), and asking a waiter's own host whether it still
//! wants the board this host freed (`POST /lab/waits/ID/claim`). Each is one small request
//! with the peer token, bounded by [`WAIT_LINK_WITHIN`]; both are best effort, as what
//! they save is also caught without them (a grant nobody needs is released).

use std::time::Duration;

use super::peer_link::{ON_BEHALF_OF, PeerError, cause, client};
use gatecmd_domain::config::LabPeer;
use gatecmd_domain::lab::LabWait;

/// How long one exchange may take.
pub const WAIT_LINK_WITHIN: Duration = Duration::from_secs(3);

/// Withdraws the lab wait `wait` this host queued on `peer` for `agent`: whether the peer
/// still had it.
pub async fn withdraw(peer: &LabPeer, agent: &str, wait: &LabWait) -> Result<bool, PeerError> {
    let path = format!("lab/waits/{}", wait.id);
    let status = exchange(peer, reqwest::Method::DELETE, &path, Some(agent)).await?;
    Ok(status == reqwest::StatusCode::NO_CONTENT)
}

/// Asks `peer`, the own host of a lab waiter this host is about to give a board, whether
/// the waiter `id` still wants it (as this host's peer client there): `Ok(true)` yes,
/// `Ok(false)` no (served, claimed by another host, or ended), an error when it could
/// not be asked.
pub async fn claim(peer: &LabPeer, id: &str) -> Result<bool, PeerError> {
    let path = format!("lab/waits/{id}/claim");
    match exchange(peer, reqwest::Method::POST, &path, None).await? {
        reqwest::StatusCode::OK => Ok(true),
        reqwest::StatusCode::CONFLICT | reqwest::StatusCode::NOT_FOUND => Ok(false),
        s => Err(PeerError::Unreachable {
            host: peer.name.clone(),
            why: format!("its claim answer was HTTP {}", s.as_u16()),
        }),
    }
}

/// One request to `path` beside the peer's `/mcp` (for `agent`, when given): its status.
async fn exchange(
    peer: &LabPeer,
    method: reqwest::Method,
    path: &str,
    agent: Option<&str>,
) -> Result<reqwest::StatusCode, PeerError> {
    let unreachable = |why: String| PeerError::Unreachable {
        host: peer.name.clone(),
        why,
    };
    let token = peer.token.read().map_err(|why| PeerError::Token {
        host: peer.name.clone(),
        why,
    })?;
    let url = reqwest::Url::parse(&peer.url)
        .and_then(|u| u.join(path))
        .map_err(|e| unreachable(format!("its url: {e}")))?;
    let mut req = client()
        .request(method, url)
        .header("authorization", format!("Bearer {token}"));
    if let Some(a) = agent {
        req = req.header(ON_BEHALF_OF, a);
    }
    let resp = tokio::time::timeout(WAIT_LINK_WITHIN, req.send())
        .await
        .map_err(|_| unreachable(format!("no answer within {} s", WAIT_LINK_WITHIN.as_secs())))?
        .map_err(|e| unreachable(cause(&e)))?;
    Ok(resp.status())
}
