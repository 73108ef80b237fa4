//! A file of this host sent to a peer's staging, for a remote `flash_board`: the agent
//! names its image as for a local flash (a path in this host's `file_roots`), this host
//! opens it beneath its roots and streams it to the peer's `PUT /upload` (the same door as
//! an agent of that host, as the `peer: true` client acting for the agent, so the peer's
//! `write_roots` and staging quotas of that client apply) in pieces of [`PIECE_BYTES`],
//! each bounded in time; the peer's answer names the file there.
//!
//! The file lands at `lab/<this host>/<agent>/<file name>` beneath the peer's first file
//! root (the same name again replaces it); a file the peer holds there already, byte for
//! byte, is not sent again (`same_file`).

use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncReadExt;

use super::peer_link::{self, PeerError};
use gatecmd_core::refusal::{Refusal, RefusalReason};
use gatecmd_core::sanitizer::{FileKind, FileRules, open_file_arg};
use gatecmd_domain::config::LabPeer;
use gatecmd_domain::state::AppState;

/// Bytes of one `PUT` (one piece of the upload protocol, `offset` continuing).
pub const PIECE_BYTES: usize = 4 * 1024 * 1024;
/// How long one piece may take, its answer included (4 MiB: 0.4 MiB/s at worst).
const PIECE_WITHIN: Duration = Duration::from_secs(10);

/// Who sends: this host's name, the agent, and the file argument's role (`image`, `bmap`).
pub struct Sender<'a> {
    pub here: &'a str,
    pub agent: &'a str,
    pub what: &'static str,
}

/// Sends `value` (a path in this host's file roots) to `peer`'s staging; the path there.
pub async fn push(
    state: &AppState,
    peer: &LabPeer,
    from: &Sender<'_>,
    value: &str,
) -> Result<String, Refusal> {
    let config = state.config();
    let rules = FileRules {
        roots: &config.file_roots,
        allow_hardlinked_inputs: config.allow_hardlinked_inputs,
    };
    let opened = open_file_arg(value, FileKind::Input, rules).map_err(|e| {
        Refusal::new(
            RefusalReason::NotFound,
            format!(
                "{} {value:?}: {e}. A remote flash sends a file of this host's file roots to the board's host: upload it here (write_file or PUT /upload), list_files shows what is here",
                from.what
            ),
        )
    })?;
    let fd = opened.fd.try_clone().map_err(io_refusal)?;
    let mut file = tokio::fs::File::from_std(std::fs::File::from(fd));
    let size = file.metadata().await.map_err(io_refusal)?.len();
    let name = opened
        .real
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".into());
    let there = format!("lab/{}/{}/{name}", from.here, from.agent);
    if let Some(path) = super::same_file::on_peer(peer, from.agent, &there, size, &mut file).await {
        return Ok(path);
    }
    let mut offset = 0u64;
    let mut piece = vec![0u8; PIECE_BYTES];
    loop {
        let n = fill(&mut file, &mut piece).await.map_err(io_refusal)?;
        let last = offset + n as u64 >= size || n < PIECE_BYTES;
        let answer = put(peer, from.agent, &there, offset, last, &piece[..n]).await?;
        offset += n as u64;
        if last {
            return answer
                .get("path")
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| unreachable(peer, "its upload answer named no path".into()).into());
        }
    }
}

/// Reads until `buf` is full or the file ends.
async fn fill(file: &mut tokio::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        let got = file.read(&mut buf[n..]).await?;
        if got == 0 {
            break;
        }
        n += got;
    }
    Ok(n)
}

fn io_refusal(e: std::io::Error) -> Refusal {
    Refusal::new(
        RefusalReason::IoError,
        format!("reading the file to send to the board's host failed: {e}"),
    )
}

fn unreachable(peer: &LabPeer, why: String) -> PeerError {
    PeerError::Unreachable {
        host: peer.name.clone(),
        why,
    }
}

/// One piece: `PUT /upload?path=…&offset=…` (`restart` on the first, `final` on the last).
async fn put(
    peer: &LabPeer,
    agent: &str,
    path: &str,
    offset: u64,
    last: bool,
    bytes: &[u8],
) -> Result<Value, Refusal> {
    let token = peer.token.read().map_err(|why| {
        Refusal::from(PeerError::Token {
            host: peer.name.clone(),
            why,
        })
    })?;
    let mut url = reqwest::Url::parse(&peer.url)
        .and_then(|u| u.join("upload"))
        .map_err(|e| Refusal::from(unreachable(peer, format!("its url: {e}"))))?;
    {
        let mut q = url.query_pairs_mut();
        q.append_pair("path", path)
            .append_pair("offset", &offset.to_string());
        if offset == 0 {
            q.append_pair("restart", "true");
        }
        if last {
            q.append_pair("final", "true");
        }
    }
    let req = peer_link::client()
        .put(url)
        .header("authorization", format!("Bearer {token}"))
        .header(peer_link::ON_BEHALF_OF, agent)
        .header("content-type", "application/octet-stream")
        .body(bytes.to_vec());
    let exchange = async {
        let resp = req.send().await.map_err(|e| e.to_string())?;
        let status = resp.status();
        let body = resp.bytes().await.map_err(|e| e.to_string())?;
        Ok::<_, String>((status, body))
    };
    let (status, body) = match tokio::time::timeout(PIECE_WITHIN, exchange).await {
        Ok(Ok(got)) => got,
        Ok(Err(why)) => return Err(unreachable(peer, format!("sending the file: {why}")).into()),
        Err(_) => {
            let why = format!("a piece of the file took over {} s", PIECE_WITHIN.as_secs());
            return Err(unreachable(peer, why).into());
        }
    };
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if status == reqwest::StatusCode::UNAUTHORIZED {
        let why = format!("HTTP {}", status.as_u16());
        let e = PeerError::Refused {
            host: peer.name.clone(),
            why,
        };
        return Err(e.into());
    }
    if status.is_success() {
        return Ok(v);
    }
    let reason = v
        .get("error")
        .and_then(Value::as_str)
        .and_then(|e| RefusalReason::ALL.iter().find(|r| r.as_str() == e).copied())
        .unwrap_or(RefusalReason::IoError);
    let message = v
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("refused");
    Err(Refusal::new(
        reason,
        format!(
            "lab host {:?} refused the file ({}): {}",
            peer.name,
            status.as_u16(),
            gatecmd_core::output::one_line(message, 300)
        ),
    ))
}
