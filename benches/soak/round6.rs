//! The soak's round-six attacker (issue 46 finding 1), beside the honest sessions until the
//! deadline: the promiser holds `staging.max_uploads_per_client` header-only `PUT /upload`
//! requests declaring the largest file (8 GiB each: the whole default 32 GiB quota of the
//! root it shares with the sharer), trickling one body byte a second into each and opening
//! another as soon as one is ended; the sharer meanwhile stores a 1 KiB file in that root
//! every 200 ms. Before the fix the sharer was refused from the first promise on; now every
//! one of its uploads must go in, and the promiser's requests end by the progress rule
//! (`upload_min_bytes` per `upload_stall_secs`). Both loops are bounded in count and time.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub const PROMISER_TOKEN: &str = "soak-promiser-token-0123456789";
pub const SHARER_TOKEN: &str = "soak-sharer-token-0123456789ab";
/// Requests the promiser holds at once (the default `max_uploads_per_client`).
const HELD: usize = 4;
/// Requests the promiser opens at most, and uploads the sharer makes at most.
const MAX_PROMISES: u64 = 5_000;
const MAX_SHARES: u64 = 20_000;

/// The two clients, both writing the shared root `{tools}/shared`.
pub fn clients_yaml(tools: &Path) -> String {
    let tools = tools.display();
    format!(
        "  - name: promiser\n    token: {PROMISER_TOKEN}\n    write_roots: [{tools}/shared]\n  \
         - name: sharer\n    token: {SHARER_TOKEN}\n    write_roots: [{tools}/shared]\n"
    )
}

/// What the promiser did.
#[derive(Debug, Default)]
pub struct Promises {
    /// Requests opened (admitted from their headers), and how many ended 408.
    pub opened: u64,
    pub ended_408: u64,
    /// Refused from their headers (429 while four were still being ended), or anything else.
    pub refused: u64,
    pub other: u64,
    /// The longest one request stayed open.
    pub longest: Duration,
}

/// What the sharer got.
#[derive(Debug, Default)]
pub struct Shares {
    pub tried: u64,
    pub stored: u64,
    /// The first refusal's status, to say what it was.
    pub first_refusal: String,
}

/// One header-only PUT of 8 GiB into `root`.
fn open(addr: &str, root: &Path, n: u64) -> Option<TcpStream> {
    let mut t = TcpStream::connect(addr).ok()?;
    let path = root
        .join(format!("promise-{}.img", n % 16))
        .display()
        .to_string();
    let head = format!(
        "PUT /upload?path={path}&restart=true HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer \
         {PROMISER_TOKEN}\r\nContent-Length: {}\r\n\r\n",
        8u64 << 30
    );
    t.write_all(head.as_bytes()).ok()?;
    t.set_read_timeout(Some(Duration::from_millis(20))).ok()?;
    Some(t)
}

/// The status of an answer that has arrived on `t`, if one has.
fn answered(t: &mut TcpStream) -> Option<u16> {
    let mut head = [0u8; 12];
    match t.read(&mut head) {
        Ok(n) if n >= 12 => std::str::from_utf8(&head[9..12]).ok()?.parse().ok(),
        Ok(0) => Some(0),
        _ => None,
    }
}

/// Holds `HELD` promises open until the deadline, a byte a second into each.
pub async fn promise_flood(addr: String, root: PathBuf, deadline: Instant) -> Promises {
    tokio::task::spawn_blocking(move || {
        let mut out = Promises::default();
        let mut held: Vec<(TcpStream, Instant)> = Vec::new();
        let mut n = 0u64;
        while Instant::now() + Duration::from_secs(1) < deadline && n < MAX_PROMISES {
            while held.len() < HELD && n < MAX_PROMISES {
                n += 1;
                match open(&addr, &root, n) {
                    Some(t) => held.push((t, Instant::now())),
                    None => out.other += 1,
                }
            }
            std::thread::sleep(Duration::from_millis(200));
            let mut keep = Vec::new();
            for (mut t, since) in held.drain(..) {
                match answered(&mut t) {
                    None => {
                        if since.elapsed().as_millis() % 1000 < 200 {
                            let _ = t.write_all(b"x");
                        }
                        keep.push((t, since));
                    }
                    Some(status) => {
                        out.longest = out.longest.max(since.elapsed());
                        match status {
                            408 => {
                                out.opened += 1;
                                out.ended_408 += 1
                            }
                            429 => out.refused += 1,
                            _ => out.other += 1,
                        }
                    }
                }
            }
            held = keep;
        }
        for (_, since) in &held {
            out.opened += 1;
            out.longest = out.longest.max(since.elapsed());
        }
        out
    })
    .await
    .unwrap_or_default()
}

/// A 1 KiB file into the shared root every 200 ms until the deadline.
pub async fn sharer(base: String, root: PathBuf, deadline: Instant) -> Shares {
    let http = reqwest::Client::new();
    let mut out = Shares::default();
    while Instant::now() + Duration::from_millis(500) < deadline && out.tried < MAX_SHARES {
        out.tried += 1;
        let path = root.join(format!("shared-{}.bin", out.tried % 32));
        let r = http
            .put(format!(
                "{base}/upload?path={}&restart=true&final=true",
                path.display()
            ))
            .bearer_auth(SHARER_TOKEN)
            .body(vec![0x42u8; 1024])
            .timeout(Duration::from_secs(10))
            .send()
            .await;
        match r {
            Ok(r) if r.status().is_success() => out.stored += 1,
            Ok(r) if out.first_refusal.is_empty() => {
                out.first_refusal = format!("{} {}", r.status(), r.text().await.unwrap_or_default())
            }
            Err(e) if out.first_refusal.is_empty() => out.first_refusal = e.to_string(),
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    out
}
