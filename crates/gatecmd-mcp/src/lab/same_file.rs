//! A file a remote flash would send that the board's host holds already: the same name
//! in its staging (`lab/<this host>/<agent>/<name>`, where the last flash put it), the same
//! size, and the same SHA-256 (the peer's `stat_file`, this host's own read of the file).
//! Then nothing is sent: flashing one image again costs two reads of it, one per host, at
//! disk speed, instead of its transfer. A file of another size, or none there, is sent at
//! once (its hash is never computed here).

use std::time::Duration;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use super::peer_link;
use gatecmd_domain::config::LabPeer;

/// How long the peer may take to hash its copy: 10 s plus 20 s per GiB (50 MiB/s).
fn stat_within(size: u64) -> Duration {
    Duration::from_secs(10 + 20 * size.div_ceil(1 << 30))
}

/// The path of the peer's copy of `file` (at `there`, `size` bytes), when it has the same
/// bytes; `None` otherwise (or when it could not tell: the file is then sent). `file` is
/// read from its start and left at its start.
pub async fn on_peer(
    peer: &LabPeer,
    agent: &str,
    there: &str,
    size: u64,
    file: &mut tokio::fs::File,
) -> Option<String> {
    let r = peer_link::call(
        peer,
        Some(agent),
        "stat_file",
        json!({"path": there}),
        stat_within(size),
    )
    .await
    .ok()
    .filter(|r| r.is_error != Some(true))?;
    let s = r.structured_content?;
    if s.get("size").and_then(Value::as_u64) != Some(size) {
        return None;
    }
    let theirs = s.get("sha256").and_then(Value::as_str)?.to_string();
    let path = s.get("path").and_then(Value::as_str)?.to_string();
    let mine = sha256(file).await.ok()?;
    (mine == theirs).then_some(path)
}

/// The file's SHA-256 (hex), read from its start; the file is left at its start.
async fn sha256(file: &mut tokio::fs::File) -> std::io::Result<String> {
    file.seek(std::io::SeekFrom::Start(0)).await?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    file.seek(std::io::SeekFrom::Start(0)).await?;
    Ok(hex::encode(h.finalize()))
}
