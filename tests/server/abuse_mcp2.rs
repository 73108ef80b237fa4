//! Issue 22, round two of the red team, MCP side: subscription floods (findings 1, 2),
//! a board's power command around its lease (3), answers parked unread and their ~6×
//! amplification (5), hostile USB descriptor strings (8), a reload renaming a leased
//! board (11), waiting console reads per client (12). The real binary on loopback, real
//! MCP clients; every loop is bounded in count and time. Each test prints its figure.
//!
//! Every test here failed against the build of 2026-12-01 (`GATECMD_BIN` pointed at it).

// resources/subscribe is the 2025-11-25 path under test.
#![allow(deprecated)]

use crate::harness;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use harness::*;
use rmcp::model::{SubscribeRequestParams, SubscriptionFilter};
use serde_json::{Value, json};

const MIB: u64 = 1024;

/// Resident memory of `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn base_config(extra: &str) -> String {
    format!(
        r#"
clients:
  - name: vm-a
    token: {TOKEN_A}
  - name: vm-b
    token: {TOKEN_B}
{extra}
"#
    )
}

/// Finding 1: a listen stream asking for 1,100 made-up 3 KB URIs is refused with a
/// `limit` reason and holds nothing; a client's listen streams are capped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_flood_is_refused_and_holds_nothing() {
    let s = Server::start(&base_config("commands: []"));
    let c = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("connect");
    let before = rss_kib(s.pid());
    let made_up: Vec<String> = (0..1100)
        .map(|i| format!("gatecmd://boards/{i}-{}", "x".repeat(3000)))
        .collect();
    let mut open = Vec::new();
    for _ in 0..20 {
        let filter = SubscriptionFilter::builder()
            .resource_subscriptions(made_up.clone())
            .build();
        match c.listen(filter).await {
            // Refused before or right after the acknowledgement: the stream ends at once.
            Err(_) => {}
            Ok(mut sub) => {
                let next = tokio::time::timeout(Duration::from_secs(5), sub.next()).await;
                match next {
                    Ok(Ok(None)) | Ok(Err(_)) => {}
                    other => {
                        open.push(sub);
                        panic!("a 3.3 MB listen of made-up URIs was kept open: {other:?}");
                    }
                }
            }
        }
    }
    let grown = rss_kib(s.pid()).saturating_sub(before);
    println!("listen flood: 20 × 1,100 made-up URIs (66 MB sent): RSS +{grown} KiB");
    assert!(grown < 48 * MIB, "RSS grew by {grown} KiB");

    // Per client: 8 listen streams (limits.max_listen_streams_per_client), the 9th refused.
    let ok = SubscriptionFilter::builder()
        .resource_subscriptions(["gatecmd://devices"])
        .build();
    let mut held = Vec::new();
    for i in 0..8 {
        held.push(
            c.listen(ok.clone())
                .await
                .unwrap_or_else(|e| panic!("stream {i}: {e}")),
        );
    }
    let ninth = match c.listen(ok.clone()).await {
        Err(e) => Some(e.to_string()),
        Ok(mut sub) => match tokio::time::timeout(Duration::from_secs(5), sub.next()).await {
            Ok(Err(e)) => Some(e.to_string()),
            Ok(Ok(None)) => Some("ended".into()),
            _ => None,
        },
    };
    let ninth = ninth.expect("the 9th listen stream of one client is refused");
    assert!(
        ninth.contains("max_listen_streams_per_client") || ninth.contains("ended"),
        "{ninth}"
    );
    // Another client is not affected.
    let b = connect(&s.url, Some(TOKEN_B), Era::Modern)
        .await
        .expect("b");
    let mut sub = b.listen(ok).await.expect("vm-b's stream");
    assert!(
        tokio::time::timeout(Duration::from_millis(500), sub.next())
            .await
            .is_err(),
        "vm-b's stream stays open"
    );
}

/// Finding 2: `resources/subscribe` on a 2025-11-25 session: long and made-up URIs are
/// refused, and a session's subscriptions are capped (64), with a `limit` reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscribe_flood_is_refused_and_holds_nothing() {
    let s = Server::start(&base_config("commands: []"));
    let c = connect(&s.url, Some(TOKEN_A), Era::Legacy)
        .await
        .expect("connect");
    let before = rss_kib(s.pid());
    for i in 0..100 {
        let uri = format!("gatecmd://boards/{i}{}", "y".repeat(1 << 20));
        let r = c.subscribe(SubscribeRequestParams::new(uri)).await;
        assert!(r.is_err(), "a 1 MB URI was subscribed");
    }
    let grown = rss_kib(s.pid()).saturating_sub(before);
    println!("subscribe flood: 100 × 1 MB URIs on one session: RSS +{grown} KiB");
    assert!(grown < 32 * MIB, "RSS grew by {grown} KiB");
    // A board that is not configured, a device id too long to be one.
    for uri in [
        "gatecmd://boards/nope".to_string(),
        format!("gatecmd://devices/1-{}", "1.".repeat(40) + "1"),
    ] {
        let e = c
            .subscribe(SubscribeRequestParams::new(uri.clone()))
            .await
            .expect_err("refused");
        assert!(e.to_string().contains("names no resource"), "{uri}: {e}");
    }
    // Devices that may come (a port id) are fine, up to the session's cap.
    for i in 1..=64 {
        c.subscribe(SubscribeRequestParams::new(format!(
            "gatecmd://devices/1-{i}"
        )))
        .await
        .unwrap_or_else(|e| panic!("subscription {i}: {e}"));
    }
    let e = c
        .subscribe(SubscribeRequestParams::new("gatecmd://devices/1-65"))
        .await
        .expect_err("the 65th is refused");
    let e = e.to_string();
    assert!(e.contains("max_subscriptions_per_session"), "{e}");
}

fn power_config(dir_marker: &str) -> String {
    format!(
        r#"
clients:
  - name: vm-a
    token: {TOKEN_A}
  - name: vm-b
    token: {TOKEN_B}
commands:
  - name: relay
    binary: $DIR/relay.sh
    description: A power relay (docs/BOARDS.md).
    allowed_args:
      - pattern: "on 1"
      - pattern: "off 1"
boards:
  - name: b1
    usb: "1-9"
    power: {{on: {{command: relay, args: "on 1"}}, off: {{command: relay, args: "off 1"}}}}
{dir_marker}
"#
    )
}

/// Finding 3: while vm-a holds `board:b1`, nobody runs b1's power command through
/// `execute_command` (not vm-b, not vm-a, not as a dry run); `power_board` still works for
/// the holder; a client list naming the command fails at load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_boards_power_command_runs_only_through_power_board() {
    let s = Server::start(&power_config(""));
    let log = s.path("relay.log");
    script(
        s.dir.path(),
        "relay.sh",
        &format!("echo \"$@\" >> {}", log.display()),
    );
    let a = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("a");
    let b = connect(&s.url, Some(TOKEN_B), Era::Legacy)
        .await
        .expect("b");
    let lease = call(&a, "lock_board", json!({"board": "b1"})).await;
    assert!(!is_error(&lease), "{}", text(&lease));
    let lease_id = structured(&lease)["lease_id"].clone();
    for (who, c, args) in [
        (
            "vm-b",
            &b,
            json!({"command": "relay", "args": ["off", "1"]}),
        ),
        (
            "vm-b dry",
            &b,
            json!({"command": "relay", "args": ["off", "1"], "dry_run": true}),
        ),
        (
            "vm-a",
            &a,
            json!({"command": "relay", "args": ["off", "1"], "lease": lease_id}),
        ),
    ] {
        let r = call(c, "execute_command", args).await;
        assert!(is_error(&r), "{who}: {}", text(&r));
        assert_eq!(
            structured(&r)["refusal"]["reason"],
            json!("power_command"),
            "{who}: {}",
            text(&r)
        );
        assert!(text(&r).contains("power_board"), "{}", text(&r));
    }
    assert!(!log.exists(), "the relay ran around the lease");
    let r = call(
        &a,
        "power_board",
        json!({"board": "b1", "action": "off", "lease": lease_id}),
    )
    .await;
    assert!(!is_error(&r), "{}", text(&r));
    let ran = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(ran, "off 1\n", "power_board ran the relay once");
    println!(
        "power racer: vm-b's relay off while vm-a holds b1: refused (power_command); relay runs: 1 (vm-a's power_board)"
    );
    let r = call(&b, "power_board", json!({"board": "b1", "action": "off"})).await;
    assert!(is_error(&r), "{}", text(&r));

    // At load: a client list that names the power command.
    let bad = power_config("").replace(
        &format!("    token: {TOKEN_B}\n"),
        &format!("    token: {TOKEN_B}\n    commands: [relay]\n"),
    );
    let cfg = s.dir.path().join("bad.yaml");
    std::fs::write(
        &cfg,
        bad.replace("$DIR", s.dir.path().to_str().expect("utf8")),
    )
    .expect("write");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gatecmd"))
        .args(["check", "--config"])
        .arg(&cfg)
        .output()
        .expect("gatecmd check");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("clients[1].commands") && err.contains("power command of board(s) b1"),
        "{err}"
    );
}

/// Sends an `execute_command` call and never reads the answer.
fn call_unread(s: &Server, token: &str, command: &str, id: u32) -> TcpStream {
    let addr = s.base.trim_start_matches("http://");
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"execute_command","arguments":{{"command":"{command}","args":[]}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#
    );
    let req = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: execute_command\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut t = small_window(addr);
    t.write_all(req.as_bytes()).expect("send");
    t
}

/// A loopback connection with a 4 KiB receive buffer, so an unread answer stays in the
/// server instead of in the kernel's socket buffers (which take megabytes on loopback).
fn small_window(addr: &str) -> TcpStream {
    use std::os::fd::FromRawFd;
    let sa: std::net::SocketAddrV4 = addr.parse().expect("v4 address");
    // SAFETY: plain socket calls on a new descriptor owned by the returned stream.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        assert!(fd >= 0, "socket");
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
        let rc = libc::connect(
            fd,
            (&sin as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        assert_eq!(rc, 0, "connect");
        TcpStream::from_raw_fd(fd)
    }
}

/// Finding 5: a megabyte of invalid UTF-8 is a megabyte in the answer, not six; answers
/// nobody reads are capped per client, and what they hold is bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_are_bounded_and_unread_ones_capped_per_client() {
    let s = Server::start(&base_config(
        r#"commands:
  - name: ff
    binary: $DIR/ff.sh
    description: A megabyte of 0xFF.
    allowed_args:
      - pattern: """#,
    ));
    script(
        s.dir.path(),
        "ff.sh",
        "head -c 1048576 /dev/zero | tr '\\000' '\\377'",
    );
    let c = connect(&s.url, Some(TOKEN_B), Era::Modern)
        .await
        .expect("connect");
    let r = call(&c, "execute_command", json!({"command": "ff", "args": []})).await;
    let stdout = structured(&r)["stdout"].as_str().unwrap_or_default().len();
    let text_len = text(&r).len();
    let answer = serde_json::to_vec(&r).map(|v| v.len()).unwrap_or(0);
    println!("1 MiB of 0xFF: stdout {stdout} B, text {text_len} B, whole answer {answer} B");
    assert!(
        stdout <= 1 << 20,
        "stdout is {stdout} bytes after conversion"
    );
    assert_eq!(structured(&r)["stdout_truncated"], json!(true));
    assert!(text_len <= 16 * 1024, "text content is {text_len} bytes");
    assert!(answer < (1 << 20) + 64 * 1024, "answer is {answer} bytes");

    // 40 calls of vm-a left unread: at most 16 are admitted (max_open_answers_per_client).
    let before = rss_kib(s.pid());
    let mut parked: Vec<TcpStream> = (0..40)
        .map(|i| call_unread(&s, TOKEN_A, "ff", 100 + i))
        .collect();
    // Only each answer's status line is read (a 4 KiB window), within one deadline.
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut refused, mut answered) = (0, 0);
    for t in &mut parked {
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(10));
        t.set_read_timeout(Some(left)).expect("timeout");
        let mut head = [0u8; 12];
        match t.read_exact(&mut head) {
            Ok(()) if head.starts_with(b"HTTP/1.1 429") => refused += 1,
            Ok(()) => answered += 1,
            Err(_) => {}
        }
    }
    println!("40 unread answers of one client: {answered} admitted, {refused} refused (429)");
    std::thread::sleep(Duration::from_secs(2));
    let grown = rss_kib(s.pid()).saturating_sub(before);
    println!("40 unread 1 MiB answers of one client: {refused} refused (429), RSS +{grown} KiB");
    let _ = answered;
    // At most 16 stay parked (limits.max_open_answers_per_client); calls past the 8 a
    // client may run at once are answered at once (and read), so fewer than 24 are refused.
    assert!(refused >= 8, "only {refused} of 40 refused");
    assert!(grown < 64 * MIB, "RSS grew by {grown} KiB");
    // Another client still gets answers.
    let r = call(&c, "list_commands", json!({})).await;
    assert!(!is_error(&r));
    drop(parked);
}

/// Finding 8: a device whose product string carries a newline and an escape sequence
/// shows as one device with a clean product, in text and structured answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_descriptor_strings_are_cleaned() {
    let dir = tempfile::tempdir().expect("tmp");
    let sys = dir.path().join("sys");
    let dev = sys.join("devices/pci0000:00/usb1/1-2");
    std::fs::create_dir_all(&dev).expect("mkdir");
    for (k, v) in [
        ("idVendor", "2207"),
        ("idProduct", "350b"),
        ("bcdDevice", "0100"),
        ("version", " 2.00"),
        ("busnum", "1"),
        ("devnum", "7"),
        ("speed", "480"),
        ("manufacturer", "Evil\x1b[2J\x1b]0;pwned\x07"),
        ("product", "Board\n1-9  2207:350b  RK3588 MaskROM  forged"),
    ] {
        std::fs::write(dev.join(k), format!("{v}\n")).expect("attr");
    }
    let links = sys.join("bus/usb/devices");
    std::fs::create_dir_all(&links).expect("links");
    std::os::unix::fs::symlink("../../../devices/pci0000:00/usb1/1-2", links.join("1-2"))
        .expect("link");
    let s = Server::start(&base_config(&format!(
        "monitor: {{backend: poll, sysfs_root: {}}}\ncommands: []",
        sys.display()
    )));
    let c = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("c");
    let r = call(&c, "list_devices", json!({})).await;
    let t = text(&r);
    let devices = structured(&r)["devices"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(devices.len(), 1, "{t}");
    let product = devices[0]["product"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let maker = devices[0]["manufacturer"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    println!("hostile strings: product {product:?}, manufacturer {maker:?}");
    for v in [&product, &maker, &t] {
        assert!(!v.contains('\x1b') && !v.contains('\x07'), "{v:?}");
    }
    assert!(!product.contains('\n'));
    assert!(
        !t.lines().any(|l| l.trim_start().starts_with("1-9")),
        "a forged device line: {t}"
    );
    // The CLI prints the same clean strings.
    let cfg = dir.path().join("c.yaml");
    std::fs::write(
        &cfg,
        format!(
            "monitor: {{backend: poll, sysfs_root: {}}}\n",
            sys.display()
        ),
    )
    .expect("cfg");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gatecmd"))
        .args(["devices", "--config"])
        .arg(&cfg)
        .output()
        .expect("gatecmd devices");
    let printed =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        !printed.contains('\x1b') && !printed.contains('\x07'),
        "{printed:?}"
    );
    assert!(
        !printed.lines().any(|l| l.trim_start().starts_with("1-9")),
        "{printed}"
    );
}

/// Finding 11: renaming a leased board and reloading is refused, naming the lease; vm-b
/// cannot take the same hardware under the new name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_does_not_strand_a_board_lease() {
    let yaml = |name: &str| {
        base_config(&format!(
            "commands: []\nboards:\n  - name: {name}\n    usb: \"1-9\"\n"
        ))
    };
    let s = Server::start(&yaml("b1"));
    let a = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("a");
    let b = connect(&s.url, Some(TOKEN_B), Era::Modern)
        .await
        .expect("b");
    let r = call(&a, "lock_board", json!({"board": "b1"})).await;
    assert!(!is_error(&r), "{}", text(&r));
    let lease_id = structured(&r)["lease_id"].clone();
    std::fs::write(s.path("config.yaml"), yaml("b1-renamed")).expect("rewrite");
    s.signal(nix::sys::signal::Signal::SIGHUP);
    let line = s
        .wait_for_log("reload refused", Duration::from_secs(10), |l| {
            l.contains("reload refused")
        })
        .await;
    assert!(line.contains("\\\"b1\\\"") || line.contains("b1"), "{line}");
    assert!(line.contains("leased by vm-a"), "{line}");
    let r = call(&b, "lock_board", json!({"board": "b1-renamed"})).await;
    assert!(is_error(&r), "vm-b got the leased hardware: {}", text(&r));
    let r = call(&b, "lock_board", json!({"board": "b1"})).await;
    assert_eq!(
        structured(&r)["refusal"]["reason"],
        json!("device_busy"),
        "{}",
        text(&r)
    );
    println!("rename of a leased board + SIGHUP: reload refused; holders of 1-9: vm-a only");
    // Released, the same reload goes through.
    let r = call(&a, "unlock_device", json!({"lease": lease_id})).await;
    assert!(!is_error(&r), "{}", text(&r));
    s.signal(nix::sys::signal::Signal::SIGHUP);
    s.wait_for_log("configuration reloaded", Duration::from_secs(10), |l| {
        l.contains("configuration reloaded")
    })
    .await;
    let r = call(&b, "lock_board", json!({"board": "b1-renamed"})).await;
    assert!(!is_error(&r), "{}", text(&r));
}

/// Finding 12 (the cap): a client's waiting console reads are capped (8); the 9th is
/// refused with `limit`, and the others keep waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_console_reads_are_capped_per_client() {
    let pty = nix::pty::openpty(None, None).expect("openpty");
    let slave = std::fs::read_link(format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&pty.slave)
    ))
    .expect("pty path");
    let s = Server::start(&base_config(&format!(
        "commands: []\nboards:\n  - name: b1\n    usb: \"1-9\"\n    console: {{path: {}, baud: 115200}}\n",
        slave.display()
    )));
    let a = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("a");
    let r = call(&a, "lock_board", json!({"board": "b1"})).await;
    assert!(!is_error(&r), "{}", text(&r));
    let mut waiting = Vec::new();
    for _ in 0..8 {
        let url = s.url.clone();
        waiting.push(tokio::spawn(async move {
            let c = connect(&url, Some(TOKEN_A), Era::Modern).await.expect("c");
            let t = Instant::now();
            let args = json!({"board": "b1", "wait_for": "never-printed", "timeout_secs": 20});
            let r = c
                .call_tool(
                    rmcp::model::CallToolRequestParams::new("console_read")
                        .with_arguments(args.as_object().cloned().unwrap_or_default()),
                )
                .await;
            // Each of the 8 waits its whole timeout: none was refused.
            assert!(t.elapsed() >= Duration::from_secs(15), "{r:?}");
        }));
    }
    // Until the 8 are waiting (bounded), then a 9th.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let started = Instant::now();
    let mut refusal = Value::Null;
    while started.elapsed() < Duration::from_secs(10) {
        let r = call(
            &a,
            "console_read",
            json!({"board": "b1", "wait_for": "never", "timeout_secs": 1}),
        )
        .await;
        if is_error(&r) {
            refusal = structured(&r)["refusal"].clone();
            break;
        }
    }
    println!("waiting console reads of one client: 8 held, the 9th: {refusal}");
    assert_eq!(refusal["reason"], json!("limit"), "{refusal}");
    assert!(
        refusal["message"]
            .as_str()
            .unwrap_or_default()
            .contains("max_waiting_reads_per_client")
    );
    for w in waiting {
        w.abort();
    }
}
