//! One lab for agents (issue 49): two gatecmd processes on loopback, each with its own
//! state and a pty board; bench-1's agent lists the lab, leases here first then on bench-2
//! through its own host, runs a shell command and switches power on the remote board, and
//! releases it; bench-2's own client is refused while the remote agent holds it; a normal
//! client's token never acts as a peer; a peer killed mid-lease is `host_unreachable`
//! within 10 s and shown unreachable.

use crate::harness;
use crate::sim_board;

use std::time::{Duration, Instant};

use harness::{Era, Server, TOKEN_A, TOKEN_B, call, connect, is_error, script, structured, text};
use serde_json::{Value, json};
use sim_board::Start;

const PEER_TOKEN: &str = "token-of-bench-1-as-a-peer-0123";

fn board(name: &str) -> String {
    format!(
        r#"
commands:
  - name: power
    binary: $DIR/power.sh
    allowed_args:
      - pattern: "on"
      - pattern: "off"
boards:
  - name: {name}
    usb: "1-2"
    tags: {{soc: rk3588}}
    console: {{path: $DIR/ttyBOARD, baud: 115200}}
    power: {{on: {{command: power, args: "on"}}, off: {{command: power, args: "off"}}}}
"#
    )
}

fn with_board(s: Server) -> Server {
    let dir = s.dir.path().to_path_buf();
    script(
        &dir,
        "power.sh",
        &format!("echo \"$1\" >> {}/power.log", dir.display()),
    );
    sim_board::plug(
        &s.path("ttyBOARD"),
        Start::Shell,
        115200,
        Some(s.path("power.log")),
    );
    s
}

/// bench-2 (a board b2; its own client vm-c, bench-1 as a peer) and bench-1 (a board b1;
/// its agents vm-a and vm-b; bench-2 as its peer).
fn lab_of_two_agents() -> (Server, Server) {
    lab_with(&format!("  - {{name: vm-b, token: {TOKEN_B}}}\n"))
}

/// bench-2 (a board b2; its own client vm-c, bench-1 as a peer) and bench-1 (a board b1;
/// its agent vm-a; bench-2 as its peer).
fn lab() -> (Server, Server) {
    lab_with("")
}

fn lab_with(more_clients: &str) -> (Server, Server) {
    let two = format!(
        "clients:\n  - {{name: vm-c, token: {TOKEN_B}}}\n  - {{name: bench-1, token: {PEER_TOKEN}, peer: true}}\n{}",
        board("b2")
    );
    let s2 = with_board(Server::start(&two));
    let one = format!(
        "clients:\n  - {{name: vm-a, token: {TOKEN_A}}}\n{more_clients}labgrid:\n  peers:\n    - {{name: bench-2, url: \"{}\", token: {PEER_TOKEN}}}\n{}",
        s2.url,
        board("b1")
    );
    let s1 = with_board(Server::start(&one));
    (s1, s2)
}

fn refusal_reason(r: &rmcp::model::CallToolResult) -> Value {
    structured(r)["refusal"]["reason"].clone()
}

async fn console_open(c: &harness::Client) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let l = call(c, "list_boards", json!({})).await;
        if structured(&l)["boards"][0]["console"]["state"] == "open" {
            return;
        }
        assert!(Instant::now() < deadline, "the console never opened: {l:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// bench-1's agent leases b1 here, then (b1 held) bench-2/b2 there.
async fn lease_remote(a: &harness::Client) -> (String, String) {
    let here = call(
        a,
        "lock_board",
        json!({"match": {"soc": "rk3588"}, "scope": "lab"}),
    )
    .await;
    assert!(!is_error(&here), "{here:?}");
    let v = structured(&here);
    assert_eq!(
        (v["board"].as_str(), v["host"].as_str()),
        (Some("b1"), Some("local")),
        "{v}"
    );
    let there = call(
        a,
        "lock_board",
        json!({"match": {"soc": "rk3588"}, "scope": "lab", "note": "remote"}),
    )
    .await;
    assert!(!is_error(&there), "{there:?}");
    let v = structured(&there);
    assert_eq!(
        (v["board"].as_str(), v["host"].as_str()),
        (Some("bench-2/b2"), Some("bench-2")),
        "{v}"
    );
    let lease = v["lease_id"].as_str().unwrap_or_default().to_string();
    assert!(lease.starts_with("bench-2/"), "{v}");
    assert_eq!(
        v["holder"], "bench-1/vm-a",
        "the peer records HOST/CLIENT: {v}"
    );
    (
        v["lease_id"].as_str().unwrap_or_default().to_string(),
        v["board"].as_str().unwrap_or_default().to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_uses_a_board_of_another_host_through_its_own() {
    let (s1, s2) = lab();
    let a = connect(&s1.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("a");
    let c = connect(&s2.url, Some(TOKEN_B), Era::Modern)
        .await
        .expect("c");
    console_open(&c).await;

    let l = call(&a, "list_boards", json!({"scope": "lab"})).await;
    let v = structured(&l);
    let names: Vec<&str> = v["boards"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| b["name"].as_str())
        .collect();
    assert_eq!(names, ["b1", "bench-2/b2"], "{v}");
    assert_eq!(v["boards"][1]["host"], "bench-2", "{v}");
    assert_eq!(v["boards"][1]["tags"]["soc"], "rk3588", "{v}");
    assert_eq!(v["hosts"][1]["reachable"], true, "{v}");
    // Without scope nothing changes: this host's boards only.
    let l = call(&a, "list_boards", json!({})).await;
    assert_eq!(structured(&l)["boards"].as_array().map(Vec::len), Some(1));

    let (lease, b) = lease_remote(&a).await;
    // bench-2's own client sees who holds it and is refused.
    let l = call(&c, "list_boards", json!({})).await;
    assert_eq!(
        structured(&l)["boards"][0]["lock"]["holder"],
        "bench-1/vm-a",
        "{l:?}"
    );
    let r = call(&c, "lock_board", json!({"board": "b2"})).await;
    assert_eq!(refusal_reason(&r), "device_busy", "{r:?}");
    assert!(text(&r).contains("bench-1/vm-a"), "{}", text(&r));

    let r = call(
        &a,
        "board_run",
        json!({"board": b, "lease": lease, "command": "echo hello lab", "timeout_secs": 10}),
    )
    .await;
    assert!(!is_error(&r), "{r:?}");
    assert_eq!(structured(&r)["output"], "hello lab\n", "{r:?}");
    assert_eq!(structured(&r)["exit_code"], 0, "{r:?}");
    let r = call(
        &a,
        "power_board",
        json!({"board": b, "lease": lease, "action": "off"}),
    )
    .await;
    assert!(!is_error(&r), "{r:?}");
    let log = std::fs::read_to_string(s2.path("power.log")).unwrap_or_default();
    assert!(
        log.lines().any(|l| l == "off"),
        "bench-2 switched its board: {log:?}"
    );
    let r = call(&a, "console_read", json!({"board": b})).await;
    assert!(!is_error(&r), "{r:?}");
    assert!(
        structured(&r)["text"]
            .as_str()
            .is_some_and(|t| t.contains("hello lab")),
        "{r:?}"
    );

    // An unknown host is named; a bench-2 lease on another host's board is refused.
    let r = call(&a, "console_read", json!({"board": "bench-9/b1"})).await;
    assert_eq!(refusal_reason(&r), "not_found", "{r:?}");
    assert!(text(&r).contains("bench-9"), "{}", text(&r));

    let audit = crate::harness::settled_audit(s2.path("state/audit.log")).unwrap_or_default();
    assert!(
        audit.contains("bench-1/vm-a"),
        "bench-2's audit names HOST/CLIENT: {audit}"
    );
    let r = call(&a, "unlock_device", json!({"lease": lease})).await;
    assert!(!is_error(&r), "{r:?}");
    let l = call(&c, "list_boards", json!({})).await;
    assert!(
        structured(&l)["boards"][0]["lock"]["holder"].is_null(),
        "released: {l:?}"
    );
    let r = call(&c, "lock_board", json!({"board": "b2"})).await;
    assert!(!is_error(&r), "bench-2's own client has it now: {r:?}");
}

/// A stateless `tools/call` POST of `tool` with `args`, as `token` acting for `agent`, with
/// `extra` headers: what a peer host sends (`peer_link`), written out.
async fn peer_post(
    url: &str,
    token: &str,
    agent: &str,
    tool: &str,
    args: Value,
    extra: &[(&str, String)],
) -> reqwest::Response {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": tool, "arguments": args,
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {},
                  "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}}}});
    let mut req = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("authorization", format!("Bearer {token}"))
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", tool)
        .header("gatecmd-on-behalf-of", agent);
    for (k, v) in extra {
        req = req.header(*k, v);
    }
    req.body(body.to_string()).send().await.expect("http")
}

/// A POST with `Gatecmd-On-Behalf-Of` and `token`: the HTTP status.
async fn act_for(url: &str, token: &str) -> u16 {
    peer_post(url, token, "vm-a", "list_boards", json!({}), &[])
        .await
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_normal_clients_token_never_acts_as_a_peer() {
    let (_s1, s2) = lab();
    assert_eq!(act_for(&s2.url, TOKEN_B).await, 403, "vm-c is no peer");
    assert_eq!(act_for(&s2.url, PEER_TOKEN).await, 200, "bench-1 is");
    let c = connect(&s2.url, Some(TOKEN_B), Era::Modern)
        .await
        .expect("c");
    let r = call(&c, "list_boards", json!({})).await;
    assert!(!is_error(&r));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_killed_mid_lease_is_unreachable_within_ten_seconds() {
    let (s1, s2) = lab();
    let a = connect(&s1.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("a");
    let c = connect(&s2.url, Some(TOKEN_B), Era::Modern)
        .await
        .expect("c");
    console_open(&c).await;
    let (lease, b) = lease_remote(&a).await;
    let l = call(&a, "list_boards", json!({"scope": "lab"})).await;
    assert_eq!(
        structured(&l)["boards"][1]["lock"]["holder"],
        "bench-1/vm-a",
        "{l:?}"
    );
    s2.signal(nix::sys::signal::Signal::SIGKILL);
    let t = Instant::now();
    let r = call(
        &a,
        "board_run",
        json!({"board": b, "lease": lease, "command": "true"}),
    )
    .await;
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert_eq!(refusal_reason(&r), "host_unreachable", "{r:?}");
    assert!(text(&r).contains("bench-2"), "{}", text(&r));
    let r = call(
        &a,
        "power_board",
        json!({"board": b, "lease": lease, "action": "on"}),
    )
    .await;
    assert_eq!(refusal_reason(&r), "host_unreachable", "{r:?}");
    let l = call(&a, "list_boards", json!({"scope": "lab"})).await;
    let v = structured(&l);
    assert_eq!(v["hosts"][1]["host"], "bench-2", "{v}");
    assert_eq!(v["hosts"][1]["reachable"], false, "{v}");
    assert!(
        v["hosts"][1]["error"]
            .as_str()
            .is_some_and(|e| e.contains("bench-2")),
        "{v}"
    );
    assert_eq!(v["boards"][1]["name"], "bench-2/b2", "last seen: {v}");
    assert_eq!(v["boards"][1]["reachable"], false, "{v}");
    // The agent's host stays up and its own board works.
    let r = call(&a, "lock_board", json!({"board": "b1"})).await;
    assert_eq!(
        refusal_reason(&r),
        "already_held",
        "b1 is a's own lease still: {r:?}"
    );
    drop(s2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lab_wide_wait_gets_the_first_board_freed_on_any_host() {
    let (s1, s2) = lab_of_two_agents();
    let a = connect(&s1.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("a");
    let b = connect(&s1.url, Some(TOKEN_B), Era::Modern)
        .await
        .expect("b");
    let (lease, _) = lease_remote(&a).await;
    let r = call(
        &b,
        "lock_board",
        json!({"match": {"soc": "rk3588"}, "scope": "lab"}),
    )
    .await;
    assert_eq!(refusal_reason(&r), "device_busy", "{r:?}");
    assert!(
        text(&r).contains("bench-2"),
        "names every host: {}",
        text(&r)
    );
    let waiter = tokio::spawn(async move {
        let r = call(
            &b,
            "lock_board",
            json!({"match": {"soc": "rk3588"}, "scope": "lab", "wait_secs": 20}),
        )
        .await;
        (structured(&r), b)
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let r = call(&a, "unlock_device", json!({"lease": lease})).await;
    assert!(!is_error(&r), "{r:?}");
    let (v, _b) = waiter.await.expect("waiter");
    assert_eq!(v["board"], "bench-2/b2", "{v}");
    assert_eq!(v["holder"], "bench-1/vm-b", "{v}");
    drop(s2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_says_which_peers_answer_and_which_refuse_the_token() {
    let (s1, s2) = lab();
    let cfg = s1.dir.path().join("check.yaml");
    let text = format!(
        "labgrid:\n  peers:\n    - {{name: bench-2, url: \"{}\", token: {PEER_TOKEN}}}\n    - {{name: bench-x, url: \"{}\", token: not-the-token}}\n    - {{name: bench-y, url: \"http://127.0.0.1:1/mcp\", token: t}}\n",
        s2.url, s2.url
    );
    std::fs::write(&cfg, text).expect("write");
    std::fs::set_permissions(&cfg, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("chmod");
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_gatecmd"))
            .arg("check")
            .arg("--config")
            .arg(&cfg)
            .env("STATE_DIRECTORY", s1.dir.path().join("state-check"))
            .output()
            .expect("check")
    })
    .await
    .expect("join");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines().any(|l| l.starts_with("lab peer bench-2")
            && l.contains("answers")
            && l.contains("1 board(s)")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("lab peer bench-x") && l.contains("refused")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("lab peer bench-y") && l.contains("did not answer")),
        "{text}"
    );
    assert!(
        !text.contains("not-the-token") && !text.contains(PEER_TOKEN),
        "no token shown: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_stops_answering_is_unreachable_within_ten_seconds_whatever_the_calls_wait() {
    let (s1, s2) = lab();
    let a = connect(&s1.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("a");
    let c = connect(&s2.url, Some(TOKEN_B), Era::Modern)
        .await
        .expect("c");
    console_open(&c).await;
    let (lease, b) = lease_remote(&a).await;
    s2.signal(nix::sys::signal::Signal::SIGSTOP);
    let t = Instant::now();
    let r = call(
        &a,
        "board_run",
        json!({"board": b, "lease": lease, "command": "true", "timeout_secs": 60}),
    )
    .await;
    let took = t.elapsed();
    s2.signal(nix::sys::signal::Signal::SIGCONT);
    assert_eq!(refusal_reason(&r), "host_unreachable", "{r:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert!(text(&r).contains("bench-2"), "{}", text(&r));
}

/// bench-2 with a flash-enabled board b2 (no USB: the flashes here stop in `check_image`,
/// before the board is touched) and its peer client bench-1 allowed to write (the remote
/// flash's files land there), and bench-1 whose agent vm-a has its images in its own root.
fn flash_lab() -> (Server, Server) {
    let two = format!(
        "clients:\n  - {{name: vm-c, token: {TOKEN_B}}}\n  - {{name: bench-1, token: {PEER_TOKEN}, peer: true, write_roots: [$DIR]}}\n\
         file_roots: [$DIR]\nboards:\n  - name: b2\n    usb: \"1-2\"\n\
         flash:\n  enabled: true\n  boards: [b2]\n"
    );
    let s2 = Server::start(&two);
    let one = format!(
        "clients:\n  - {{name: vm-a, token: {TOKEN_A}}}\nfile_roots: [$DIR]\nlabgrid:\n  peers:\n    - {{name: bench-2, url: \"{}\", token: {PEER_TOKEN}}}\n",
        s2.url
    );
    (Server::start(&one), s2)
}

/// A zstd frame of `blocks` RLE blocks of 128 KiB of zeros, 4 bytes each: `check_image`
/// decompresses 4 MiB of it (1 << 20 blocks) for tens of seconds (as tests/server/flash_board.rs).
fn slow_zstd(blocks: usize) -> Vec<u8> {
    let mut z = vec![0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x38];
    for i in 0..blocks {
        let last = u32::from(i + 1 == blocks);
        let header = last | (1 << 1) | ((128 << 10) << 3);
        z.extend(&header.to_le_bytes()[..3]);
        z.push(0);
    }
    z
}

async fn wait_remote_job(a: &harness::Client, job: &str, secs: u64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let r = call(a, "wait_job", json!({"job": job, "timeout_secs": 2})).await;
        assert!(!is_error(&r), "{r:?}");
        let w = structured(&r);
        if w["state"] != "running" || Instant::now() > deadline {
            return w;
        }
    }
}

/// Issue 49: `flash_board` on `bench-2/b2` through bench-1. The image and bmap of bench-1's
/// root reach bench-2's staging, the flash runs there as a job named `bench-2/JOB` here,
/// `wait_job` follows it through bench-1 to its result (a bmap of another image: failed in
/// `check_image`, nothing written), and bench-2's audit names `bench-1/vm-a`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_flash_runs_as_a_job_of_the_boards_host_followed_from_the_agents() {
    let (s1, s2) = flash_lab();
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("crates/gatecmd-flash/tests/fixtures/interop.bmap");
    std::fs::copy(fixtures, s1.path("disk.bmap")).expect("bmap");
    let image: Vec<u8> = (0..(9u32 << 20) / 4).flat_map(u32::to_le_bytes).collect();
    std::fs::write(s1.path("disk.img"), &image).expect("image");
    let a = connect(&s1.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("a");
    // A board another client holds there is refused before any byte is sent.
    let c = connect(&s2.url, Some(TOKEN_B), Era::Modern)
        .await
        .expect("c");
    let r = call(&c, "lock_board", json!({"board": "b2"})).await;
    assert!(!is_error(&r), "{r:?}");
    let theirs = structured(&r)["lease_id"]
        .as_str()
        .expect("lease")
        .to_string();
    let r = call(
        &a,
        "flash_board",
        json!({"board": "bench-2/b2", "image": "disk.img"}),
    )
    .await;
    assert_eq!(refusal_reason(&r), "device_busy", "{r:?}");
    assert!(
        text(&r).contains("nothing was sent") && text(&r).contains("vm-c"),
        "{}",
        text(&r)
    );
    assert!(
        !s2.path("lab/local/vm-a/disk.img").exists(),
        "no transfer for a refused flash"
    );
    let r = call(&c, "unlock_device", json!({"lease": theirs})).await;
    assert!(!is_error(&r), "{r:?}");

    let r = call(&a, "lock_board", json!({"board": "bench-2/b2"})).await;
    assert!(!is_error(&r), "{r:?}");
    let lease = structured(&r)["lease_id"]
        .as_str()
        .expect("lease")
        .to_string();

    // A local lease for a remote board is refused with the call that gives the right one.
    let r = call(
        &a,
        "flash_board",
        json!({"board": "bench-2/b2", "image": "disk.img", "lease": "lease-1"}),
    )
    .await;
    assert_eq!(refusal_reason(&r), "invalid_request", "{r:?}");
    assert!(text(&r).contains("lock_board"), "{}", text(&r));
    // A file that is not in bench-1's roots is named, with where files go.
    let r = call(
        &a,
        "flash_board",
        json!({"board": "bench-2/b2", "image": "nope.img", "lease": lease}),
    )
    .await;
    assert_eq!(refusal_reason(&r), "not_found", "{r:?}");
    assert!(text(&r).contains("write_file"), "{}", text(&r));

    let r = call(
        &a,
        "flash_board",
        json!({"board": "bench-2/b2", "image": "disk.img", "bmap": "disk.bmap", "lease": lease, "background": true}),
    )
    .await;
    assert!(!is_error(&r), "{r:?}");
    let job = structured(&r)["job"].as_str().expect("job").to_string();
    assert!(job.starts_with("bench-2/job-"), "{job}");
    assert!(text(&r).contains(&format!("\"{job}\"")), "{}", text(&r));
    // bench-1 has no labgrid.coordinator, so its name in the lab is `local`.
    let sent = s2.path("lab/local/vm-a/disk.img");
    assert_eq!(
        std::fs::read(&sent).ok().as_deref(),
        Some(&image[..]),
        "the image reached bench-2's staging whole (9 MiB: three pieces)"
    );
    let w = wait_remote_job(&a, &job, 30).await;
    assert_eq!(w["state"], "failed", "{w}");
    assert_eq!(w["job"], job.as_str(), "{w}");
    assert_eq!(w["result"]["failure"]["step"], "check_image", "{w}");
    // The job is bench-2's: bench-1 has none of its own, and bench-2's audit names the agent.
    let r = call(
        &a,
        "wait_job",
        json!({"job": job.trim_start_matches("bench-2/")}),
    )
    .await;
    assert_eq!(refusal_reason(&r), "not_found", "{r:?}");
    let audit = crate::harness::settled_audit(s2.path("state/audit.log")).unwrap_or_default();
    assert!(
        audit
            .lines()
            .any(|l| l.contains("bench-1/vm-a") && l.contains("flash")),
        "{audit}"
    );

    // The same image again: bench-2 holds it byte for byte, so nothing is sent (its
    // stat_file and this host's read agree on the SHA-256), and the flash runs on it.
    let finalized = |audit: &str| {
        audit
            .lines()
            .filter(|l| l.contains("\"action\":\"finalize\"") && l.contains("disk.img"))
            .count()
    };
    let before = finalized(&audit);
    assert_eq!(before, 1, "{audit}");
    let r = call(
        &a,
        "flash_board",
        json!({"board": "bench-2/b2", "image": "disk.img", "bmap": "disk.bmap", "lease": lease, "background": true}),
    )
    .await;
    assert!(!is_error(&r), "{r:?}");
    let again = structured(&r)["job"].as_str().expect("job").to_string();
    let w = wait_remote_job(&a, &again, 30).await;
    assert_eq!(w["result"]["failure"]["step"], "check_image", "{w}");
    let audit = crate::harness::settled_audit(s2.path("state/audit.log")).unwrap_or_default();
    assert_eq!(finalized(&audit), before, "not sent again: {audit}");
    // A changed image of the same name and size is sent.
    let mut changed = image.clone();
    changed[0] ^= 0xff;
    std::fs::write(s1.path("disk.img"), &changed).expect("image");
    let r = call(
        &a,
        "flash_board",
        json!({"board": "bench-2/b2", "image": "disk.img", "lease": lease, "background": true}),
    )
    .await;
    assert!(!is_error(&r), "{r:?}");
    assert_eq!(
        std::fs::read(&sent).ok().as_deref(),
        Some(&changed[..]),
        "the changed image replaced the old one"
    );
}

/// Issue 49: a foreground remote flash answers with the flash's own result (here its
/// `timeout_secs` ran out in a slow `check_image`), and `cancel_job {job: "bench-2/JOB"}`
/// stops a background one there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_flash_in_the_foreground_and_one_cancelled_through_the_agents_host() {
    let (s1, _s2) = flash_lab();
    std::fs::write(s1.path("slow.img.zst"), slow_zstd(1 << 20)).expect("image");
    let a = connect(&s1.url, Some(TOKEN_A), Era::Legacy)
        .await
        .expect("a");
    let r = call(&a, "lock_board", json!({"board": "bench-2/b2"})).await;
    let lease = structured(&r)["lease_id"]
        .as_str()
        .expect("lease")
        .to_string();
    let t = Instant::now();
    let r = call(
        &a,
        "flash_board",
        json!({"board": "bench-2/b2", "image": "slow.img.zst", "lease": lease, "timeout_secs": 2}),
    )
    .await;
    let v = structured(&r);
    assert!(is_error(&r), "{r:?}");
    assert_eq!(v["state"], "timed_out", "{v}");
    assert_eq!(v["failure"]["step"], "check_image", "{v}");
    assert!(
        v["job"].as_str().is_some_and(|j| j.starts_with("bench-2/")),
        "{v}"
    );
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());

    let r = call(
        &a,
        "flash_board",
        json!({"board": "bench-2/b2", "image": "slow.img.zst", "lease": lease, "background": true}),
    )
    .await;
    let job = structured(&r)["job"].as_str().expect("job").to_string();
    let r = call(&a, "cancel_job", json!({"job": job})).await;
    assert!(!is_error(&r), "{r:?}");
    assert_eq!(structured(&r)["job"], job.as_str(), "{r:?}");
    let w = wait_remote_job(&a, &job, 10).await;
    assert_eq!(w["state"], "cancelled", "{w}");
}

const TOKEN_C: &str = "token-for-vm-c-5555555555";
const TOKEN_X: &str = "token-for-vm-x-7777777777";
const TOKEN_Y: &str = "token-for-vm-y-8888888888";

/// One agent's `lock_board` started in the background: what it got, and when.
fn queue_for(
    url: &str,
    token: &'static str,
    args: Value,
) -> tokio::task::JoinHandle<(Value, Instant)> {
    let url = url.to_string();
    tokio::spawn(async move {
        let c = connect(&url, Some(token), Era::Modern)
            .await
            .expect("agent");
        let r = call(&c, "lock_board", args).await;
        (structured(&r), Instant::now())
    })
}

async fn got(h: tokio::task::JoinHandle<(Value, Instant)>) -> (Value, Instant) {
    tokio::time::timeout(Duration::from_secs(15), h)
        .await
        .expect("served within 15 s")
        .expect("task")
}

/// Issue 49: three agents of two hosts queue for an rk3588 while both boards are held:
/// vm-a (bench-1, lab), then vm-c (bench-2, its own host's queue), then vm-b (bench-1,
/// lab). bench-2's board freed goes to vm-a, who came first, though vm-c waits on that
/// very host; freed again it goes to vm-c, ahead of vm-b in bench-2's queue; bench-1's
/// board then goes to vm-b. Each lab answer says how many were queued before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lab_queue_serves_three_agents_of_two_hosts_in_arrival_order() {
    let rk = |name: &str| {
        format!("boards:\n  - name: {name}\n    usb: \"1-2\"\n    tags: {{soc: rk3588}}\n")
    };
    let two = format!(
        "clients:\n  - {{name: vm-c, token: {TOKEN_C}}}\n  - {{name: vm-y, token: {TOKEN_Y}}}\n  - {{name: bench-1, token: {PEER_TOKEN}, peer: true}}\n{}",
        rk("b2")
    );
    let s2 = Server::start(&two);
    let one = format!(
        "clients:\n  - {{name: vm-a, token: {TOKEN_A}}}\n  - {{name: vm-b, token: {TOKEN_B}}}\n  - {{name: vm-x, token: {TOKEN_X}}}\nlabgrid:\n  peers:\n    - {{name: bench-2, url: \"{}\", token: {PEER_TOKEN}}}\n{}",
        s2.url,
        rk("b1")
    );
    let s1 = Server::start(&one);
    let x = connect(&s1.url, Some(TOKEN_X), Era::Modern)
        .await
        .expect("x");
    let y = connect(&s2.url, Some(TOKEN_Y), Era::Modern)
        .await
        .expect("y");
    let hold = |c, b: &'static str| async move {
        let r = call(c, "lock_board", json!({"board": b})).await;
        structured(&r)["lease_id"]
            .as_str()
            .expect("lease")
            .to_string()
    };
    let lx = hold(&x, "b1").await;
    let ly = hold(&y, "b2").await;

    let lab = json!({"match": {"soc": "rk3588"}, "scope": "lab", "wait_secs": 40});
    let a = queue_for(&s1.url, TOKEN_A, lab.clone());
    tokio::time::sleep(Duration::from_millis(700)).await;
    let c = queue_for(
        &s2.url,
        TOKEN_C,
        json!({"match": {"soc": "rk3588"}, "wait_secs": 40}),
    );
    tokio::time::sleep(Duration::from_millis(700)).await;
    let b = queue_for(&s1.url, TOKEN_B, lab);
    tokio::time::sleep(Duration::from_millis(700)).await;

    let r = call(&y, "unlock_device", json!({"lease": ly})).await;
    assert!(!is_error(&r), "{r:?}");
    let (va, _) = got(a).await;
    assert_eq!(
        va["board"], "bench-2/b2",
        "the first to come, from the other host: {va}"
    );
    assert_eq!(va["queued_ahead"]["bench-2"], 0, "{va}");
    assert!(
        !c.is_finished() && !b.is_finished(),
        "the others still queue"
    );

    let a_client = connect(&s1.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("a");
    let lease = va["lease_id"].as_str().expect("lease").to_string();
    let r = call(&a_client, "unlock_device", json!({"lease": lease})).await;
    assert!(!is_error(&r), "{r:?}");
    let (vc, _) = got(c).await;
    assert_eq!(vc["board"], "b2", "vm-c came before vm-b: {vc}");
    assert!(!b.is_finished(), "vm-b still queues");

    let r = call(&x, "unlock_device", json!({"lease": lx})).await;
    assert!(!is_error(&r), "{r:?}");
    let (vb, _) = got(b).await;
    assert_eq!(vb["board"], "b1", "{vb}");
    assert_eq!(vb["host"], "local", "{vb}");
    // vm-a and vm-c were queued on bench-2 before vm-b, vm-a on bench-1.
    assert_eq!(vb["queued_ahead"]["bench-2"], 2, "{vb}");
    assert_eq!(vb["queued_ahead"]["local"], 1, "{vb}");

    // Nothing left behind: b2 is vm-c's alone, b1 vm-b's.
    let l = call(&x, "list_boards", json!({"scope": "lab"})).await;
    let holders: Vec<(String, String)> = structured(&l)["boards"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|b| {
            (
                b["name"].as_str().unwrap_or_default().to_string(),
                b["lock"]["holder"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(
        holders,
        [
            ("b1".to_string(), "vm-b".to_string()),
            ("bench-2/b2".to_string(), "vm-c".to_string())
        ]
    );
    // vm-b, served on bench-1, left bench-2's queue: b2 released stays free.
    let c_client = connect(&s2.url, Some(TOKEN_C), Era::Modern)
        .await
        .expect("c");
    let lease = vc["lease_id"].as_str().expect("lease").to_string();
    let r = call(&c_client, "unlock_device", json!({"lease": lease})).await;
    assert!(!is_error(&r), "{r:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let l = call(&c_client, "list_boards", json!({})).await;
    assert!(
        structured(&l)["boards"][0]["lock"]["holder"].is_null(),
        "no waiter left behind took b2: {l:?}"
    );
}

/// Rewrites `s`'s configuration, sends SIGHUP, and returns the reload's log line.
fn reload(s: &Server, yaml: &str) -> String {
    let done = || s.log_text().matches("configuration reloaded").count();
    let before = done();
    std::fs::write(s.path("config.yaml"), yaml).expect("rewrite config");
    s.signal(nix::sys::signal::Signal::SIGHUP);
    assert!(
        harness::eventually(Duration::from_secs(10), || done() > before),
        "no reload in the log:\n{}",
        s.log_text()
    );
    s.log_text()
        .lines()
        .rfind(|l| l.contains("configuration reloaded"))
        .unwrap_or_default()
        .to_string()
}

fn lab_names(r: &rmcp::model::CallToolResult) -> Vec<String> {
    structured(r)["boards"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| b["name"].as_str().map(str::to_string))
        .collect()
}

/// Issue 49: `labgrid.peers` changes on reload (the rest of `labgrid:` waits for a
/// restart): a peer added is listed and reached at once, a peer removed is refused naming
/// the peers there are, and the reload names no restart-only key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_adds_and_removes_a_peer() {
    let two = format!(
        "clients:\n  - {{name: bench-1, token: {PEER_TOKEN}, peer: true}}\nboards:\n  - name: b2\n    usb: \"1-2\"\n"
    );
    let s2 = Server::start(&two);
    let alone = format!(
        "clients:\n  - {{name: vm-a, token: {TOKEN_A}}}\nboards:\n  - name: b1\n    usb: \"1-2\"\n"
    );
    let s1 = Server::start(&alone);
    let a = connect(&s1.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("a");
    let l = call(&a, "list_boards", json!({"scope": "lab"})).await;
    assert_eq!(lab_names(&l), ["b1"]);

    let with_peer = format!(
        "{alone}labgrid:\n  peers:\n    - {{name: bench-2, url: \"{}\", token: {PEER_TOKEN}}}\n",
        s2.url
    );
    let line = reload(&s1, &with_peer);
    assert!(!line.contains("restart"), "{line}");
    let l = call(&a, "list_boards", json!({"scope": "lab"})).await;
    assert_eq!(lab_names(&l), ["b1", "bench-2/b2"]);
    let r = call(&a, "lock_board", json!({"board": "bench-2/b2"})).await;
    assert!(!is_error(&r), "{r:?}");

    reload(&s1, &alone);
    let r = call(&a, "console_read", json!({"board": "bench-2/b2"})).await;
    assert_eq!(refusal_reason(&r), "not_found", "{r:?}");
    assert!(text(&r).contains("none are configured"), "{}", text(&r));
    let l = call(&a, "list_boards", json!({"scope": "lab"})).await;
    assert_eq!(lab_names(&l), ["b1"]);
}

/// A peer's raw `lock_board {match, wait_secs}` for `agent`, naming a lab wait `id` that
/// arrived `ago_ms` ago at its host: the answer's JSON-RPC result (as text).
fn raw_lab_wait(
    url: &str,
    agent: &'static str,
    id: &'static str,
    ago_ms: i64,
) -> tokio::task::JoinHandle<String> {
    let url = url.to_string();
    tokio::spawn(async move {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let args = json!({"match": {"soc": "rk3588"}, "wait_secs": 30});
        let extra = [
            ("gatecmd-lab-wait", id.to_string()),
            ("gatecmd-lab-arrival", (now - ago_ms).to_string()),
        ];
        let r = peer_post(&url, PEER_TOKEN, agent, "lock_board", args, &extra).await;
        r.text().await.unwrap_or_default()
    })
}

/// The JSON-RPC message of an answer body: one JSON document, or an SSE stream's last
/// `data:` line that parses.
fn answer_of(body: &str) -> Value {
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .next_back()
        .or_else(|| serde_json::from_str(body).ok())
        .unwrap_or(Value::Null)
}

/// `DELETE /lab/waits/ID` as `token` acting for `agent`: the HTTP status.
async fn withdraw_as(url: &str, token: &str, agent: &str, id: &str) -> u16 {
    let base = url.trim_end_matches("mcp");
    reqwest::Client::new()
        .delete(format!("{base}lab/waits/{id}"))
        .header("authorization", format!("Bearer {token}"))
        .header("gatecmd-on-behalf-of", agent)
        .send()
        .await
        .expect("http")
        .status()
        .as_u16()
}

/// Issue 49: a lab waiter is queued on every host by when it arrived at its own host, not
/// by when its entry reached the board's host; and its host withdraws it from a queue once
/// it is served elsewhere. On bench-2, vm-c queues first; then an entry of bench-1's
/// vm-a that arrived there 2 s earlier: the freed board goes to vm-a. A second lab waiter
/// (vm-b) is withdrawn by its own client only (`DELETE /lab/waits/ID`: vm-c's token and
/// another agent's name find nothing), and the next board freed goes to vm-c.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lab_waiters_queue_by_their_arrival_and_are_withdrawn_once_served() {
    let two = format!(
        "clients:\n  - {{name: vm-c, token: {TOKEN_C}}}\n  - {{name: vm-y, token: {TOKEN_Y}}}\n  - {{name: bench-1, token: {PEER_TOKEN}, peer: true}}\nboards:\n  - name: b2\n    usb: \"1-2\"\n    tags: {{soc: rk3588}}\n"
    );
    let s2 = Server::start(&two);
    let y = connect(&s2.url, Some(TOKEN_Y), Era::Modern)
        .await
        .expect("y");
    let r = call(&y, "lock_board", json!({"board": "b2"})).await;
    let ly = structured(&r)["lease_id"]
        .as_str()
        .expect("lease")
        .to_string();

    let c = queue_for(
        &s2.url,
        TOKEN_C,
        json!({"match": {"soc": "rk3588"}, "wait_secs": 30}),
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let a = raw_lab_wait(&s2.url, "vm-a", "wait-of-vm-a", 2000);
    let b = raw_lab_wait(&s2.url, "vm-b", "wait-of-vm-b", 1000);
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Only the peer acting for the waiter withdraws it.
    assert_eq!(
        withdraw_as(&s2.url, TOKEN_C, "vm-b", "wait-of-vm-b").await,
        403,
        "vm-c is no peer"
    );
    assert_eq!(
        withdraw_as(&s2.url, PEER_TOKEN, "vm-x", "wait-of-vm-b").await,
        404,
        "another agent's wait"
    );

    let r = call(&y, "unlock_device", json!({"lease": ly})).await;
    assert!(!is_error(&r), "{r:?}");
    let got_a = tokio::time::timeout(Duration::from_secs(15), a)
        .await
        .expect("a served")
        .expect("task");
    assert!(
        got_a.contains("bench-1/vm-a") && got_a.contains("lease_id"),
        "vm-a arrived first: {got_a}"
    );
    assert!(
        !c.is_finished(),
        "vm-c queued here first but arrived after vm-a and vm-b"
    );

    // vm-b was served elsewhere: its host withdraws it here, and the board freed next
    // goes straight to vm-c.
    assert_eq!(
        withdraw_as(&s2.url, PEER_TOKEN, "vm-b", "wait-of-vm-b").await,
        204
    );
    let got_b = tokio::time::timeout(Duration::from_secs(15), b)
        .await
        .expect("b ended")
        .expect("task");
    assert!(got_b.contains("cancelled"), "withdrawn: {got_b}");
    assert_eq!(
        withdraw_as(&s2.url, PEER_TOKEN, "vm-b", "wait-of-vm-b").await,
        404,
        "gone"
    );
    // vm-a's lease there ends by its own host's unlock_device, through the peer link.
    let lease_a = answer_of(&got_a)["result"]["structuredContent"]["lease_id"]
        .as_str()
        .expect("vm-a's lease id")
        .to_string();
    let s1 = Server::start(&format!(
        "clients:\n  - {{name: vm-a, token: {TOKEN_A}}}\nlabgrid:\n  peers:\n    - {{name: bench-2, url: \"{}\", token: {PEER_TOKEN}}}\n",
        s2.url
    ));
    let a_client = connect(&s1.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("a");
    let r = call(
        &a_client,
        "unlock_device",
        json!({"lease": format!("bench-2/{lease_a}")}),
    )
    .await;
    assert!(!is_error(&r), "{r:?}");
    let (vc, _) = got(c).await;
    assert_eq!(vc["board"], "b2", "{vc}");
}

const PEER2_TOKEN: &str = "token-of-bench-2-as-a-peer-4567";

/// `POST /lab/waits/ID/claim` as `token`: the HTTP status.
async fn claim_as(url: &str, token: &str, id: &str) -> u16 {
    let base = url.trim_end_matches("mcp");
    reqwest::Client::new()
        .post(format!("{base}lab/waits/{id}/claim"))
        .header("authorization", format!("Bearer {token}"))
        .send()
        .await
        .expect("http")
        .status()
        .as_u16()
}

/// Issue 49: a host that frees a board for a lab waiter of another host asks that host
/// first whether the waiter still wants it. bench-2 (a peer of bench-1 both ways) holds a
/// wait of bench-1's vm-a that bench-1 no longer has open: when b2 frees, bench-1 answers
/// the claim no, bench-2 ends the lease at once, the wait is answered "served elsewhere",
/// and b2 goes to bench-2's own waiter. Only a peer client may claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_board_freed_for_a_served_lab_waiter_goes_to_the_next_after_one_claim() {
    let s1 = Server::start(&format!(
        "clients:\n  - {{name: vm-a, token: {TOKEN_A}}}\n  - {{name: bench-2, token: {PEER2_TOKEN}, peer: true}}\nlabgrid:\n  peers:\n    - {{name: bench-2, url: \"http://127.0.0.1:9/mcp\", token: {PEER_TOKEN}}}\n"
    ));
    let s2 = Server::start(&format!(
        "clients:\n  - {{name: vm-c, token: {TOKEN_C}}}\n  - {{name: vm-y, token: {TOKEN_Y}}}\n  - {{name: bench-1, token: {PEER_TOKEN}, peer: true}}\nlabgrid:\n  peers:\n    - {{name: bench-1, url: \"{}\", token: {PEER2_TOKEN}}}\nboards:\n  - name: b2\n    usb: \"1-2\"\n    tags: {{soc: rk3588}}\n",
        s1.url
    ));
    assert_eq!(
        claim_as(&s1.url, TOKEN_A, "no-such-wait").await,
        403,
        "vm-a is no peer"
    );
    assert_eq!(claim_as(&s1.url, PEER2_TOKEN, "no-such-wait").await, 404);

    let y = connect(&s2.url, Some(TOKEN_Y), Era::Modern)
        .await
        .expect("y");
    let r = call(&y, "lock_board", json!({"board": "b2"})).await;
    let ly = structured(&r)["lease_id"]
        .as_str()
        .expect("lease")
        .to_string();
    let a = raw_lab_wait(&s2.url, "vm-a", "wait-bench-1-closed", 1000);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let c = queue_for(
        &s2.url,
        TOKEN_C,
        json!({"match": {"soc": "rk3588"}, "wait_secs": 30}),
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    let r = call(&y, "unlock_device", json!({"lease": ly})).await;
    assert!(!is_error(&r), "{r:?}");
    let got_a = tokio::time::timeout(Duration::from_secs(15), a)
        .await
        .expect("a answered")
        .expect("task");
    let v = answer_of(&got_a);
    assert_eq!(
        v["result"]["structuredContent"]["refusal"]["reason"], "cancelled",
        "{got_a}"
    );
    assert!(got_a.contains("served elsewhere"), "{got_a}");
    let (vc, _) = got(c).await;
    assert_eq!(vc["board"], "b2", "the next waiter: {vc}");
    let audit = crate::harness::settled_audit(s2.path("state/audit.log")).unwrap_or_default();
    // At most one lease to vm-a (taken and given back during the claim), then vm-c's.
    let b2: Vec<(String, String)> = audit
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["event"] == "lock" && v["key"] == "board:b2")
        .map(|v| {
            (
                v["client"].as_str().unwrap_or_default().to_string(),
                v["kind"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let taken_by_a = b2
        .iter()
        .filter(|(c, k)| c == "bench-1/vm-a" && k == "taken")
        .count();
    assert!(taken_by_a <= 1, "{b2:?}");
    assert_eq!(
        b2.last().map(|(c, k)| (c.as_str(), k.as_str())),
        Some(("vm-c", "taken")),
        "{b2:?}"
    );
}
