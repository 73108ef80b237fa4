//! gatecmd's soak benchmark (issue 15): not a test, a few minutes of mixed load against the
//! release server under a umockdev testbed of 16 identical boards, and one report.
//!
//! 64 MCP sessions (both protocol eras) loop lock_device → execute_command → unlock_device →
//! list_devices (and now and then a small write_file), each on its board (session % 16),
//! while a slowloris client holds ~200 half-sent requests open and a progress-flood client
//! starts floods it never reads, and (issue 22) a subscription flood, a client parking
//! unread answers, a page-session flood and a power-command racer (benches/soak/abuse.rs)
//! try their worst beside them, and (issue 37) stalled uploads and bmap bombs through
//! flash_board (benches/soak/round5.rs), and (issue 46) header-only uploads promising a shared
//! root beside a client storing into it (benches/soak/round6.rs). It prints overlapping executions per board (counted from
//! the flashing tool's own logs, so checked rather than assumed), p50/p99 per tool, the
//! server's resident memory over time and whether it stayed flat, and calls and errors.
//!
//! Run: `make soak` (GATECMD_SOAK_SECS, default 300) or `make soak-smoke` (10 s). Like
//! benches/gatecmd.rs, the work runs in a re-executed copy of this binary under the umockdev
//! preload. Everything talks to 127.0.0.1; every loop stops at the deadline or its count.

#[path = "soak/abuse.rs"]
mod abuse;
#[path = "../tests/harness/mod.rs"]
mod harness;
#[path = "soak/lab.rs"]
mod lab;
#[path = "soak/round5.rs"]
mod round5;
#[path = "soak/round6.rs"]
mod round6;
#[path = "../tests/common/umockdev.rs"]
mod umockdev;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine;
use harness::{Client, Era, Server, script};
use rmcp::model::{CallToolRequestParams, CallToolResult};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

const INNER: &str = "GATECMD_SOAK_INNER";
const BOARDS: u32 = 16;
const SESSIONS: usize = 64;
const FLOOD_TOKEN: &str = "soak-flood-token-0123456789";
/// The first board's port number: boards sit at 1-2 … 1-17.
const FIRST_PORT: u32 = 2;
/// Longest any one call may take before it counts as an error (the lock wait is 30 s).
const CALL_LIMIT: Duration = Duration::from_secs(60);
/// Rounds one session may run at most, whatever the clock says.
const ROUND_CAP: u64 = 1_000_000;

/// The fake flashing tool: refuses unless it sees exactly one usbfs node (what isolation
/// promises), then logs `start PORT NS` / `end PORT NS` around a 20 ms "write" into its
/// board's log. Two lines of one port with a start between them are an overlap.
const FAKE_FLASH: &str = r#"port=$1
set -- /dev/bus/usb/*/*
if [ "$#" -ne 1 ]; then echo "saw $# usb nodes, want 1: $*" >&2; exit 3; fi
echo "start $port $(date +%s%N)" >> "$SOAK_LOG_DIR/$port.log"
sleep 0.02
echo "end $port $(date +%s%N)" >> "$SOAK_LOG_DIR/$port.log"
echo "wrote $port""#;

/// The same tool without the one-node check, for the fallback without isolation.
const FAKE_FLASH_PLAIN: &str = r#"port=$1
echo "start $port $(date +%s%N)" >> "$SOAK_LOG_DIR/$port.log"
sleep 0.02
echo "end $port $(date +%s%N)" >> "$SOAK_LOG_DIR/$port.log"
echo "wrote $port""#;

/// Many short lines with a percentage, then a marker file the flood client waits for.
const FLOOD: &str = r#"yes 'ab 50%' | head -c "$FLOOD_BYTES"
echo x >> "$FLOOD_DONE""#;

fn session_token(i: usize) -> String {
    format!("soak-session-{i:02}-token-0123456789")
}

fn port_of(board: u32) -> String {
    format!("1-{}", FIRST_PORT + board)
}

fn config(root: &Path, tools: &Path, flood_bytes: u64, lab: Option<&lab::Lab>) -> String {
    let (lab_board, lab_section) = lab.map(lab::Lab::yaml).unwrap_or_default();
    let (root, tools) = (root.display(), tools.display());
    let mut clients = String::new();
    for i in 0..SESSIONS {
        clients.push_str(&format!(
            "  - name: s{i:02}\n    token: {}\n    write_roots: [{tools}/files]\n",
            session_token(i)
        ));
    }
    format!(
        r#"
clients:
{clients}  - name: flood
    token: {FLOOD_TOKEN}
{abusers}{round5}{round6}file_roots: [{tools}/files, {tools}/upload-attack, {tools}/shared]
staging:
  upload_stall_secs: 5
limits:
  max_concurrent_children: 32
  kill_grace_secs: 2
devices:
  - name: rockusb
    match: {{vid: "2207", pid: "350b"}}
isolation:
  sysfs_root: {root}/sys
  devfs_root: {root}/dev
commands:
  - name: flash
    binary: {tools}/fake-flash
    device: rockusb
    isolate: true
    env: {{SOAK_LOG_DIR: "{tools}/logs"}}
    params: {{port: "1-[0-9]+"}}
    allowed_args:
      - pattern: "{{port}}"
  - name: flash-plain
    binary: {tools}/fake-flash-plain
    env: {{SOAK_LOG_DIR: "{tools}/logs"}}
    params: {{port: "1-[0-9]+"}}
    allowed_args:
      - pattern: "{{port}}"
  - name: flood
    binary: {tools}/flood.sh
    description: Many short lines with a percentage.
    progress: "([0-9]+)%"
    timeout_secs: 60
    env: {{FLOOD_BYTES: "{flood_bytes}", FLOOD_DONE: "{tools}/flood.done"}}
    allowed_args:
      - pattern: ""
{more}{bombed}{lab_board}{lab_section}{flash}"#,
        abusers = abuse::clients_yaml(),
        round5 = round5::clients_yaml(Path::new(&tools.to_string())),
        round6 = round6::clients_yaml(Path::new(&tools.to_string())),
        bombed = round5::boards_yaml(),
        flash = round5::flash_yaml(),
        more = abuse::commands_yaml(Path::new(&tools.to_string())),
    )
}

/// How the sessions keep one board to one run at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `lock_device {device}` leases `port:1-N`; the isolated `flash` runs under the lease
    /// and sees only its board.
    Isolated,
    /// Isolation could not run here: `lock_device {key: "port:1-N"}` leases and the
    /// non-isolated `flash-plain` run while the lease is held.
    KeyLeases,
}

/// Calls, latencies and errors of one session (or all, merged).
#[derive(Default)]
struct Tally {
    latency: BTreeMap<&'static str, Vec<Duration>>,
    calls: BTreeMap<&'static str, u64>,
    errors: BTreeMap<String, u64>,
    flashes_ok: u64,
}

impl Tally {
    fn merge(&mut self, other: Tally) {
        for (k, v) in other.latency {
            self.latency.entry(k).or_default().extend(v);
        }
        for (k, v) in other.calls {
            *self.calls.entry(k).or_default() += v;
        }
        for (k, v) in other.errors {
            *self.errors.entry(k).or_default() += v;
        }
        self.flashes_ok += other.flashes_ok;
    }

    /// Calls `tool`, records its latency and, on failure, the kind of error. Returns the
    /// structured content of a successful result.
    async fn call(&mut self, c: &Client, tool: &'static str, args: Value) -> Option<Value> {
        let obj = args.as_object().cloned().unwrap_or_default();
        let t = Instant::now();
        let r = tokio::time::timeout(
            CALL_LIMIT,
            c.call_tool(CallToolRequestParams::new(tool).with_arguments(obj)),
        )
        .await;
        let took = t.elapsed();
        *self.calls.entry(tool).or_default() += 1;
        let kind = match r {
            Err(_) => format!("{tool}: no answer within {}s", CALL_LIMIT.as_secs()),
            Ok(Err(e)) => format!("{tool}: transport: {}", first_words(&e.to_string())),
            Ok(Ok(r)) if r.is_error == Some(true) => format!("{tool}: {}", error_kind(&r)),
            Ok(Ok(r)) => {
                self.latency.entry(tool).or_default().push(took);
                return Some(r.structured_content.unwrap_or(Value::Null));
            }
        };
        *self.errors.entry(kind).or_default() += 1;
        None
    }
}

/// A refusal's kind: the known ones by name, the rest by their first words.
fn error_kind(r: &CallToolResult) -> String {
    let text = harness::text(r);
    if text.contains("is locked by") || text.contains("busy") {
        "busy (lock not granted within wait_secs)".into()
    } else if text.contains("already holds") {
        "already held".into()
    } else if text.contains("limit") {
        format!("limit: {}", first_words(&text))
    } else {
        first_words(&text)
    }
}

fn first_words(s: &str) -> String {
    s.split_whitespace().take(10).collect::<Vec<_>>().join(" ")
}

fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// One well-behaved session: its board's round until the deadline.
async fn session(url: String, i: usize, mode: Mode, deadline: Instant, round_cap: u64) -> Tally {
    let mut tally = Tally::default();
    let era = if i.is_multiple_of(2) {
        Era::Legacy
    } else {
        Era::Modern
    };
    let token = session_token(i);
    let c = match tokio::time::timeout(CALL_LIMIT, harness::connect(&url, Some(&token), era)).await
    {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            tally
                .errors
                .insert(format!("connect: {}", first_words(&e.to_string())), 1);
            return tally;
        }
        Err(_) => {
            tally.errors.insert("connect: no answer".into(), 1);
            return tally;
        }
    };
    let port = port_of(i as u32 % BOARDS);
    let payload = format!("session {i} on {port}\n").repeat(64);
    let sha = hex::encode(Sha256::digest(payload.as_bytes()));
    let mut round = 0u64;
    while Instant::now() < deadline && round < round_cap {
        round += 1;
        let lock_args = match mode {
            Mode::Isolated => json!({"device": port, "wait_secs": 30, "ttl_secs": 120}),
            Mode::KeyLeases => {
                json!({"key": format!("port:{port}"), "wait_secs": 30, "ttl_secs": 120})
            }
        };
        let granted = tally.call(&c, "lock_device", lock_args).await;
        let want_key = format!("port:{port}");
        let lease = match granted {
            Some(v) if v["key"] == json!(want_key) => v["lease_id"].as_str().map(str::to_string),
            Some(v) => {
                // A lease on anything but the board would make the overlap check meaningless.
                let why = format!("lock_device: leased {}, not {want_key}", v["key"]);
                *tally.errors.entry(why).or_default() += 1;
                v["lease_id"].as_str().map(str::to_string)
            }
            None => None,
        };
        if let Some(lease) = lease {
            let exec_args = match mode {
                Mode::Isolated => {
                    json!({"command": "flash", "args": [port], "device": port, "lease": lease})
                }
                Mode::KeyLeases => json!({"command": "flash-plain", "args": [port]}),
            };
            if let Some(v) = tally.call(&c, "execute_command", exec_args).await {
                if v["exit_code"] == json!(0) {
                    tally.flashes_ok += 1;
                } else {
                    let why = format!(
                        "execute_command: flash exited {}: {}",
                        v["exit_code"],
                        first_words(v["stderr"].as_str().unwrap_or_default())
                    );
                    *tally.errors.entry(why).or_default() += 1;
                }
            }
            tally
                .call(&c, "unlock_device", json!({"lease": lease}))
                .await;
        }
        tally.call(&c, "list_devices", json!({})).await;
        if round % 4 == 1 {
            tally
                .call(
                    &c,
                    "write_file",
                    json!({"path": format!("soak/s{i:02}.txt"), "offset": 0, "truncate": true,
                           "content_base64": b64(payload.as_bytes()), "sha256": sha}),
                )
                .await;
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), c.cancel()).await;
    tally
}

/// What the slowloris client managed.
#[derive(Default, Debug)]
struct Slowloris {
    opened: u64,
    closed_by_server: u64,
    connect_failures: u64,
    bytes_sent: u64,
    most_open: usize,
}

/// Keeps up to `conns` connections sending a request header one byte per `tick`, never
/// finishing it; reopens those the server closes. Bounded by the deadline and `max_opens`.
async fn slowloris(addr: String, conns: usize, tick: Duration, deadline: Instant) -> Slowloris {
    const HEAD: &[u8] = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
    let max_opens = (conns as u64) * 200;
    let mut st = Slowloris::default();
    let mut socks: Vec<Option<(tokio::net::TcpStream, usize)>> = (0..conns).map(|_| None).collect();
    while Instant::now() < deadline {
        for slot in socks.iter_mut() {
            if slot.is_none() && st.opened < max_opens {
                match tokio::time::timeout(
                    Duration::from_secs(2),
                    tokio::net::TcpStream::connect(&addr),
                )
                .await
                {
                    Ok(Ok(s)) => {
                        st.opened += 1;
                        *slot = Some((s, 0));
                    }
                    _ => st.connect_failures += 1,
                }
            }
            let Some((sock, sent)) = slot else { continue };
            // The server closing (or answering 408) shows as a readable socket.
            let mut buf = [0u8; 256];
            let closed = match sock.try_read(&mut buf) {
                Ok(_) => true,
                Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
            };
            let byte = HEAD.get(*sent).copied().unwrap_or(b'a');
            let write_failed = closed
                || tokio::time::timeout(Duration::from_millis(200), sock.write_all(&[byte]))
                    .await
                    .map_or(true, |r| r.is_err());
            if write_failed {
                st.closed_by_server += 1;
                *slot = None;
            } else {
                *sent += 1;
                st.bytes_sent += 1;
            }
        }
        st.most_open = st
            .most_open
            .max(socks.iter().filter(|s| s.is_some()).count());
        tokio::time::sleep(tick.min(deadline.saturating_duration_since(Instant::now()))).await;
    }
    st
}

/// What the progress-flood client managed.
#[derive(Default, Debug)]
struct Flood {
    started: u64,
    finished: u64,
    /// Runs not finished after the per-run limit: the socket was dropped.
    abandoned: u64,
    /// The last run, when the deadline came first.
    cut_by_deadline: u64,
}

/// Starts one flood at a time with a progress token from a raw client that never reads its
/// answer; waits for the tool's marker (or `per_run`), drops the socket, starts the next.
async fn flood(addr: String, done_file: PathBuf, deadline: Instant, per_run: Duration) -> Flood {
    let mut st = Flood::default();
    let done = || {
        std::fs::read_to_string(&done_file)
            .map(|s| s.lines().count() as u64)
            .unwrap_or(0)
    };
    for id in 1..=1000u64 {
        if Instant::now() >= deadline {
            break;
        }
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"execute_command","arguments":{{"command":"flood"}},"_meta":{{"progressToken":{id},"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#
        );
        let req = format!(
            "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {FLOOD_TOKEN}\r\n\
             Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
             MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: execute_command\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let Ok(Ok(mut sock)) = tokio::time::timeout(
            Duration::from_secs(2),
            tokio::net::TcpStream::connect(&addr),
        )
        .await
        else {
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        };
        if sock.write_all(req.as_bytes()).await.is_err() {
            continue;
        }
        st.started += 1;
        let before = st.finished;
        let end = (Instant::now() + per_run).min(deadline);
        while Instant::now() < end {
            if done() > before {
                st.finished = done();
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if st.finished == before {
            if Instant::now() >= deadline {
                st.cut_by_deadline += 1;
            } else {
                st.abandoned += 1;
            }
        }
        drop(sock);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    st
}

fn rss_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Runs per board and how many of them overlapped, from the tool's logs.
struct Overlaps {
    runs: u64,
    overlapping: u64,
    unfinished: u64,
    per_port: Vec<(String, u64, u64)>,
}

/// Runs in one board's log, how many started while another was open, and how many never
/// ended. Sorted by time, an `end` before a `start` of the same instant: touching runs do not
/// overlap.
fn count_overlaps(log: &str) -> (u64, u64, u64) {
    let mut events: Vec<(u128, u8)> = log
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let kind = match w.next()? {
                "start" => 1,
                "end" => 0,
                _ => return None,
            };
            let _port = w.next()?;
            Some((w.next()?.parse().ok()?, kind))
        })
        .collect();
    events.sort();
    let (mut open, mut runs, mut over) = (0u64, 0u64, 0u64);
    for (_, kind) in events {
        if kind == 1 {
            runs += 1;
            if open > 0 {
                over += 1;
            }
            open += 1;
        } else {
            open = open.saturating_sub(1);
        }
    }
    (runs, over, open)
}

/// Reads each board's log and counts its overlapping runs. The counter is first tried on
/// logs with a known answer, so a zero means no overlap rather than a blind check.
fn overlaps(log_dir: &Path) -> Overlaps {
    assert_eq!(
        count_overlaps("start 1-2 10\nstart 1-2 20\nend 1-2 30\nend 1-2 40\nstart 1-2 50\n"),
        (3, 1, 1),
        "the overlap counter misses a known overlap"
    );
    assert_eq!(
        count_overlaps("start 1-2 20\nend 1-2 30\nstart 1-2 30\nend 1-2 40\n"),
        (2, 0, 0),
        "the overlap counter sees an overlap in touching runs"
    );
    let mut o = Overlaps {
        runs: 0,
        overlapping: 0,
        unfinished: 0,
        per_port: Vec::new(),
    };
    for board in 0..BOARDS {
        let port = port_of(board);
        let log = std::fs::read_to_string(log_dir.join(format!("{port}.log"))).unwrap_or_default();
        let (runs, over, open) = count_overlaps(&log);
        o.runs += runs;
        o.overlapping += over;
        o.unfinished += open;
        o.per_port.push((port, runs, over));
    }
    o
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    if v.is_empty() {
        return Duration::ZERO;
    }
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i.min(v.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn mean(v: &[u64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<u64>() as f64 / v.len() as f64
    }
}

/// Whether isolation works here: one isolated flash on the first board.
async fn probe_isolation(url: &str) -> Result<(), String> {
    let c = harness::connect(url, Some(&session_token(0)), Era::Modern)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let port = port_of(0);
    let mut t = Tally::default();
    let r = t
        .call(
            &c,
            "execute_command",
            json!({"command": "flash", "args": [port], "device": port}),
        )
        .await;
    let _ = c.cancel().await;
    match r {
        Some(v) if v["exit_code"] == json!(0) => Ok(()),
        Some(v) => Err(format!(
            "flash exited {}: {}",
            v["exit_code"],
            v["stderr"].as_str().unwrap_or_default().trim()
        )),
        None => Err(t.errors.into_keys().next().unwrap_or_default()),
    }
}

async fn wait_for_boards(url: &str) -> usize {
    let Ok(c) = harness::connect(url, Some(&session_token(0)), Era::Modern).await else {
        return 0;
    };
    let mut n = 0;
    for _ in 0..250 {
        let r = harness::call(&c, "list_devices", json!({"class": "rockusb"})).await;
        n = harness::structured(&r)["devices"]
            .as_array()
            .map_or(0, Vec::len);
        if n == BOARDS as usize {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = c.cancel().await;
    n
}

/// The soak itself, under the umockdev preload. Returns whether the checked invariants held.
async fn soak(secs: u64, smoke: bool) -> bool {
    let tb = umockdev::Testbed::new();
    tb.add_from_string(include_str!("../tests/fixtures/usb1-root-hub.umockdev"));
    let make = umockdev::rk3588_maskrom_at;
    for b in 0..BOARDS {
        tb.add_from_string(&make(FIRST_PORT + b));
    }
    let tools = tempfile::tempdir().expect("tempdir");
    script(tools.path(), "fake-flash", FAKE_FLASH);
    script(tools.path(), "fake-flash-plain", FAKE_FLASH_PLAIN);
    script(tools.path(), "flood.sh", FLOOD);
    script(tools.path(), "ff.sh", abuse::FF);
    let relay_log = tools.path().join("relay.log");
    script(tools.path(), "relay.sh", &abuse::relay_script(&relay_log));
    let log_dir = tools.path().join("logs");
    std::fs::create_dir_all(&log_dir).expect("log dir");
    std::fs::create_dir_all(tools.path().join("files")).expect("files dir");
    std::fs::create_dir_all(tools.path().join("upload-attack")).expect("upload dir");
    std::fs::create_dir_all(tools.path().join("shared")).expect("shared dir");
    round5::write_bombs(&tools.path().join("files"));
    let flood_bytes = if smoke { 5_000_000 } else { 50_000_000 };
    let root = tb.root_dir();
    let mut env = vec![
        ("LD_PRELOAD", "libumockdev-preload.so.0"),
        ("UMOCKDEV_DIR", root.to_str().expect("utf8")),
    ];
    // As the server runs by default (the harness's `info` writes a line per request).
    env.push(("GATECMD_LOG", gatecmd::cli::DEFAULT_LOG_FILTER));
    // The labgrid part (issue 29), when the project's venv has labgrid.
    let lab = match lab::start(Path::new(env!("CARGO_MANIFEST_DIR")), tools.path()) {
        Ok(l) => Some(l),
        Err(why) => {
            println!("NOTE: no labgrid part in this soak: {why}");
            None
        }
    };
    let s = Server::start_with(
        &config(&root, tools.path(), flood_bytes, lab.as_ref()),
        &[],
        &env,
    );
    let addr = s.base.trim_start_matches("http://").to_string();
    let boards = wait_for_boards(&s.url).await;
    if boards != BOARDS as usize {
        println!("FAIL: the server lists {boards} of {BOARDS} testbed boards");
        return false;
    }
    let mode = match probe_isolation(&s.url).await {
        Ok(()) => Mode::Isolated,
        Err(why) => {
            println!(
                "NOTE: isolation cannot run here ({why}); falling back to lock_device \
                 {{key: \"port:1-N\"}} leases around a non-isolated command"
            );
            Mode::KeyLeases
        }
    };
    // The probe's run is in the logs too; start counting from clean logs.
    for b in 0..BOARDS {
        let _ = std::fs::remove_file(log_dir.join(format!("{}.log", port_of(b))));
    }

    let started = Instant::now();
    let deadline = started + Duration::from_secs(secs);
    let sample_every = if smoke {
        Duration::from_secs(1)
    } else {
        Duration::from_secs(5)
    };
    let pid = s.pid();
    let sampler = tokio::spawn(async move {
        let mut series = Vec::new();
        let mut peak = 0;
        let mut most_fds = 0;
        while Instant::now() < deadline {
            let (rss, hwm) = rss_kib(pid);
            peak = hwm;
            most_fds = most_fds.max(lab::descriptors(pid));
            series.push((started.elapsed().as_secs(), rss));
            tokio::time::sleep(sample_every).await;
        }
        let (rss, hwm) = rss_kib(pid);
        series.push((started.elapsed().as_secs(), rss));
        (series, peak.max(hwm), most_fds)
    });
    // The board of the labgrid part chatters, and whatever reaches it is kept to check
    // that nothing the attacker typed did.
    let lab_ports = lab.as_ref().map(|l| l.acquire());
    let lab_attack = match (&lab, lab_ports) {
        (Some(l), Some(Ok((console, power)))) => {
            let mut out = l.board.try_clone().expect("pty");
            let mut input = l.board.try_clone().expect("pty");
            std::thread::spawn(move || {
                let mut n = 0u64;
                while Instant::now() < deadline {
                    n += 1;
                    if out
                        .write_all(format!("lab board tick {n}\r\n").as_bytes())
                        .is_err()
                    {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            });
            let received = std::thread::spawn(move || {
                use std::os::fd::AsRawFd;
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                while Instant::now() < deadline + Duration::from_secs(2) {
                    // Polled, so the thread ends at the deadline however quiet the board is.
                    let mut fd = libc::pollfd {
                        fd: input.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    // SAFETY: one valid pollfd, for the length given.
                    if unsafe { libc::poll(&mut fd, 1, 200) } <= 0 {
                        continue;
                    }
                    match input.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                got
            });
            let attacker =
                tokio::task::spawn_blocking(move || lab::attack(console, power, deadline, 100_000));
            Some((attacker, received))
        }
        (Some(_), Some(Err(why))) => {
            println!("FAIL: the labgrid part could not start: {why}");
            return false;
        }
        _ => None,
    };
    let loris = tokio::spawn(slowloris(
        addr.clone(),
        200,
        Duration::from_secs(if smoke { 1 } else { 3 }),
        deadline,
    ));
    let flooder = tokio::spawn(flood(
        addr.clone(),
        tools.path().join("flood.done"),
        deadline,
        Duration::from_secs(45),
    ));
    let subs = tokio::spawn(abuse::subscription_flood(s.url.clone(), deadline));
    let parker = tokio::spawn(abuse::parked_answers(addr.clone(), deadline));
    let pages = tokio::spawn(abuse::page_flood(s.base.clone(), deadline));
    let racer = tokio::spawn(abuse::power_racer(
        s.url.clone(),
        relay_log.clone(),
        deadline,
    ));
    let uploads = tokio::spawn(round5::stalled_uploads(
        addr.clone(),
        tools.path().join("upload-attack"),
        deadline,
    ));
    let bombs = tokio::spawn(round5::bmap_bombs(s.url.clone(), deadline));
    let promises = tokio::spawn(round6::promise_flood(
        addr.clone(),
        tools.path().join("shared"),
        deadline,
    ));
    let shares = tokio::spawn(round6::sharer(
        s.base.clone(),
        tools.path().join("shared"),
        deadline,
    ));
    let mut tasks = Vec::new();
    for i in 0..SESSIONS {
        tasks.push(tokio::spawn(session(
            s.url.clone(),
            i,
            mode,
            deadline,
            ROUND_CAP,
        )));
    }
    let mut all = Tally::default();
    for t in tasks {
        match t.await {
            Ok(t) => all.merge(t),
            Err(e) => *all.errors.entry(format!("session task: {e}")).or_default() += 1,
        }
    }
    let loris = loris.await.unwrap_or_default();
    let flood = flooder.await.unwrap_or_default();
    let subs = subs.await.unwrap_or_default();
    let parked = parker.await.unwrap_or_default();
    let pages = pages.await.unwrap_or_default();
    let racer = racer.await.unwrap_or_default();
    let uploads = uploads.await.unwrap_or_default();
    let bombs = bombs.await.unwrap_or_default();
    let (series, peak, most_fds) = sampler.await.unwrap_or_default();
    let lab_result = match lab_attack {
        Some((attacker, received)) => {
            let a = attacker.await.unwrap_or_default();
            // The board's reader ends on its own shortly after the deadline.
            let typed = received.join().unwrap_or_default();
            Some((a, typed))
        }
        None => None,
    };
    let ran = started.elapsed();
    let o = overlaps(&log_dir);

    println!(
        "gatecmd soak ({}): {:.0} s, {SESSIONS} sessions (even: 2025-11-25, odd: 2026-07-28) \
         over {BOARDS} umockdev boards 1-2 … 1-{}, mode: {}",
        if smoke { "smoke" } else { "full" },
        ran.as_secs_f64(),
        FIRST_PORT + BOARDS - 1,
        match mode {
            Mode::Isolated => "isolated command under board leases (lock_device {device})",
            Mode::KeyLeases => "FALLBACK key leases port:1-N, no isolation",
        }
    );
    println!("server: {}", env!("CARGO_BIN_EXE_gatecmd"));
    println!();
    println!(
        "overlapping executions on one board: {} (checked from the tool's logs: {} runs, \
         {} without an end; {} execute_command calls answered exit 0)",
        o.overlapping, o.runs, o.unfinished, all.flashes_ok
    );
    let per_port: Vec<String> = o
        .per_port
        .iter()
        .map(|(p, r, x)| {
            if *x == 0 {
                format!("{p}:{r}")
            } else {
                format!("{p}:{r}({x} OVERLAPS)")
            }
        })
        .collect();
    println!("  runs per board: {}", per_port.join(" "));
    println!();
    println!(
        "{:<16} {:>8} {:>8} {:>12} {:>12} {:>10}",
        "tool", "calls", "errors", "p50", "p99", "calls/s"
    );
    let errors_of = |tool: &str| -> u64 {
        all.errors
            .iter()
            .filter(|(k, _)| k.starts_with(&format!("{tool}:")))
            .map(|(_, n)| n)
            .sum()
    };
    let tools_seen: Vec<&'static str> = all.calls.keys().copied().collect();
    for tool in tools_seen {
        let calls = all.calls[tool];
        let mut lat = all.latency.remove(tool).unwrap_or_default();
        println!(
            "{:<16} {:>8} {:>8} {:>12} {:>12} {:>10.1}",
            tool,
            calls,
            errors_of(tool),
            ms(pct(&mut lat, 0.5)),
            ms(pct(&mut lat, 0.99)),
            calls as f64 / ran.as_secs_f64()
        );
    }
    let total_calls: u64 = all.calls.values().sum();
    let total_errors: u64 = all.errors.values().sum();
    println!("{:<16} {:>8} {:>8}", "all", total_calls, total_errors);
    if !all.errors.is_empty() {
        println!("errors by kind:");
        for (k, n) in &all.errors {
            println!("  {n:>6}  {k}");
        }
    }
    println!();
    let values: Vec<u64> = series.iter().map(|(_, v)| *v).collect();
    let n = values.len();
    let (q2, q4) = (mean(&values[n / 4..n / 2]), mean(&values[3 * n / 4..]));
    // Flat: the last quarter within 10 % (and at least 1 MiB) of the second; the first
    // quarter is warm-up (sessions connecting, allocator arenas growing).
    let flat = n >= 4 && q4 <= q2 * 1.10 + 1024.0;
    println!(
        "server resident memory (VmRSS, every {} s, MiB): {}",
        sample_every.as_secs(),
        series
            .iter()
            .map(|(t, v)| format!("{t}s:{:.1}", *v as f64 / 1024.0))
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "  second quarter mean {:.1} MiB, last quarter mean {:.1} MiB ({:+.1} %), peak {:.1} MiB: {}",
        q2 / 1024.0,
        q4 / 1024.0,
        if q2 > 0.0 {
            (q4 / q2 - 1.0) * 100.0
        } else {
            0.0
        },
        peak as f64 / 1024.0,
        if n < 4 {
            "too few samples to judge"
        } else if smoke {
            "not judged in smoke mode (10 s is mostly warm-up)"
        } else if flat {
            "flat"
        } else {
            "GROWING"
        }
    );
    println!();
    println!(
        "slowloris: {} connections opened (at most {} open at once), {} closed by the server, \
         {} connect failures, {} header bytes sent",
        loris.opened,
        loris.most_open,
        loris.closed_by_server,
        loris.connect_failures,
        loris.bytes_sent
    );
    println!(
        "progress flood ({} MB of `ab 50%` lines per run, answer never read): {} started, \
         {} finished, {} abandoned after 45 s, {} cut off by the deadline",
        flood_bytes / 1_000_000,
        flood.started,
        flood.finished,
        flood.abandoned,
        flood.cut_by_deadline
    );
    println!(
        "subscription flood (listen with 200 made-up 3 KB URIs, subscribe with 64 KB URIs): \
         {} tried, {} refused, {} accepted",
        subs.tried, subs.refused, subs.accepted
    );
    println!(
        "parked answers (1 MiB answers never read, 40 at a time, 4 KiB window): {} sent, \
         {} admitted, {} refused 429",
        parked.sent, parked.admitted, parked.refused
    );
    println!(
        "page-session flood (one client's sign-ins): {} sign-ins; the admin's session checked \
         {} times, signed out {} times",
        pages.sign_ins, pages.admin_checks, pages.admin_signed_out
    );
    println!(
        "power-command racer (relay off while another client holds the board): {} tries, \
         {} refused power_command, {} ran; holder's power_board: {} runs; relay log: {} runs",
        racer.tries, racer.refused_power_command, racer.ran, racer.holder_cycles, racer.relay_runs
    );
    let lab_ok = match &lab_result {
        None => {
            println!("labgrid part: not run (see the NOTE at the top)");
            true
        }
        Some((a, typed)) => {
            let reached = memchr::memmem::find(typed, b"typed-by-the-attacker").is_some();
            println!(
                "labgrid ports (a person's place holds {}, acquired as {}; the attacker is this \
                 process's own account): console {} tries, {} refused, {} bytes leaked, typed \
                 text reached the board: {}; power PUT 0: {} tries, {} refused, {} switched; idle \
                 power-port connections: {} opened, at most {} open at once",
                lab::BOARD,
                lab::PERSON,
                a.console_tries,
                a.console_refused,
                a.console_bytes_leaked,
                if reached { "YES" } else { "no" },
                a.power_tries,
                a.power_refused,
                a.power_switched,
                a.idle_opened,
                a.idle_most_open
            );
            a.console_bytes_leaked == 0
                && !reached
                && a.power_switched == 0
                && a.power_refused == a.power_tries
        }
    };
    println!(
        "stalled uploads (headers and 64 KiB, then silence; 1 MiB quota): {} declaring 8 MiB, \
         {} refused 413/429/409 from their headers; {} chunked, {} refused 429/409, {} admitted (at \
         most {} open at once); {} other{}",
        uploads.declared,
        uploads.declared_refused,
        uploads.chunked,
        uploads.chunked_refused,
        uploads.chunked_admitted,
        uploads.most_admitted,
        uploads.other,
        if uploads.other_seen.is_empty() {
            String::new()
        } else {
            format!(" (first: {})", uploads.other_seen)
        }
    );
    println!(
        "bmap bombs (4,000 nested namespace declarations; 64 MiB of empty elements): {} \
         flash_board calls, {} stopped at check_image, {} other; slowest {} ms",
        bombs.tried,
        bombs.refused_at_check,
        bombs.other,
        bombs.slowest.as_millis()
    );
    let (promises, shares) = (
        promises.await.unwrap_or_default(),
        shares.await.unwrap_or_default(),
    );
    println!(
        "promise flood (4 header-only PUTs of 8 GiB into a shared 32 GiB root, a byte a second \
         each): {} opened, {} ended 408 by the progress rule, {} refused, {} other, longest \
         open {:.1} s; the other client's 1 KiB uploads into that root: {} of {} stored ({:.1} %){}",
        promises.opened,
        promises.ended_408,
        promises.refused,
        promises.other,
        promises.longest.as_secs_f64(),
        shares.stored,
        shares.tried,
        if shares.tried == 0 {
            0.0
        } else {
            100.0 * shares.stored as f64 / shares.tried as f64
        },
        if shares.first_refusal.is_empty() {
            String::new()
        } else {
            format!(" (first refusal: {})", shares.first_refusal)
        }
    );
    // The stall span is 5 s here: a request lives at most one span and a little.
    let round6_ok = shares.tried > 0
        && shares.stored == shares.tried
        && promises.other == 0
        && promises.longest < Duration::from_secs(12);
    let round5_ok = uploads.declared_refused == uploads.declared
        && uploads.most_admitted <= 4
        && uploads.other == 0
        && bombs.tried > 0
        && bombs.refused_at_check == bombs.tried;
    println!("server descriptors: at most {most_fds} open (sampled with the memory)");
    let fds_ok = most_fds < 1024;
    let abuse_ok = lab_ok
        && round5_ok
        && round6_ok
        && fds_ok
        && subs.accepted == 0
        && pages.admin_signed_out == 0
        && racer.ran == 0
        && racer.relay_runs == racer.holder_cycles;
    let ok = o.overlapping == 0 && o.runs > 0 && abuse_ok;
    println!();
    println!(
        "{}",
        if ok {
            "verdict: no overlapping executions; every abuse was contained"
        } else if !abuse_ok {
            "FAIL: an abuse got through (see the lines above)"
        } else if o.runs == 0 {
            "FAIL: no run of the flashing tool was logged"
        } else {
            "FAIL: overlapping executions on one board"
        }
    );
    ok
}

fn main() {
    let smoke = std::env::args().any(|a| a == "--smoke")
        || std::env::var_os("GATECMD_BENCH_SMOKE").is_some();
    let secs = if smoke {
        10
    } else {
        std::env::var("GATECMD_SOAK_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(300)
    };
    if std::env::var_os(INNER).is_some() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let ok = rt.block_on(soak(secs, smoke));
        std::process::exit(if ok { 0 } else { 1 });
    }
    eprintln!(
        "gatecmd soak: {secs} s{}; the report follows when it ends",
        if smoke { " (smoke)" } else { "" }
    );
    // The work runs in a copy of this binary under the umockdev preload (the testbed's owner
    // must be preloaded, see tests/common/umockdev.rs).
    let status = Command::new(std::env::current_exe().expect("exe"))
        .args(std::env::args().skip(1))
        .env(INNER, "1")
        .env(umockdev::INNER_MARKER, "1")
        .env("LD_PRELOAD", "libumockdev-preload.so.0")
        .env_remove("UMOCKDEV_DIR")
        .status()
        .expect("soak run");
    std::process::exit(status.code().unwrap_or(1));
}
