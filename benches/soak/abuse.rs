//! The soak's round-two attackers (issue 22), each beside the 64 honest sessions until the
//! deadline, each bounded in what it holds and how often it tries:
//!
//! - subscription flood: listen streams naming 200 made-up 3 KB URIs and 64 KB
//!   `resources/subscribe` URIs (every one must be refused);
//! - parked answers: calls whose 1 MiB answers are never read, 40 at a time, from sockets
//!   with a 4 KiB receive window (the server must cap them per client);
//! - page-session flood: sign-ins of one client as fast as the page allows, while the
//!   admin's session must stay signed in;
//! - power-command racer: `execute_command` on a board's relay while another client holds
//!   the board (the relay must run only through the holder's `power_board`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rmcp::model::{SubscribeRequestParams, SubscriptionFilter};
use serde_json::json;

use super::harness::{Client, Era, call, connect, is_error, structured};

/// Connects, retrying (bounded: 20 tries, 500 ms apart) while the server is under load.
async fn connect_retry(url: &str, token: &str, era: Era) -> Option<Client> {
    for _ in 0..20 {
        if let Ok(c) = connect(url, Some(token), era).await {
            return Some(c);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    None
}

pub const ABUSER_TOKEN: &str = "soak-abuser-token-0123456789";
pub const OPS_TOKEN: &str = "soak-ops-admin-token-0123456789";
pub const HOLDER_TOKEN: &str = "soak-holder-token-0123456789";
pub const RACER_TOKEN: &str = "soak-racer-token-0123456789";
/// The powered board sits on a port no honest session uses.
pub const POWER_PORT: &str = "1-40";

/// The clients, commands and board the attackers need, appended to the soak's config.
pub fn clients_yaml() -> String {
    format!(
        "  - name: abuser\n    token: {ABUSER_TOKEN}\n  - name: ops\n    token: {OPS_TOKEN}\n    admin: true\n  \
         - name: holder\n    token: {HOLDER_TOKEN}\n  - name: racer\n    token: {RACER_TOKEN}\n"
    )
}

pub fn commands_yaml(tools: &Path) -> String {
    let tools = tools.display();
    format!(
        r#"  - name: ff
    binary: {tools}/ff.sh
    description: A megabyte of 0xFF.
    allowed_args:
      - pattern: ""
  - name: relay
    binary: {tools}/relay.sh
    description: The powered board's relay.
    allowed_args:
      - pattern: "on 1"
      - pattern: "off 1"
boards:
  - name: powered
    usb: "{POWER_PORT}"
    power: {{on: {{command: relay, args: "on 1"}}, off: {{command: relay, args: "off 1"}}}}
"#
    )
}

pub const FF: &str = "head -c 1048576 /dev/zero | tr '\\000' '\\377'";

pub fn relay_script(log: &Path) -> String {
    format!("echo \"$(date +%s.%N) $@\" >> {}", log.display())
}

/// What the subscription flood got.
#[derive(Debug, Default)]
pub struct SubFlood {
    pub tried: u64,
    pub refused: u64,
    pub accepted: u64,
}

pub async fn subscription_flood(url: String, deadline: Instant) -> SubFlood {
    let mut out = SubFlood::default();
    let (Some(modern), Some(legacy)) = (
        connect_retry(&url, ABUSER_TOKEN, Era::Modern).await,
        connect_retry(&url, ABUSER_TOKEN, Era::Legacy).await,
    ) else {
        return out;
    };
    let made_up: Vec<String> = (0..200)
        .map(|i| format!("gatecmd://boards/{i}-{}", "x".repeat(3000)))
        .collect();
    let mut round = 0u64;
    while Instant::now() < deadline && round < 100_000 {
        round += 1;
        out.tried += 1;
        let filter = SubscriptionFilter::builder()
            .resource_subscriptions(made_up.clone())
            .build();
        match modern.listen(filter).await {
            Err(_) => out.refused += 1,
            Ok(mut sub) => match tokio::time::timeout(Duration::from_secs(5), sub.next()).await {
                Ok(Ok(None)) | Ok(Err(_)) => out.refused += 1,
                _ => out.accepted += 1,
            },
        }
        out.tried += 1;
        #[allow(deprecated)]
        let r = legacy
            .subscribe(SubscribeRequestParams::new(format!(
                "gatecmd://devices/{round}{}",
                "9".repeat(64 * 1024)
            )))
            .await;
        if r.is_err() {
            out.refused += 1;
        } else {
            out.accepted += 1;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    out
}

/// What the parked-answers client got.
#[derive(Debug, Default)]
pub struct Parked {
    pub sent: u64,
    pub admitted: u64,
    pub refused: u64,
}

/// Sends 40 calls at a time whose answers it never reads (only the status line), holds
/// them 10 s, drops them, again until the deadline.
pub async fn parked_answers(addr: String, deadline: Instant) -> Parked {
    tokio::task::spawn_blocking(move || {
        let mut out = Parked::default();
        let mut id = 0u64;
        while Instant::now() + Duration::from_secs(12) < deadline {
            let mut held: Vec<TcpStream> = (0..40)
                .filter_map(|_| {
                    id += 1;
                    out.sent += 1;
                    call_unread(&addr, id)
                })
                .collect();
            let until = Instant::now() + Duration::from_secs(10);
            for t in &mut held {
                let left = until
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(10));
                let _ = t.set_read_timeout(Some(left));
                let mut head = [0u8; 12];
                match t.read_exact(&mut head) {
                    Ok(()) if head.starts_with(b"HTTP/1.1 429") => out.refused += 1,
                    Ok(()) => out.admitted += 1,
                    Err(_) => {}
                }
            }
            std::thread::sleep(until.saturating_duration_since(Instant::now()));
        }
        out
    })
    .await
    .unwrap_or_default()
}

fn call_unread(addr: &str, id: u64) -> Option<TcpStream> {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"execute_command","arguments":{{"command":"ff","args":[]}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#
    );
    let req = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {ABUSER_TOKEN}\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: execute_command\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut t = small_window(addr)?;
    t.write_all(req.as_bytes()).ok()?;
    Some(t)
}

/// A loopback connection with a 4 KiB receive buffer.
fn small_window(addr: &str) -> Option<TcpStream> {
    use std::os::fd::FromRawFd;
    let sa: std::net::SocketAddrV4 = addr.parse().ok()?;
    // SAFETY: plain socket calls on a new descriptor owned by the returned stream.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        if fd < 0 {
            return None;
        }
        let size: libc::c_int = 4096;
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        let sin = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: sa.port().to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(*sa.ip()).to_be(),
            },
            sin_zero: [0; 8],
        };
        let stream = TcpStream::from_raw_fd(fd);
        let rc = libc::connect(
            fd,
            (&sin as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        (rc == 0).then_some(stream)
    }
}

/// What the page-session flood got, and whether the admin stayed signed in.
#[derive(Debug, Default)]
pub struct PageFlood {
    pub sign_ins: u64,
    pub admin_checks: u64,
    pub admin_signed_out: u64,
}

fn page_client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

async fn sign_in(base: &str, token: &str) -> Option<String> {
    let r = page_client()
        .post(format!("{base}/signin"))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("origin", base)
        .body(format!("token={token}"))
        .send()
        .await
        .ok()?;
    let set = r.headers().get("set-cookie")?.to_str().ok()?;
    Some(set.split(';').next()?.to_string())
}

pub async fn page_flood(base: String, deadline: Instant) -> PageFlood {
    let mut out = PageFlood::default();
    let mut ops = None;
    for _ in 0..20 {
        ops = sign_in(&base, OPS_TOKEN).await;
        if ops.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let Some(ops) = ops else {
        out.admin_signed_out = 1;
        return out;
    };
    let mut round = 0u64;
    while Instant::now() < deadline && round < 1_000_000 {
        round += 1;
        if sign_in(&base, ABUSER_TOKEN).await.is_some() {
            out.sign_ins += 1;
        }
        if round.is_multiple_of(20) {
            out.admin_checks += 1;
            let ok = page_client()
                .get(format!("{base}/state"))
                .header("cookie", &ops)
                .send()
                .await
                .is_ok_and(|r| r.status() == 200);
            if !ok {
                out.admin_signed_out += 1;
            }
        }
    }
    out
}

/// What the power-command racer got.
#[derive(Debug, Default)]
pub struct Racer {
    pub tries: u64,
    pub refused_power_command: u64,
    pub ran: u64,
    pub holder_cycles: u64,
    /// Relay runs in the relay's log, and how many the holder's `power_board` made.
    pub relay_runs: u64,
}

pub async fn power_racer(url: String, relay_log: PathBuf, deadline: Instant) -> Racer {
    let mut out = Racer::default();
    let (Some(holder), Some(racer)) = (
        connect_retry(&url, HOLDER_TOKEN, Era::Modern).await,
        connect_retry(&url, RACER_TOKEN, Era::Legacy).await,
    ) else {
        return out;
    };
    let lease = call(
        &holder,
        "lock_board",
        json!({"board": "powered", "ttl_secs": 3600}),
    )
    .await;
    let lease_id = structured(&lease)["lease_id"].clone();
    let mut round = 0u64;
    while Instant::now() < deadline && round < 1_000_000 {
        round += 1;
        out.tries += 1;
        let r = call(
            &racer,
            "execute_command",
            json!({"command": "relay", "args": ["off", "1"]}),
        )
        .await;
        if is_error(&r) && structured(&r)["refusal"]["reason"] == json!("power_command") {
            out.refused_power_command += 1;
        } else if !is_error(&r) {
            out.ran += 1;
        }
        if round.is_multiple_of(10) {
            let action = if round.is_multiple_of(20) {
                "on"
            } else {
                "off"
            };
            let r = call(
                &holder,
                "power_board",
                json!({"board": "powered", "action": action, "lease": lease_id}),
            )
            .await;
            if !is_error(&r) {
                out.holder_cycles += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    out.relay_runs = std::fs::read_to_string(&relay_log)
        .map(|s| s.lines().count() as u64)
        .unwrap_or(0);
    out
}
