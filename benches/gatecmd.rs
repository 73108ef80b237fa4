//! gatecmd's benchmark: starts the release server itself and prints one table of figures
//! (median, p99, samples) against the targets in DESIGN.md.
//!
//! Run: `make bench` (= `cargo bench --bench gatecmd`). `make bench-smoke` runs a few
//! iterations of everything, for CI. Device figures need a umockdev testbed, so that part
//! runs in a re-executed copy of this binary under the umockdev preload.

#[path = "../tests/harness/mod.rs"]
mod harness;
mod metrics_rows;
#[path = "../tests/common/umockdev.rs"]
mod umockdev;

mod audit_rows;
mod console_rows;
mod lab_rows;
mod lab_scale;
mod live_rows;
mod shell_rows;
#[path = "../tests/sim_board/mod.rs"]
mod sim_board;
mod upload_rows;

use std::process::Command;
use std::time::{Duration, Instant};

use harness::*;
use rmcp::model::{ServerNotification, SubscribeRequestParams, SubscriptionFilter};
use serde::{Deserialize, Serialize};
use serde_json::json;

const INNER: &str = "GATECMD_BENCH_DEVICES";

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Row {
    figure: String,
    median: String,
    p99: String,
    samples: usize,
    target: String,
    verdict: String,
}

struct Sizes {
    calls: usize,
    secs: f64,
    events: usize,
    sessions: usize,
    starts: usize,
}

fn sizes(smoke: bool) -> Sizes {
    if smoke {
        Sizes {
            calls: 20,
            secs: 0.5,
            events: 5,
            sessions: 10,
            starts: 3,
        }
    } else {
        Sizes {
            calls: 1000,
            secs: 5.0,
            events: 200,
            sessions: 100,
            starts: 20,
        }
    }
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
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

fn latency_row(figure: &str, v: &mut [Duration], target: &str, ok: Option<bool>) -> Row {
    let median = pct(v, 0.5);
    let p99 = pct(v, 0.99);
    Row {
        figure: figure.into(),
        median: ms(median),
        p99: ms(p99),
        samples: v.len(),
        target: target.into(),
        verdict: match ok {
            Some(true) => "met".into(),
            Some(false) => "MISSED".into(),
            None => "".into(),
        },
    }
}

fn config(dir_cmds: &str) -> String {
    // The A/B overhead runs (one session) give both servers the same config, which an
    // older binary must accept: it predates max_open_answers_per_client (issue 22).
    let answers = if std::env::var("GATECMD_BENCH_ONLY").is_ok_and(|v| v == "overhead") {
        ""
    } else {
        "\n  max_open_answers_per_client: 64"
    };
    format!(
        r#"
clients:
  - name: bench-a
    token: {TOKEN_A}
  - name: bench-b
    token: {TOKEN_B}
limits:
  # One client drives 32 sessions at once here, beyond the per-client defaults.
  max_concurrent_per_client: 64{answers}
devices:
  - name: rockusb
    match: {{vid: "2207"}}
commands:
  - name: true
    binary: /bin/true
    allowed_args:
      - pattern: ""
  - name: echo
    binary: /usr/bin/echo
    params: {{a: "[a-z]+", b: "[a-z]+"}}
    allowed_args:
      - pattern: "{{a}} {{b}}"
{dir_cmds}
"#
    )
}

/// The server as it runs by default: the harness logs at `info` for the tests' sake,
/// which makes rmcp write a line per request.
fn serve(yaml: &str, env: &[(&str, &str)]) -> Server {
    let mut env = env.to_vec();
    env.push(("GATECMD_LOG", gatecmd::cli::DEFAULT_LOG_FILTER));
    Server::start_with(yaml, &[], &env)
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|n| n.parse().ok()))
        })
        .unwrap_or(0)
}

async fn exec_overhead(z: &Sizes) -> Vec<Row> {
    let s = serve(&config(""), &[]);
    let c = connect(&s.url, Some(TOKEN_A), Era::Legacy)
        .await
        .expect("connect");
    for _ in 0..20 {
        call(&c, "execute_command", json!({"command": "true"})).await;
    }
    let mut via = Vec::with_capacity(z.calls);
    let mut direct = Vec::with_capacity(z.calls);
    // Interleave so both see the same machine state.
    for _ in 0..z.calls {
        let t = Instant::now();
        let r = call(&c, "execute_command", json!({"command": "true"})).await;
        via.push(t.elapsed());
        assert!(!is_error(&r), "{}", text(&r));
        let t = Instant::now();
        let st = tokio::process::Command::new("/bin/true")
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .process_group(0)
            .output()
            .await
            .expect("spawn");
        direct.push(t.elapsed());
        assert!(st.status.success());
    }
    let (vm, dm) = (pct(&mut via, 0.5), pct(&mut direct, 0.5));
    let diff = vm.saturating_sub(dm);
    let mut rows = vec![
        latency_row(
            "execute_command /bin/true over HTTP (1 session)",
            &mut via,
            "",
            None,
        ),
        latency_row("spawn /bin/true directly (tokio)", &mut direct, "", None),
    ];
    rows.push(Row {
        figure: format!(
            "  overhead (difference of medians), ratio {:.2}x",
            vm.as_secs_f64() / dm.as_secs_f64().max(1e-9)
        ),
        median: ms(diff),
        p99: "".into(),
        samples: z.calls,
        target: "≤ 1 ms".into(),
        verdict: if diff <= Duration::from_millis(1) {
            "met".into()
        } else {
            "MISSED".into()
        },
    });
    rows
}

/// `execute_command {background: true}` → the job handle (issue 23): every check, the
/// locks and the job's registration, answered before the child's outcome. A server
/// without jobs (an A/B run against an older binary) refuses the field: no row then.
async fn job_handle(z: &Sizes) -> Vec<Row> {
    let s = serve(&config(""), &[]);
    let c = connect(&s.url, Some(TOKEN_A), Era::Legacy)
        .await
        .expect("connect");
    let args = json!({"command": "true", "background": true});
    if is_error(&call(&c, "execute_command", args.clone()).await) {
        return vec![];
    }
    for _ in 0..20 {
        call(&c, "execute_command", args.clone()).await;
    }
    let mut lat = Vec::with_capacity(z.calls);
    for _ in 0..z.calls {
        let t = Instant::now();
        let r = call(&c, "execute_command", args.clone()).await;
        lat.push(t.elapsed());
        // 64 slots: a job not yet ended may hold one; a refusal here would be the limit.
        assert!(!is_error(&r), "{}", text(&r));
    }
    vec![latency_row(
        "execute_command {background: true} /bin/true → job handle (1 session)",
        &mut lat,
        "",
        None,
    )]
}

/// `execute_command` of `/usr/bin/echo` through the official MCP Python SDK
/// (benches/python_echo.py in .venv, which `make bench` creates), in both eras.
fn python_sdk(z: &Sizes) -> Vec<Row> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = root.join(".venv/bin/python");
    let label = |mode: &str| format!("execute_command /usr/bin/echo, official Python SDK ({mode})");
    if !python.exists() {
        return vec![Row {
            figure: label("skipped: no .venv; run ./scripts/venv.sh"),
            median: String::new(),
            p99: String::new(),
            samples: 0,
            target: "≤ 2.6 ms".into(),
            verdict: "not run".into(),
        }];
    }
    let s = serve(&config(""), &[]);
    let mut rows = Vec::new();
    for mode in ["legacy", "auto"] {
        let out = Command::new(&python)
            .arg(root.join("benches/python_echo.py"))
            .args([s.url.as_str(), TOKEN_A, mode, &z.calls.to_string()])
            .output()
            .expect("run python");
        assert!(
            out.status.success(),
            "python_echo.py {mode}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("python output");
        let mut lat: Vec<Duration> = v["ms"]
            .as_array()
            .expect("ms")
            .iter()
            .filter_map(|m| m.as_f64())
            .map(|m| Duration::from_secs_f64(m / 1000.0))
            .collect();
        let med = pct(&mut lat, 0.5);
        let version = if mode == "legacy" {
            "2025-11-25"
        } else {
            "2026-07-28"
        };
        rows.push(latency_row(
            &label(&format!("mcp 2.3.0, {version}")),
            &mut lat,
            "≤ 2.6 ms",
            Some(med <= Duration::from_micros(2600)),
        ));
    }
    rows
}

/// Throughput with a plain HTTP client (reqwest, keep-alive pool) sending self-contained
/// 2026-07-28 requests: separates the server's cost from rmcp's client machinery.
async fn raw_throughput(
    url: &str,
    tool: &str,
    sessions: usize,
    secs: f64,
    target: Option<f64>,
) -> Row {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{tool}","arguments":{{}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#
    );
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs_f64(secs) + Duration::from_millis(500);
    let start = deadline - Duration::from_secs_f64(secs);
    let mut tasks = Vec::new();
    for _ in 0..sessions {
        let (http, url, body, tool) = (
            http.clone(),
            url.to_string(),
            body.clone(),
            tool.to_string(),
        );
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            loop {
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                let r = http
                    .post(&url)
                    .header("authorization", format!("Bearer {TOKEN_A}"))
                    .header("content-type", "application/json")
                    .header("accept", "application/json, text/event-stream")
                    .header("mcp-protocol-version", "2026-07-28")
                    .header("mcp-method", "tools/call")
                    .header("mcp-name", tool.as_str())
                    .body(body.clone())
                    .send()
                    .await
                    .expect("post");
                let text = r.text().await.expect("body");
                assert!(text.contains("structuredContent"), "{text}");
                if now >= start {
                    lat.push(now.elapsed());
                }
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("session"));
    }
    rate_row(
        format!("{tool}, {sessions} plain HTTP clients (2026-07-28, keep-alive)"),
        all,
        secs,
        target,
    )
}

/// A throughput row: calls/s over the window, and the latency of each call. `target`
/// is the calls/s to reach with a p99 ≤ 5 ms.
fn rate_row(figure: String, mut lat: Vec<Duration>, secs: f64, target: Option<f64>) -> Row {
    let n = lat.len();
    let rate = n as f64 / secs;
    let p99 = pct(&mut lat, 0.99);
    let median = pct(&mut lat, 0.5);
    Row {
        figure: format!("{figure}: {rate:.0} calls/s"),
        median: ms(median),
        p99: ms(p99),
        samples: n,
        target: target
            .map(|t| format!("≥ {t:.0}/s, p99 ≤ 5 ms"))
            .unwrap_or_default(),
        verdict: match target {
            Some(t) if rate >= t && p99 <= Duration::from_millis(5) => "met".into(),
            Some(_) => "MISSED".into(),
            None => "".into(),
        },
    }
}

async fn throughput(url: &str, tool: &str, era: Era, sessions: usize, secs: f64) -> Row {
    let mut tasks = Vec::new();
    let deadline = Instant::now() + Duration::from_secs_f64(secs) + Duration::from_millis(500);
    for i in 0..sessions {
        let url = url.to_string();
        let tool = tool.to_string();
        tasks.push(tokio::spawn(async move {
            let token = if i % 2 == 0 { TOKEN_A } else { TOKEN_B };
            let c = connect(&url, Some(token), era).await.expect("connect");
            let mut lat = Vec::new();
            // Warm up, then measure inside the window.
            call(&c, &tool, json!({})).await;
            let start = deadline - Duration::from_secs_f64(secs);
            while Instant::now() < start {
                call(&c, &tool, json!({})).await;
            }
            while Instant::now() < deadline {
                let t = Instant::now();
                let r = call(&c, &tool, json!({})).await;
                lat.push(t.elapsed());
                assert!(!is_error(&r));
            }
            let _ = c.cancel().await;
            lat
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("session"));
    }
    let era = match era {
        Era::Legacy => "2025-11-25 sessions",
        Era::Modern => "2026-07-28",
    };
    rate_row(
        format!("{tool}, {sessions} rmcp clients ({era})"),
        all,
        secs,
        None,
    )
}

async fn lock_handoff(z: &Sizes) -> Row {
    let s = serve(&config(""), &[]);
    let a = connect(&s.url, Some(TOKEN_A), Era::Legacy)
        .await
        .expect("a");
    let b = connect(&s.url, Some(TOKEN_B), Era::Legacy)
        .await
        .expect("b");
    let mut v = Vec::new();
    for _ in 0..z.calls.min(300) {
        let r = call(&a, "lock_device", json!({"key": "group:bench"})).await;
        let lease = structured(&r)["lease_id"]
            .as_str()
            .expect("lease")
            .to_string();
        let url = s.url.clone();
        let waiter = tokio::spawn({
            let b = b.peer().clone();
            async move {
                let _ = url;
                let obj = json!({"key": "group:bench", "wait_secs": 10})
                    .as_object()
                    .cloned()
                    .unwrap_or_default();
                let r = b
                    .call_tool(
                        rmcp::model::CallToolRequestParams::new("lock_device").with_arguments(obj),
                    )
                    .await
                    .expect("b lock");
                (Instant::now(), r)
            }
        });
        // Let b's request reach the queue.
        tokio::time::sleep(Duration::from_millis(5)).await;
        let t0 = Instant::now();
        let unlock = call(&a, "unlock_device", json!({"lease": lease})).await;
        assert!(!is_error(&unlock));
        let (t1, r) = waiter.await.expect("waiter");
        v.push(t1.saturating_duration_since(t0));
        let lease_b = structured(&r)["lease_id"]
            .as_str()
            .expect("b lease")
            .to_string();
        call(&b, "unlock_device", json!({"lease": lease_b})).await;
    }
    let med = pct(&mut v, 0.5);
    latency_row(
        "lock hand-off: unlock_device sent → waiter's lock_device answered",
        &mut v,
        "≤ 1 ms median",
        Some(med <= Duration::from_millis(1)),
    )
}

fn startup(z: &Sizes) -> (Row, Row) {
    let mut v = Vec::new();
    let mut idle_rss = Vec::new();
    for _ in 0..z.starts {
        let dir = tempfile::tempdir().expect("tmp");
        let cfg = dir.path().join("c.yaml");
        std::fs::write(&cfg, format!("auth_token: {TOKEN_A}\ncommands: []\n")).expect("write");
        std::fs::set_permissions(&cfg, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .expect("chmod");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("port")
            .port();
        let t = Instant::now();
        let mut child = Command::new(env!("CARGO_BIN_EXE_gatecmd"))
            .args(["serve", "--config"])
            .arg(&cfg)
            .args(["--bind", &format!("127.0.0.1:{port}")])
            .env("GATECMD_LOG", "warn")
            .env_remove("LD_PRELOAD")
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn");
        let req = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
        loop {
            if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
                use std::io::{Read, Write};
                let mut out = String::new();
                if s.write_all(req).is_ok()
                    && s.read_to_string(&mut out).is_ok()
                    && out.starts_with("HTTP/1.1 200")
                {
                    break;
                }
            }
            if t.elapsed() > Duration::from_secs(10) {
                panic!("server did not answer /health");
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        v.push(t.elapsed());
        std::thread::sleep(Duration::from_millis(300));
        idle_rss.push(rss_kib(child.id()));
        let _ = child.kill();
        let _ = child.wait();
    }
    let med = pct(&mut v, 0.5);
    idle_rss.sort();
    let rss = idle_rss[idle_rss.len() / 2];
    (
        latency_row(
            "start-up: exec → /health answers 200",
            &mut v,
            "≤ 50 ms",
            Some(med <= Duration::from_millis(50)),
        ),
        Row {
            figure: "resident memory, idle".into(),
            median: format!("{:.1} MiB", rss as f64 / 1024.0),
            p99: String::new(),
            samples: idle_rss.len(),
            target: "≤ 8 MiB".into(),
            verdict: if rss <= 8 * 1024 {
                "met".into()
            } else {
                "MISSED".into()
            },
        },
    )
}

async fn sessions_rss(z: &Sizes) -> Row {
    let s = serve(&config(""), &[]);
    let mut clients = Vec::new();
    for i in 0..z.sessions {
        let token = if i % 2 == 0 { TOKEN_A } else { TOKEN_B };
        let (c, rx) = connect_recorder(&s.url, Some(token), Era::Legacy)
            .await
            .expect("connect");
        #[allow(deprecated)]
        c.subscribe(SubscribeRequestParams::new("gatecmd://devices"))
            .await
            .expect("subscribe");
        clients.push((c, rx));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss = rss_kib(s.pid());
    Row {
        figure: format!("resident memory, {} open subscribed sessions", z.sessions),
        median: format!("{:.1} MiB", rss as f64 / 1024.0),
        p99: String::new(),
        samples: 1,
        target: "≤ 40 MiB (100 sessions)".into(),
        verdict: if rss <= 40 * 1024 {
            "met".into()
        } else {
            "MISSED".into()
        },
    }
}

/// Device figures: this runs under the umockdev preload with a testbed of 20 boards.
async fn device_figures(z: &Sizes) -> Vec<Row> {
    let tb = umockdev::Testbed::new();
    tb.add_from_string(include_str!("../tests/fixtures/usb1-root-hub.umockdev"));
    let make = umockdev::rk3588_maskrom_at;
    for port in 2..22 {
        tb.add_from_string(&make(port));
    }
    let root = tb.root_dir();
    let s = serve(
        &config(""),
        &[
            ("LD_PRELOAD", "libumockdev-preload.so.0"),
            ("UMOCKDEV_DIR", root.to_str().expect("utf8")),
        ],
    );
    let mut rows = Vec::new();
    let c = connect(&s.url, Some(TOKEN_A), Era::Legacy)
        .await
        .expect("c");
    let r = call(&c, "list_devices", json!({})).await;
    let n = structured(&r)["devices"]
        .as_array()
        .map(Vec::len)
        .unwrap_or(0);
    assert_eq!(n, 20, "testbed devices visible");
    // The target is the server's: a plain client costs little CPU on the two cores the
    // server shares with it. rmcp's client costs more per call than the server does
    // (docs/PERFORMANCE.md), so its rows show what that client reaches.
    for tool in ["list_devices", "list_commands"] {
        for sessions in [1, 8, 32] {
            let target = (tool == "list_devices" && sessions == 32).then_some(10_000.0);
            rows.push(raw_throughput(&s.url, tool, sessions, z.secs, target).await);
        }
        if only_plain() {
            continue;
        }
        for sessions in [1, 8, 32] {
            rows.push(throughput(&s.url, tool, Era::Legacy, sessions, z.secs).await);
        }
        rows.push(throughput(&s.url, tool, Era::Modern, 32, z.secs).await);
    }
    if only_throughput() {
        return rows;
    }

    // Hotplug → notifications/resources/updated, both eras.
    let hot = "usb1/1-22";
    let (legacy, mut lrx) = connect_recorder(&s.url, Some(TOKEN_A), Era::Legacy)
        .await
        .expect("legacy");
    #[allow(deprecated)]
    legacy
        .subscribe(SubscribeRequestParams::new("gatecmd://devices"))
        .await
        .expect("subscribe");
    let (modern, _m) = connect_recorder(&s.url, Some(TOKEN_B), Era::Modern)
        .await
        .expect("modern");
    let mut sub = modern
        .listen(
            SubscriptionFilter::builder()
                .resource_subscriptions(["gatecmd://devices"])
                .build(),
        )
        .await
        .expect("listen");
    // Timed from the uevent to the notification: a mode change (the board's `version`
    // attribute flips between 2.00 and 2.01, as on re-enumeration into Loader) is one
    // `change` uevent. A second pair of rows times plug/unplug, which also includes
    // umockdev writing or deleting the device's files.
    let changed_sys = "/sys/devices/pci0000:00/0000:00:14.0/usb1/1-2";
    let version_file = tb
        .root_dir()
        .join("sys/devices/pci0000:00/0000:00:14.0/usb1/1-2/version");
    let (mut change_l, mut change_m) = (Vec::new(), Vec::new());
    for i in 0..z.events {
        std::fs::write(
            &version_file,
            if i % 2 == 0 { " 2.01\n" } else { " 2.00\n" },
        )
        .expect("attr");
        let t = Instant::now();
        tb.uevent(changed_sys, "change");
        let (l, m) = wait_both(&mut lrx, &mut sub, i).await;
        change_l.push(l.saturating_duration_since(t));
        change_m.push(m.saturating_duration_since(t));
    }
    let p = pct(&mut change_l, 0.99);
    rows.push(latency_row(
        "hotplug (change uevent) → resources/updated, 2025-11-25",
        &mut change_l,
        "p99 ≤ 20 ms",
        Some(p <= Duration::from_millis(20)),
    ));
    let p = pct(&mut change_m, 0.99);
    rows.push(latency_row(
        "hotplug (change uevent) → resources/updated, 2026-07-28",
        &mut change_m,
        "p99 ≤ 20 ms",
        Some(p <= Duration::from_millis(20)),
    ));

    let mut lat_legacy = Vec::new();
    let mut lat_modern = Vec::new();
    let syspath = format!("/sys/devices/pci0000:00/0000:00:14.0/{hot}");
    for i in 0..z.events {
        let t = Instant::now();
        if i % 2 == 0 {
            tb.add_from_string(&make(22));
        } else {
            tb.unplug(&syspath);
        }
        let (l, m) = wait_both(&mut lrx, &mut sub, i).await;
        lat_legacy.push(l.saturating_duration_since(t));
        lat_modern.push(m.saturating_duration_since(t));
    }
    rows.push(latency_row(
        "plug/unplug (umockdev file work included) → updated, 2025-11-25",
        &mut lat_legacy,
        "",
        None,
    ));
    rows.push(latency_row(
        "plug/unplug (umockdev file work included) → updated, 2026-07-28",
        &mut lat_modern,
        "",
        None,
    ));
    rows
}

/// Waits for `updated gatecmd://devices` on both clients; returns when each arrived.
async fn wait_both(
    lrx: &mut tokio::sync::mpsc::UnboundedReceiver<Heard>,
    sub: &mut rmcp::service::Subscription,
    i: usize,
) -> (Instant, Instant) {
    let (mut l, mut m) = (None, None);
    while l.is_none() || m.is_none() {
        tokio::select! {
            h = lrx.recv(), if l.is_none() => {
                if let Some(Heard::ResourceUpdated(u)) = h && u == "gatecmd://devices" {
                    l = Some(Instant::now());
                }
            }
            n = sub.next(), if m.is_none() => {
                if let Ok(Some(ServerNotification::ResourceUpdatedNotification(_))) = n {
                    m = Some(Instant::now());
                }
            }
            _ = tokio::time::sleep(Duration::from_secs(5)) => panic!("no notification for event {i}"),
        }
    }
    (
        l.unwrap_or_else(Instant::now),
        m.unwrap_or_else(Instant::now),
    )
}

/// `GATECMD_BENCH_ONLY=throughput`: only the throughput rows (for profiling runs);
/// `=plain` only the plain-HTTP ones; `=overhead` only the `execute_command` overhead rows;
/// `=shell` only the `board_run` rows; `=audit` only the audit log's rows.
fn only_throughput() -> bool {
    std::env::var("GATECMD_BENCH_ONLY").is_ok_and(|v| v == "throughput" || v == "plain")
}

/// `GATECMD_BENCH_ONLY=plain`: only the plain-HTTP throughput rows.
fn only_plain() -> bool {
    std::env::var("GATECMD_BENCH_ONLY").is_ok_and(|v| v == "plain")
}

fn print(rows: &[Row]) {
    let w = rows
        .iter()
        .map(|r| r.figure.chars().count())
        .max()
        .unwrap_or(10);
    println!(
        "{:<w$}  {:>12}  {:>12}  {:>8}  target",
        "figure", "median", "p99", "samples"
    );
    println!("{}", "-".repeat(w + 70));
    for r in rows {
        println!(
            "{:<w$}  {:>12}  {:>12}  {:>8}  {:<24} {}",
            r.figure, r.median, r.p99, r.samples, r.target, r.verdict
        );
    }
}

fn main() {
    let smoke = std::env::args().any(|a| a == "--smoke")
        || std::env::var_os("GATECMD_BENCH_SMOKE").is_some();
    let z = sizes(smoke);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    if std::env::var_os(INNER).is_some() {
        let mut rows = rt.block_on(device_figures(&z));
        if !only_throughput() {
            rows.extend(rt.block_on(metrics_rows::rows(&z)));
        }
        println!("ROWS {}", serde_json::to_string(&rows).expect("json"));
        return;
    }
    eprintln!(
        "gatecmd bench ({}): server binary {}{}",
        if smoke { "smoke" } else { "full" },
        env!("CARGO_BIN_EXE_gatecmd"),
        if smoke {
            " (smoke: a few iterations to check the benchmark runs; the figures mean nothing)"
        } else {
            ""
        }
    );
    if std::env::var("GATECMD_BENCH_ONLY").is_ok_and(|v| v == "shell") {
        // The board_run rows alone.
        print(&rt.block_on(shell_rows::rows(&z)));
        return;
    }
    if std::env::var("GATECMD_BENCH_ONLY").is_ok_and(|v| v == "lab-scale") {
        // The lab at scale (issue 49): 20 hosts x 8 boards, 200 agents, loopback.
        print(&rt.block_on(lab_scale::rows()));
        return;
    }
    if std::env::var("GATECMD_BENCH_ONLY").is_ok_and(|v| v == "lab") {
        // The lab rows alone (issue 49): a peer's board against this host's.
        print(&rt.block_on(lab_rows::rows(&z)));
        return;
    }
    if std::env::var("GATECMD_BENCH_ONLY").is_ok_and(|v| v == "console") {
        // The console rows alone (wait_for latency, waiting reads' CPU, sustained capture).
        print(&rt.block_on(console_rows::rows(&z)));
        return;
    }
    if std::env::var("GATECMD_BENCH_ONLY").is_ok_and(|v| v == "upload") {
        print(&rt.block_on(upload_rows::rows(&z)));
        return;
    }
    if std::env::var("GATECMD_BENCH_ONLY").is_ok_and(|v| v == "live") {
        // The live-output rows alone.
        print(&rt.block_on(live_rows::rows(&z)));
        return;
    }
    if std::env::var("GATECMD_BENCH_ONLY").is_ok_and(|v| v == "audit") {
        // The audit log's rows alone: records per second signed and unsigned, verify.
        print(&audit_rows::rows(&z));
        return;
    }
    if std::env::var("GATECMD_BENCH_ONLY").is_ok_and(|v| v == "overhead") {
        // A/B runs of the overhead rows alone (GATECMD_BIN names the server binary).
        let mut rows = rt.block_on(exec_overhead(&z));
        rows.extend(rt.block_on(job_handle(&z)));
        print(&rows);
        return;
    }
    let mut rows = if only_throughput() {
        vec![]
    } else {
        let mut rows = rt.block_on(exec_overhead(&z));
        rows.extend(rt.block_on(job_handle(&z)));
        rows.extend(python_sdk(&z));
        rows.extend(audit_rows::rows(&z));
        rows
    };
    // Device figures in a copy of this binary under the umockdev preload.
    let out = Command::new(std::env::current_exe().expect("exe"))
        .args(std::env::args().skip(1))
        .env(INNER, "1")
        .env(umockdev::INNER_MARKER, "1")
        // The client side needs the preload too: sending a uevent resolves the device
        // through libudev, which must see the testbed.
        .env("LD_PRELOAD", "libumockdev-preload.so.0")
        .env_remove("UMOCKDEV_DIR")
        .output()
        .expect("device bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    match stdout.lines().find_map(|l| l.strip_prefix("ROWS ")) {
        Some(j) => rows.extend(serde_json::from_str::<Vec<Row>>(j).expect("rows")),
        None => panic!(
            "device figures failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
    if only_throughput() {
        print(&rows);
        return;
    }
    rows.push(rt.block_on(lock_handoff(&z)));
    rows.extend(rt.block_on(console_rows::rows(&z)));
    rows.extend(rt.block_on(shell_rows::rows(&z)));
    rows.extend(rt.block_on(live_rows::rows(&z)));
    rows.extend(rt.block_on(upload_rows::rows(&z)));
    let (start, idle) = startup(&z);
    rows.push(start);
    rows.push(idle);
    rows.push(rt.block_on(sessions_rss(&z)));
    print(&rows);
}
