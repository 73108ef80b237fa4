//! Every listener gatecmd opens (docs/SECURITY.md, "Listeners"), tried by a loopback client
//! without a token, as a NAT guest reaches it (loopback is not a boundary): it gets nothing
//! of the bench from any of them. One server with every listener configured: the main bind
//! (`/mcp`, the page, `/metrics`, `/health`), `metrics.bind`, and the labgrid bridge's
//! console and power ports (bound at start, even before a coordinator answers).

use crate::harness;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use harness::{Server, TOKEN_A};

fn config() -> String {
    format!(
        r#"
clients:
  - name: vm-a
    token: {TOKEN_A}
metrics:
  bind: 127.0.0.1:0
commands:
  - name: power
    binary: /bin/true
    allowed_args:
      - pattern: "on"
      - pattern: "off"
boards:
  - name: secretboard
    usb: "1-2"
    console: {{path: $DIR/tty-absent, baud: 115200}}
    power: {{on: {{command: power, args: "on"}}, off: {{command: power, args: "off"}}}}
labgrid:
  coordinator: "127.0.0.1:9"
  name: bench-1
  people:
    - name: alice
      accounts: [alice]
"#
    )
}

/// A plain HTTP/1.1 request without credentials; the status and the body.
fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).expect("write");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out
        .split_once("\r\n\r\n")
        .map(|x| x.1)
        .unwrap_or("")
        .to_string();
    (status, body)
}

fn addr_after(s: &Server, prefix: &str) -> String {
    let line = s
        .log_lines(|l| l.starts_with(prefix))
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no {prefix:?} line:\n{}", s.log_text()));
    line.trim_start_matches(prefix)
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap_or_default()
        .trim()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tokenless_loopback_client_gets_nothing_from_any_listener() {
    let s = Server::start(&config());
    s.wait_for_log("the labgrid ports", Duration::from_secs(10), |l| {
        l.starts_with("gatecmd: labgrid power on ")
    })
    .await;
    let main = s.base.trim_start_matches("http://").to_string();
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"guest","version":"0"}}}"#;

    // The main bind: /mcp and /metrics ask for a token; the page's data asks for a session.
    for (method, path, body) in [
        ("POST", "/mcp", init),
        ("GET", "/mcp", ""),
        ("GET", "/metrics", ""),
        ("GET", "/state", ""),
        ("GET", "/events", ""),
        ("GET", "/console?board=secretboard", ""),
    ] {
        let (status, text) = http(&main, method, path, body);
        assert_eq!(status, 401, "{method} {path}: {text}");
        assert!(!text.contains("secretboard"), "{method} {path}: {text}");
    }
    // The page's form and /health say nothing of the bench.
    let (status, form) = http(&main, "GET", "/", "");
    assert_eq!(status, 200);
    assert!(
        !form.contains("secretboard") && !form.contains("1-2"),
        "{form}"
    );
    let (status, health) = http(&main, "GET", "/health", "");
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_str(&health).expect("json");
    let mut keys: Vec<&str> = v
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort();
    assert_eq!(keys, ["name", "status", "version"], "{health}");

    // metrics.bind: the same token check.
    let metrics = addr_after(&s, "gatecmd: metrics on ");
    let (status, text) = http(&metrics, "GET", "/metrics", "");
    assert_eq!(status, 401, "{text}");
    assert!(!text.contains("gatecmd_"), "{text}");

    // The labgrid console port: one line saying why, then the close; nothing typed lands.
    let console = addr_after(&s, "gatecmd: labgrid console of secretboard on ");
    let mut c = TcpStream::connect(&console).expect("console");
    c.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let _ = c.write_all(b"reboot -f\r");
    let mut got = String::new();
    let _ = c.read_to_string(&mut got);
    assert!(
        got.starts_with("gatecmd: board secretboard is not held through labgrid"),
        "{got:?}"
    );
    assert_eq!(got.lines().count(), 1, "{got:?}");

    // The labgrid power port: neither a reading nor a switch.
    let power = addr_after(&s, "gatecmd: labgrid power on ");
    for method in ["GET", "PUT"] {
        let (status, text) = http(&power, method, "/power/0/value", "0");
        assert_eq!(status, 409, "{method}: {text}");
        assert!(text.contains("not held through labgrid"), "{text}");
    }
    let audit = crate::harness::settled_audit(s.path("state/audit.log")).expect("audit");
    assert!(
        audit.contains("\"labgrid_console_refused\"")
            && audit.contains("\"labgrid_power_refused\""),
        "{audit}"
    );
    assert!(!audit.contains("\"event\":\"labgrid_power\""), "{audit}");
}
