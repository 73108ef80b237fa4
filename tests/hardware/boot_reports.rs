//! Boot reports end to end (issue 40): the real binary with a board whose console is a
//! pseudo-terminal (the test holds the master side and prints scripted boots made of RK3588
//! log lines, tests/fixtures/boots) and whose power switch is a script run by the executor;
//! real MCP clients over loopback read `boot_report`, the boots resources and their
//! notifications.

use crate::harness;

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use harness::{
    Era, Heard, Server, TOKEN_A, TOKEN_B, call, connect, connect_recorder, is_error, script,
    structured,
};
use serde_json::{Value, json};

const FIRMWARE: &str = include_str!("../fixtures/boots/firmware.log");
const KERNEL: &str = include_str!("../fixtures/boots/kernel.log");
const USERSPACE: &str = include_str!("../fixtures/boots/userspace.log");
const LOGIN: &str = include_str!("../fixtures/boots/login.log");
const PANIC: &str = include_str!("../fixtures/boots/panic.log");
const OOPS: &str = include_str!("../fixtures/boots/oops.log");
const NO_KERNEL: &str = include_str!("../fixtures/boots/no_kernel.log");
const UBOOT_PROMPT: &str = include_str!("../fixtures/boots/uboot_prompt.log");

/// The board side of a pty whose slave the server opens through `link`.
fn plug(link: &std::path::Path) -> File {
    let pty = nix::pty::openpty(None, None).expect("openpty");
    let slave =
        std::fs::read_link(format!("/proc/self/fd/{}", pty.slave.as_raw_fd())).expect("slave path");
    std::os::unix::fs::symlink(slave, link).expect("symlink");
    drop::<OwnedFd>(pty.slave);
    File::from(pty.master)
}

fn config(boots: &str) -> String {
    format!(
        r#"
clients:
  - name: vm-a
    token: {TOKEN_A}
  - name: vm-b
    token: {TOKEN_B}
commands:
  - name: power
    binary: $DIR/power.sh
    allowed_args:
      - pattern: "on"
      - pattern: "off"
boards:
  - name: b1
    usb: "1-2"
    console: {{path: $DIR/ttyBOARD, baud: 1500000}}
    power: {{on: {{command: power, args: "on"}}, off: {{command: power, args: "off"}}}}
{boots}
"#
    )
}

struct Bench {
    s: Server,
    a: harness::Client,
    lease: String,
    board: File,
    /// Bytes the board printed so far.
    printed: u64,
}

async fn bench(boots: &str) -> Bench {
    let s = Server::start(&config(boots));
    let dir = s.dir.path().to_path_buf();
    script(
        &dir,
        "power.sh",
        &format!("echo \"$1\" >> {}/power.log", dir.display()),
    );
    let board = plug(&s.path("ttyBOARD"));
    let a = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("a");
    let lease = call(&a, "lock_board", json!({"board": "b1"})).await;
    assert!(!is_error(&lease), "{lease:?}");
    let lease = structured(&lease)["lease_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let l = call(&a, "list_boards", json!({})).await;
        if structured(&l)["boards"][0]["console"]["state"] == "open" {
            break;
        }
        assert!(Instant::now() < deadline, "the console never opened: {l:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Bench {
        s,
        a,
        lease,
        board,
        printed: 0,
    }
}

impl Bench {
    /// power_board on; returns the answer.
    async fn power_on(&self) -> Value {
        let r = call(
            &self.a,
            "power_board",
            json!({"board": "b1", "action": "on", "lease": self.lease}),
        )
        .await;
        assert!(!is_error(&r), "{r:?}");
        structured(&r)
    }

    fn print(&mut self, text: &str) {
        self.board
            .write_all(text.as_bytes())
            .expect("the board prints");
        self.printed += text.len() as u64;
    }

    /// Waits until the server captured everything printed (a power-on comes after the
    /// output of the boot before it, as on a real board).
    async fn captured(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let l = structured(&call(&self.a, "list_boards", json!({})).await);
            if l["boards"][0]["console"]["end_cursor"].as_u64() >= Some(self.printed) {
                return;
            }
            assert!(Instant::now() < deadline, "the capture fell behind: {l}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The latest boot's report once `done` holds (or the last one seen at the deadline).
    async fn report_when(&self, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let r = call(&self.a, "boot_report", json!({"board": "b1"})).await;
            let v = structured(&r);
            if done(&v) || Instant::now() > deadline {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn words(v: &Value, list: &str, key: &str) -> Vec<String> {
    v[list]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|x| x[key].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn crlf(s: &str) -> String {
    s.replace('\n', "\r\n")
}

/// Every scripted boot: its stages in order, its faults, its outcome, its transcript.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_power_on_is_a_boot_report_with_stages_faults_and_outcome() {
    let mut b = bench("").await;
    let r = call(&b.a, "boot_report", json!({"board": "b1"})).await;
    assert_eq!(
        structured(&r)["refusal"]["reason"],
        "not_found",
        "no boot yet: {r:?}"
    );
    let all = ["spl", "atf", "optee", "uboot", "kernel", "init", "login"];
    type Case<'a> = (&'a str, String, &'a [&'a str], &'a [&'a str], &'a str);
    let cases: [Case; 4] = [
        (
            "normal",
            crlf(&format!("{FIRMWARE}{KERNEL}{USERSPACE}{LOGIN}")),
            &all,
            &[],
            "login",
        ),
        (
            "panic",
            crlf(&format!("{FIRMWARE}{KERNEL}{PANIC}")),
            &all[..6],
            &["kernel_panic"],
            "panic",
        ),
        (
            "no kernel",
            crlf(&format!("{FIRMWARE}{NO_KERNEL}{UBOOT_PROMPT}")),
            &all[..4],
            &["no_kernel"],
            "uboot",
        ),
        (
            "oops, then login",
            crlf(&format!("{FIRMWARE}{KERNEL}{OOPS}{USERSPACE}{LOGIN}")),
            &all,
            &["oops"],
            "login",
        ),
    ];
    let mut n = 0;
    for (name, printed, stages, faults, outcome) in cases {
        b.power_on().await;
        n += 1;
        b.print(&printed);
        let v = b
            .report_when(|v| v["outcome"] == outcome && v["transcript"] == printed.as_str())
            .await;
        assert_eq!(v["boot"], n, "{name}: {v}");
        assert_eq!(words(&v, "stages", "stage"), stages, "{name}: {v}");
        assert_eq!(words(&v, "faults", "kind"), faults, "{name}: {v}");
        assert_eq!(v["outcome"], outcome, "{name}: {v}");
        assert_eq!(
            v["transcript"],
            printed.as_str(),
            "{name}: what was printed"
        );
        assert_eq!(v["trigger"]["action"], "power_board", "{name}: {v}");
        assert_eq!(v["trigger"]["by"], "vm-a", "{name}: {v}");
        let at: Vec<u64> = v["stages"]
            .as_array()
            .expect("stages")
            .iter()
            .map(|s| s["at_ms"].as_u64().expect("at_ms"))
            .collect();
        assert!(at.windows(2).all(|w| w[0] <= w[1]), "{name}: {at:?}");
        assert!(v["started_at"].as_str().is_some_and(|s| s.ends_with('Z')));
    }

    // A reset loop: three turns that start over before login, after one power-on.
    b.power_on().await;
    let first_lines: String = KERNEL.lines().take(6).map(|l| format!("{l}\n")).collect();
    let turn = crlf(&format!("{FIRMWARE}{first_lines}"));
    for _ in 0..3 {
        b.print(&turn);
    }
    let v = b
        .report_when(|v| v["boot"] == n + 3 && v["outcome"] == "reset_loop")
        .await;
    assert_eq!(v["outcome"], "reset_loop", "the third turn: {v}");
    assert_eq!(v["resets_in_a_row"], 2, "{v}");
    assert_eq!(v["trigger"]["action"], "console", "{v}");
    let list =
        b.a.read_resource(rmcp::model::ReadResourceRequestParams::new(
            "gatecmd://boards/b1/boots",
        ))
        .await
        .expect("the list");
    let rmcp::model::ResourceContents::TextResourceContents { text, .. } = &list.contents[0] else {
        panic!("{list:?}")
    };
    let list: Value = serde_json::from_str(text).expect("json");
    let boots = list["boots"].as_array().expect("boots");
    assert_eq!(boots[0]["boot"], n + 3, "newest first: {list}");
    for old in &boots[1..3] {
        assert_eq!(words(old, "faults", "kind"), ["reset"], "{old}");
        assert_eq!(old["outcome"], "reset_loop", "{old}");
        assert_eq!(old["ended_by"], "reset", "{old}");
        assert!(
            old.get("transcript").is_none(),
            "the list has no transcripts"
        );
    }
    assert_eq!(boots[2]["trigger"]["action"], "power_board");
    // One boot by its number, with its transcript: exactly its own turn.
    let one =
        b.a.read_resource(rmcp::model::ReadResourceRequestParams::new(format!(
            "gatecmd://boards/b1/boots/{}",
            n + 2
        )))
        .await
        .expect("one boot");
    let rmcp::model::ResourceContents::TextResourceContents { text, .. } = &one.contents[0] else {
        panic!("{one:?}")
    };
    let one: Value = serde_json::from_str(text).expect("json");
    assert_eq!(one["transcript"], turn.as_str());
    drop(b.s);
}

/// Another client is refused the tool and the resources while vm-a holds the board.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_client_is_refused_the_boots_of_a_board_it_does_not_hold() {
    let mut b = bench("").await;
    b.power_on().await;
    b.print(&format!("{FIRMWARE}{KERNEL}"));
    let other = connect(&b.s.url, Some(TOKEN_B), Era::Legacy)
        .await
        .expect("b");
    let r = call(&other, "boot_report", json!({"board": "b1"})).await;
    let v = structured(&r);
    assert_eq!(v["refusal"]["reason"], "device_busy", "{v}");
    assert!(
        v["refusal"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("vm-a"),
        "{v}"
    );
    assert!(!v.to_string().contains("DDR"), "nothing of the boot: {v}");
    for uri in ["gatecmd://boards/b1/boots", "gatecmd://boards/b1/boots/1"] {
        let e = other
            .read_resource(rmcp::model::ReadResourceRequestParams::new(uri))
            .await
            .expect_err("refused");
        assert!(e.to_string().contains("vm-a"), "{uri}: {e}");
    }
    let r = call(&other, "boot_report", json!({"board": "nosuch"})).await;
    assert_eq!(structured(&r)["refusal"]["reason"], "not_found");
}

/// A subscriber of the list and of the next boot hears the new boot and its outcome
/// (`resources/subscribe`, a 2025-11-25 session).
#[allow(deprecated)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_hears_a_new_boot_and_its_outcome() {
    let mut b = bench("").await;
    let (sub, mut heard) = connect_recorder(&b.s.url, Some(TOKEN_A), Era::Legacy)
        .await
        .expect("subscriber");
    for uri in ["gatecmd://boards/b1/boots", "gatecmd://boards/b1/boots/1"] {
        sub.subscribe(rmcp::model::SubscribeRequestParams::new(uri))
            .await
            .expect("subscribe");
    }
    b.power_on().await;
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !got.iter().any(|u: &String| u.ends_with("/boots/1")) {
        match tokio::time::timeout_at(deadline, heard.recv()).await {
            Ok(Some(Heard::ResourceUpdated(u))) => got.push(u),
            Ok(Some(_)) => {}
            _ => panic!("no update for the new boot: {got:?}"),
        }
    }
    got.clear();
    b.print(&crlf(&format!("{FIRMWARE}{KERNEL}{PANIC}")));
    while !got.iter().any(|u: &String| u.ends_with("/boots/1")) {
        match tokio::time::timeout_at(deadline, heard.recv()).await {
            Ok(Some(Heard::ResourceUpdated(u))) => got.push(u),
            Ok(Some(_)) => {}
            _ => panic!("no update for the panic: {got:?}"),
        }
    }
    let v = structured(&call(&b.a, "boot_report", json!({"board": "b1"})).await);
    assert_eq!(v["outcome"], "panic", "{v}");
}

/// boot_board {to: shell} fails at once, naming the panic, when the boot it started panics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boot_board_to_shell_fails_naming_the_panic() {
    let mut b = bench("").await;
    let power_log = b.s.path("power.log");
    let a = std::sync::Arc::new(b.a);
    let call_a = a.clone();
    let lease = b.lease.clone();
    let started = Instant::now();
    let boot = tokio::spawn(async move {
        call(
            &call_a,
            "boot_board",
            json!({"board": "b1", "to": "shell", "lease": lease, "timeout_secs": 60}),
        )
        .await
    });
    // The board answers nothing to the probe; once it was switched on, it panics.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&power_log).is_ok_and(|t| t.contains("on")) {
        assert!(Instant::now() < deadline, "never switched on");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    b.board
        .write_all(crlf(&format!("{FIRMWARE}{KERNEL}{PANIC}")).as_bytes())
        .expect("print");
    let r = boot.await.expect("boot_board");
    assert!(is_error(&r), "{r:?}");
    let text = harness::text(&r);
    assert!(
        text.contains("kernel_panic") && text.contains("Unable to mount root fs"),
        "{text}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "failed at the panic, not at the timeout"
    );
    let v = structured(&r);
    assert_eq!(v["boot"]["outcome"], "panic", "{v}");
    assert_eq!(v["boot"]["trigger"]["action"], "boot_board", "{v}");
}

/// Resident memory of `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// 120 boots of 75 KiB each: the boards keeps `boots.keep` of them, each within
/// `boots.transcript_bytes`, and the server's memory stays flat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_and_twenty_boots_of_75_kib_stay_within_the_bound() {
    let mut b = bench("").await;
    let chatter: String = (0..)
        .map(|i| format!("[   10.{i:06}] some driver reports its state, line {i}\n"))
        .take_while({
            let mut len = 0;
            move |l: &String| {
                len += l.len();
                len < 75 * 1024 - FIRMWARE.len() - KERNEL.len() - USERSPACE.len() - LOGIN.len()
            }
        })
        .collect();
    let one = crlf(&format!("{FIRMWARE}{KERNEL}{chatter}{USERSPACE}{LOGIN}"));
    assert!(one.len() > 74 * 1024, "{}", one.len());
    let pid = b.s.pid();
    let mut rss_at_20 = 0;
    let t = Instant::now();
    for i in 1..=120u64 {
        b.power_on().await;
        b.print(&one);
        b.captured().await;
        if i % 20 == 0 {
            // Let the capture take it all before the next power-on.
            let v = b
                .report_when(|v| v["boot"] == i && v["outcome"] == "login")
                .await;
            assert_eq!(v["outcome"], "login", "boot {i}: {v}");
            if i == 20 {
                rss_at_20 = rss_kib(pid);
            }
        }
    }
    let took = t.elapsed();
    let rss_at_120 = rss_kib(pid);
    let v = b
        .report_when(|v| v["boot"] == 120 && v["outcome"] == "login")
        .await;
    assert_eq!(v["transcript"], one.as_str(), "the whole boot is kept");
    let list = structured(&call(&b.a, "boot_report", json!({"board": "b1", "boot": 104})).await);
    assert_eq!(
        list["refusal"]["reason"], "not_found",
        "boot 104 was dropped: {list}"
    );
    let kept = structured(&call(&b.a, "boot_report", json!({"board": "b1", "boot": 105})).await);
    assert_eq!(kept["boot"], 105, "16 kept: {kept}");
    eprintln!(
        "120 boots of {} bytes in {took:?}; RSS {rss_at_20} KiB after 20, {rss_at_120} KiB after 120",
        one.len()
    );
    assert!(
        rss_at_120 <= rss_at_20 + 4 * 1024,
        "RSS grew from {rss_at_20} KiB to {rss_at_120} KiB"
    );
}

/// The bench page's snapshot carries each board's last boot: outcome and stages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_the_last_boots_stages() {
    let mut b = bench("").await;
    b.power_on().await;
    b.print(&crlf(&format!("{FIRMWARE}{KERNEL}{USERSPACE}{LOGIN}")));
    b.report_when(|v| v["outcome"] == "login").await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let signed = http
        .post(format!("{}/signin", b.s.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("origin", b.s.base.clone())
        .body(format!("token={TOKEN_A}"))
        .send()
        .await
        .expect("sign in");
    assert_eq!(signed.status(), 303, "{signed:?}");
    let cookie = signed
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .expect("cookie")
        .to_string();
    let state: Value = http
        .get(format!("{}/state", b.s.base))
        .header("cookie", cookie)
        .send()
        .await
        .expect("state")
        .json()
        .await
        .expect("json");
    let boot = &state["boots"][0];
    assert_eq!(boot["board"], "b1", "{state}");
    assert_eq!(boot["outcome"], "login", "{boot}");
    assert_eq!(
        words(boot, "stages", "stage"),
        ["spl", "atf", "optee", "uboot", "kernel", "init", "login"]
    );
    assert!(
        boot.get("transcript").is_none(),
        "no transcript on the page"
    );
    let js = http
        .get(format!("{}/page.js", b.s.base))
        .send()
        .await
        .expect("page.js");
    if js.status() == 200 {
        assert!(js.text().await.unwrap_or_default().contains("bootText"));
    }
}
