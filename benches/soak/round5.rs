//! The soak's round-five attackers (issue 37), beside the honest sessions until the deadline,
//! each bounded in what it holds and how often it tries:
//!
//! - stalled uploads: `PUT /upload` requests that send their headers and 64 KiB of body, then
//!   stop. Half declare 8 MiB under the uploader's 1 MiB quota (each must be refused from its
//!   headers: 413), half are chunked without a length (at most
//!   `staging.max_uploads_per_client` admitted at once; the rest refused 429). The server's
//!   memory must not follow them (finding 3: 48 stalled PUTs took it from 12 to 421 MiB).
//! - bmap bombs: `flash_board` with a bmap of deeply nested namespace declarations and one of
//!   64 MiB of empty elements (findings 2 and 4: a core held past cancel and timeout, +1.2 GiB
//!   of RSS); each must end refused at `check_image`, quickly, nothing written.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;

use super::harness::{Client, Era, call, connect, is_error, structured, text};

pub const UPLOADER_TOKEN: &str = "soak-uploader-token-0123456789";
pub const BOMBER_TOKEN: &str = "soak-bomber-token-0123456789";
/// The board the bomber flashes: on a port nothing is plugged into (the check comes first).
pub const BOMB_PORT: &str = "1-42";
/// Stalled requests the uploader holds open at once.
const STALLED: usize = 48;
/// Upload requests the uploader sends at most, whatever the clock says.
const MAX_UPLOADS: u64 = 20_000;
/// Flashes the bomber asks for at most.
const MAX_BOMBS: u64 = 2_000;

/// The two attackers as clients: the uploader may write to its own root, under a 1 MiB quota.
pub fn clients_yaml(tools: &Path) -> String {
    let tools = tools.display();
    format!(
        "  - name: uploader\n    token: {UPLOADER_TOKEN}\n    write_roots: [{tools}/upload-attack]\n    \
         staging: {{quota_bytes_per_root: 1048576}}\n  \
         - name: bomber\n    token: {BOMBER_TOKEN}\n"
    )
}

/// The bomber's board (an entry of `boards:`).
pub fn boards_yaml() -> String {
    format!(
        "  - name: bombed\n    usb: \"{BOMB_PORT}\"\n    power:\n      \
         on: {{command: relay, args: \"on 1\"}}\n      off: {{command: relay, args: \"off 1\"}}\n      \
         maskrom: {{command: relay, args: \"on 1\"}}\n"
    )
}

/// The flash policy that lets the bomber's board be flashed (a top-level section).
pub fn flash_yaml() -> &'static str {
    "flash:\n  enabled: true\n  boards: [bombed]\n  device_wait_secs: 1\n"
}

/// Writes the bomber's image and its two bmaps into `files` (a file root).
pub fn write_bombs(files: &Path) {
    std::fs::write(files.join("bomb.img"), vec![0u8; 1 << 20]).expect("bomb image");
    // Namespace declarations nested 4,000 deep: the parse the red team timed.
    let mut nested = String::from("<?xml version=\"1.0\"?>\n");
    for i in 0..4000 {
        nested.push_str(&format!("<a xmlns:n{i}=\"urn:{i}\">"));
    }
    for _ in 0..4000 {
        nested.push_str("</a>");
    }
    std::fs::write(files.join("nested.bmap"), nested).expect("nested bmap");
    // 64 MiB of empty elements inside a root that is a bmap but never says how big.
    let mut f = std::fs::File::create(files.join("wide.bmap")).expect("wide bmap");
    f.write_all(b"<?xml version=\"1.0\"?>\n<bmap version=\"2.0\">")
        .expect("write");
    let block = "<x/>".repeat(16 * 1024);
    for _ in 0..(64 << 20) / block.len() {
        f.write_all(block.as_bytes()).expect("write");
    }
    f.write_all(b"</bmap>").expect("write");
}

/// What the uploader got.
#[derive(Debug, Default)]
pub struct Uploads {
    /// PUTs that declared 8 MiB, and how many were refused 413, 429 or 409 from their headers.
    pub declared: u64,
    pub declared_refused: u64,
    /// Chunked PUTs, how many were refused 429, and how many were left open (admitted).
    pub chunked: u64,
    pub chunked_refused: u64,
    pub chunked_admitted: u64,
    /// The most chunked PUTs left open (admitted) in one round.
    pub most_admitted: u64,
    /// Anything else (a status that is neither, a connection refused).
    pub other: u64,
    /// The first such answer's status line, to say what it was.
    pub other_seen: String,
}

/// Rounds of 48 stalled PUTs, each held 3 s, until the deadline.
pub async fn stalled_uploads(addr: String, root: std::path::PathBuf, deadline: Instant) -> Uploads {
    tokio::task::spawn_blocking(move || {
        let mut out = Uploads::default();
        let mut sent = 0u64;
        let mut round = 0u64;
        while Instant::now() + Duration::from_secs(4) < deadline && sent < MAX_UPLOADS {
            round += 1;
            let mut held: Vec<(bool, TcpStream)> = Vec::new();
            for i in 0..STALLED {
                sent += 1;
                let chunked = i % 2 == 1;
                // Chunked ones on eight paths, each restarted: a stalled one keeps its path
                // until its socket closes, so the next round finds it free again.
                // Absolute: a relative path is taken in the first file root, not the
                // uploader's write root.
                let path = root.join(format!("big-{}.img", i / 2 % 8));
                let path = path.display().to_string();
                match start_put(&addr, &path, chunked) {
                    Some(t) => held.push((chunked, t)),
                    None => out.other += 1,
                }
            }
            let until = Instant::now() + Duration::from_secs(3);
            let mut admitted = 0;
            for (chunked, t) in &mut held {
                let left = until
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(10));
                let _ = t.set_read_timeout(Some(left));
                let mut head = [0u8; 12];
                let status = match t.read_exact(&mut head) {
                    Ok(()) => Some(head),
                    Err(_) => None,
                };
                match (*chunked, status) {
                    // 413 (the size breaks the quota), 429 (the client's four uploads are in
                    // flight) or 409 (a chunked PUT of the same path, which shares the
                    // declared ones' eight paths, still holds it): all from the headers,
                    // nothing of the body read (`put` in src/transport/upload.rs).
                    (false, Some(h))
                        if h.starts_with(b"HTTP/1.1 413")
                            || h.starts_with(b"HTTP/1.1 429")
                            || h.starts_with(b"HTTP/1.1 409") =>
                    {
                        out.declared += 1;
                        out.declared_refused += 1;
                    }
                    (false, h) => {
                        out.declared += 1;
                        out.other += 1;
                        note(&mut out.other_seen, h);
                    }
                    (true, Some(h))
                        if h.starts_with(b"HTTP/1.1 429") || h.starts_with(b"HTTP/1.1 409") =>
                    {
                        out.chunked += 1;
                        out.chunked_refused += 1;
                    }
                    (true, None) => {
                        out.chunked += 1;
                        out.chunked_admitted += 1;
                        admitted += 1;
                    }
                    (true, Some(h)) => {
                        out.chunked += 1;
                        out.other += 1;
                        note(&mut out.other_seen, Some(h));
                    }
                }
            }
            out.most_admitted = out.most_admitted.max(admitted);
            drop(held);
            // Let the server see the closes before the next round takes the same paths.
            std::thread::sleep(Duration::from_millis(500));
            if round.is_multiple_of(100) {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        out
    })
    .await
    .unwrap_or_default()
}

/// Keeps the first unexpected answer's status line (or "no answer").
fn note(seen: &mut String, head: Option<[u8; 12]>) {
    if seen.is_empty() {
        *seen = match head {
            Some(h) => String::from_utf8_lossy(&h).trim().to_string(),
            None => "no answer within 3 s".to_string(),
        };
    }
}

/// Sends one PUT's headers and 64 KiB of its body, and leaves it there.
fn start_put(addr: &str, path: &str, chunked: bool) -> Option<TcpStream> {
    let mut t = TcpStream::connect(addr).ok()?;
    let piece = vec![0x5au8; 64 * 1024];
    let (length, query) = if chunked {
        ("Transfer-Encoding: chunked".to_string(), "&restart=true")
    } else {
        (format!("Content-Length: {}", 8 << 20), "")
    };
    let head = format!(
        "PUT /upload?path={path}{query} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {UPLOADER_TOKEN}\r\n{length}\r\n\r\n"
    );
    t.write_all(head.as_bytes()).ok()?;
    if chunked {
        let _ = t.write_all(format!("{:x}\r\n", piece.len()).as_bytes());
        let _ = t.write_all(&piece);
        let _ = t.write_all(b"\r\n");
    } else {
        // The server may refuse before reading any of it: a write error is fine.
        let _ = t.write_all(&piece);
    }
    Some(t)
}

/// What the bomber got.
#[derive(Debug, Default)]
pub struct Bombs {
    pub tried: u64,
    /// Refused at `check_image`, as a refusal or a failed flash naming the step.
    pub refused_at_check: u64,
    /// Any other outcome (a flash that went past the check would be one).
    pub other: u64,
    /// The longest one call took.
    pub slowest: Duration,
}

/// Takes the bombed board and asks it to be flashed with each bomb in turn until the deadline.
pub async fn bmap_bombs(url: String, deadline: Instant) -> Bombs {
    let mut out = Bombs::default();
    let mut c: Option<Client> = None;
    for _ in 0..20 {
        if let Ok(client) = connect(&url, Some(BOMBER_TOKEN), Era::Modern).await {
            c = Some(client);
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let Some(c) = c else {
        out.other += 1;
        return out;
    };
    let r = call(
        &c,
        "lock_board",
        json!({"board": "bombed", "ttl_secs": 3600}),
    )
    .await;
    if is_error(&r) {
        out.other += 1;
        return out;
    }
    let lease = structured(&r)["lease_id"]
        .as_str()
        .unwrap_or("")
        .to_string();
    while Instant::now() + Duration::from_secs(5) < deadline && out.tried < MAX_BOMBS {
        for bmap in ["nested.bmap", "wide.bmap"] {
            out.tried += 1;
            let t = Instant::now();
            let r = tokio::time::timeout(
                Duration::from_secs(60),
                call(
                    &c,
                    "flash_board",
                    json!({"board": "bombed", "image": "bomb.img", "bmap": bmap,
                           "lease": lease, "timeout_secs": 30}),
                ),
            )
            .await;
            out.slowest = out.slowest.max(t.elapsed());
            match r {
                Ok(r) if stopped_at_check(&r) => out.refused_at_check += 1,
                _ => out.other += 1,
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    out
}

/// Whether a flash_board answer is an error that stopped at `check_image`.
fn stopped_at_check(r: &rmcp::model::CallToolResult) -> bool {
    let v = structured(r);
    is_error(r) && (v["failure"]["step"] == "check_image" || text(r).contains("check_image"))
}
