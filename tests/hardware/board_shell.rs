//! `board_run`, `uboot_run` and `boot_board` end to end: the real binary, real MCP clients
//! over loopback, and a pseudo-terminal playing the board (tests/sim_board: a login with a
//! password, an echoing shell with a coloured prompt, U-Boot's autoboot countdown, a power
//! switch that is a real child process run by the executor).

use crate::harness;
use crate::sim_board;

use std::time::{Duration, Instant};

use harness::{Era, Server, TOKEN_A, TOKEN_B, call, connect, is_error, script, structured};
use serde_json::{Value, json};
use sim_board::Start;

fn config(extra_console: &str) -> String {
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
  - name: sim
    usb: "1-2"
    console: {{path: $DIR/ttyBOARD, baud: 115200, login: {{user: root, password_env: SIM_PW}}{extra_console}}}
    power: {{on: {{command: power, args: "on"}}, off: {{command: power, args: "off"}}}}
"#
    )
}

/// The server, the board played at `start`, client a holding the board's lease.
async fn bench(start: Start) -> (Server, harness::Client, String) {
    let s = Server::start_with(&config(""), &[], &[("SIM_PW", sim_board::PASSWORD)]);
    let dir = s.dir.path().to_path_buf();
    script(
        &dir,
        "power.sh",
        &format!("echo \"$1\" >> {}/power.log", dir.display()),
    );
    sim_board::plug(
        &s.path("ttyBOARD"),
        start,
        115200,
        Some(s.path("power.log")),
    );
    let a = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("a");
    let lease = call(&a, "lock_board", json!({"board": "sim"})).await;
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
    (s, a, lease)
}

async fn run(c: &harness::Client, lease: &str, command: &str) -> Value {
    let r = call(
        c,
        "board_run",
        json!({"board": "sim", "command": command, "lease": lease, "timeout_secs": 10}),
    )
    .await;
    structured(&r)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn board_run_logs_in_and_returns_exact_output_and_exit_codes() {
    let (s, a, lease) = bench(Start::Login).await;
    let v = run(&a, &lease, "echo hello world").await;
    assert_eq!(v["logged_in"], true, "{v}");
    assert_eq!(v["exit_code"], 0, "{v}");
    assert_eq!(v["output"], "hello world\n", "{v}");
    assert_eq!(v["truncated"], false, "{v}");

    let v = run(&a, &lease, "false").await;
    assert_eq!(
        (
            v["exit_code"].clone(),
            v["output"].clone(),
            v["logged_in"].clone()
        ),
        (json!(1), json!(""), json!(false)),
        "{v}"
    );
    let v = run(&a, &lease, "status 42").await;
    assert_eq!(v["exit_code"], 42, "{v}");
    let v = run(&a, &lease, "nosuch").await;
    assert_eq!(v["exit_code"], 127, "{v}");
    assert_eq!(v["output"], "-sh: nosuch: command not found\n", "{v}");
    // Output that holds the prompt's text is output, not the end.
    let v = run(&a, &lease, "fakeprompt").await;
    assert_eq!(v["output"], "root@sim:~# \nstill output\n", "{v}");
    assert_eq!(v["exit_code"], 0, "{v}");
    // Colours are removed like console_read's text.
    let v = run(&a, &lease, "colours").await;
    assert_eq!(v["output"], "red text\n", "{v}");
    // A command that runs a while sees the status line echoed (a cooked tty) in the
    // middle of its output: the output is still exact.
    let v = run(&a, &lease, "slow").await;
    assert_eq!(v["output"], "first\nsecond\n", "{v}");
    assert_eq!(v["exit_code"], 0, "{v}");
    // Quotes and $? reach the board's shell as typed.
    let v = run(&a, &lease, "echo 'a  b' $?").await;
    assert_eq!(v["output"], "a  b 0\n", "{v}");

    // Control characters are refused with a reason; nothing is typed.
    for bad in ["ls\nreboot", "a\tb", "x\u{3}"] {
        let r = call(
            &a,
            "board_run",
            json!({"board": "sim", "command": bad, "lease": lease}),
        )
        .await;
        let v = structured(&r);
        assert_eq!(
            v["refusal"]["reason"], "forbidden_character",
            "{bad:?}: {v}"
        );
    }

    // Another client cannot type on the board, and is told who holds it; without a
    // lease nobody can.
    let b = connect(&s.url, Some(TOKEN_B), Era::Legacy)
        .await
        .expect("b");
    let r = call(
        &b,
        "board_run",
        json!({"board": "sim", "command": "echo x"}),
    )
    .await;
    let v = structured(&r);
    assert_eq!(v["refusal"]["reason"], "device_busy", "{v}");
    assert!(
        v["refusal"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("vm-a"),
        "{v}"
    );
    let r = call(
        &a,
        "board_run",
        json!({"board": "sim", "command": "echo x"}),
    )
    .await;
    assert_eq!(
        structured(&r)["refusal"]["reason"],
        "lease_missing",
        "{r:?}"
    );

    // Two calls of the lease holder at once do not interleave: one runs, the other is
    // refused while it does.
    let (r1, r2) = tokio::join!(run(&a, &lease, "slow"), async {
        tokio::time::sleep(Duration::from_millis(150)).await;
        run(&a, &lease, "echo second-call").await
    });
    assert_eq!(r1["output"], "first\nsecond\n", "{r1}");
    assert_eq!(r2["refusal"]["reason"], "device_busy", "{r2}");

    // Audited: command line, exit code, output length and SHA-256.
    let audit = crate::harness::settled_audit(s.path("state/audit.log")).unwrap_or_default();
    let line = audit
        .lines()
        .find(|l| l.contains("\"event\":\"board_run\"") && l.contains("hello world"))
        .unwrap_or_else(|| panic!("no board_run audit line:\n{audit}"));
    assert!(
        line.contains("\"output_sha256\"") && line.contains("\"output_bytes\":12"),
        "{line}"
    );
    assert!(
        !audit.contains(sim_board::PASSWORD),
        "the password reached the audit log"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_never_ends_is_interrupted_and_the_next_call_works() {
    let (_s, a, lease) = bench(Start::Shell).await;
    let t = Instant::now();
    let r = call(
        &a,
        "board_run",
        json!({"board": "sim", "command": "hang", "lease": lease, "timeout_secs": 1}),
    )
    .await;
    assert!(is_error(&r), "{r:?}");
    let v = structured(&r);
    assert_eq!(
        (v["timed_out"].clone(), v["exit_code"].clone()),
        (json!(true), Value::Null),
        "{v}"
    );
    assert_eq!(v["output"], "hanging...\n", "{v}");
    assert!(t.elapsed() < Duration::from_secs(8), "{:?}", t.elapsed());
    let v = run(&a, &lease, "echo after").await;
    assert_eq!(
        (v["output"].clone(), v["exit_code"].clone()),
        (json!("after\n"), json!(0)),
        "{v}"
    );

    // Cancelled by the client (notifications/cancelled): Ctrl-C reaches the board, the
    // prompt comes back, and the next call works.
    let h = harness::start_call(
        &a,
        "board_run",
        json!({"board": "sim", "command": "hang", "lease": lease, "timeout_secs": 60}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    h.cancel(Some("test".into())).await.expect("cancel");
    let deadline = Instant::now() + Duration::from_secs(10);
    let v = loop {
        let v = run(&a, &lease, "echo again").await;
        if v["refusal"]["reason"] != "device_busy" || Instant::now() > deadline {
            break v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        (v["output"].clone(), v["exit_code"].clone()),
        (json!("again\n"), json!(0)),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_board_that_never_shows_a_prompt_times_out_naming_what_was_awaited() {
    let (_s, a, lease) = bench(Start::Off).await;
    let r = call(
        &a,
        "board_run",
        json!({"board": "sim", "command": "uname -a", "lease": lease, "timeout_secs": 1}),
    )
    .await;
    let v = structured(&r);
    assert_eq!(v["refusal"]["reason"], "timeout", "{v}");
    let msg = v["refusal"]["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("shell prompt") && msg.contains("login prompt"),
        "{msg}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boot_board_stops_in_uboot_runs_there_and_boots_to_a_shell() {
    let (s, a, lease) = bench(Start::Off).await;
    let boot = |to: &'static str| {
        let a = &a;
        let lease = lease.clone();
        async move {
            let r = call(
                a,
                "boot_board",
                json!({"board": "sim", "to": to, "lease": lease, "timeout_secs": 20}),
            )
            .await;
            (is_error(&r), structured(&r))
        }
    };
    let (err, v) = boot("uboot").await;
    assert!(!err, "{v}");
    assert_eq!(v["state"], "uboot", "{v}");
    assert_eq!(
        v["steps"],
        json!(["power_off", "power_on", "stop_autoboot"]),
        "{v}"
    );
    let log = std::fs::read_to_string(s.path("power.log")).unwrap_or_default();
    assert_eq!(
        log, "off\non\n",
        "the power commands ran through the executor"
    );
    // The boot log is readable from the returned cursor.
    let r = call(
        &a,
        "console_read",
        json!({"board": "sim", "cursor": v["console_cursor"]}),
    )
    .await;
    let text = structured(&r)["text"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(text.contains("Hit any key to stop autoboot"), "{text}");

    let r = call(
        &a,
        "uboot_run",
        json!({"board": "sim", "command": "version", "lease": lease}),
    )
    .await;
    let v = structured(&r);
    assert_eq!(v["output"], "U-Boot 2024.01-sim (Dec 01 2026)\n", "{v}");
    assert_eq!(v["exit_code"], 0, "{v}");
    let v = structured(
        &call(
            &a,
            "uboot_run",
            json!({"board": "sim", "command": "false", "lease": lease}),
        )
        .await,
    );
    assert_eq!(v["exit_code"], 1, "{v}");
    // board_run needs a shell, and says how to get one.
    let v = structured(
        &call(
            &a,
            "board_run",
            json!({"board": "sim", "command": "true", "lease": lease}),
        )
        .await,
    );
    assert_eq!(v["refusal"]["reason"], "wrong_state", "{v}");
    assert!(
        v["refusal"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("boot_board"),
        "{v}"
    );

    let (err, v) = boot("shell").await;
    assert!(!err, "{v}");
    assert_eq!(v["state"], "shell", "{v}");
    let v = run(&a, &lease, "echo booted").await;
    assert_eq!(
        (v["output"].clone(), v["logged_in"].clone()),
        (json!("booted\n"), json!(true)),
        "{v}"
    );
    // Already at a shell: nothing to do.
    let (_, v) = boot("shell").await;
    assert_eq!(v["steps"], json!([]), "{v}");
    // uboot_run away from U-Boot is refused.
    let v = structured(
        &call(
            &a,
            "uboot_run",
            json!({"board": "sim", "command": "version", "lease": lease}),
        )
        .await,
    );
    assert_eq!(v["refusal"]["reason"], "wrong_state", "{v}");

    // MaskROM needs power.maskrom, which this board lacks: refused, naming it.
    let (err, v) = boot("maskrom").await;
    assert!(err, "{v}");
    assert_eq!(v["refusal"]["reason"], "not_configured", "{v}");
    assert!(
        v["refusal"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("power.maskrom"),
        "{v}"
    );
    let (err, v) = boot("off").await;
    assert!(!err, "{v}");
    assert_eq!(
        (v["state"].clone(), v["steps"].clone()),
        (json!("off"), json!(["power_off"])),
        "{v}"
    );
}

/// The bench page's console view: a signed-in viewer reads the board's console as text
/// (ANSI removed) and follows it from a cursor; nobody without a session reads anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_a_board_console_to_signed_in_viewers_only() {
    let (s, a, lease) = bench(Start::Shell).await;
    let v = run(&a, &lease, "colours").await;
    assert_eq!(v["exit_code"], 0, "{v}");
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let get = |path: String, cookie: Option<String>| {
        let mut r = http.get(format!("{}{path}", s.base));
        if let Some(c) = cookie {
            r = r.header("cookie", c);
        }
        r.send()
    };
    let r = get("/console?board=sim".into(), None).await.expect("GET");
    assert_eq!(r.status(), 401, "no session, no console");
    let r = http
        .post(format!("{}/signin", s.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("origin", s.base.clone())
        .body(format!("token={TOKEN_B}"))
        .send()
        .await
        .expect("sign in");
    assert_eq!(r.status(), 303);
    let cookie = r.headers()["set-cookie"]
        .to_str()
        .expect("ascii")
        .split(';')
        .next()
        .expect("cookie")
        .to_string();
    let r = get("/console?board=sim".into(), Some(cookie.clone()))
        .await
        .expect("GET");
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.expect("json");
    let text = v["text"].as_str().unwrap_or_default();
    assert!(text.contains("red text") && !text.contains('\x1b'), "{v}");
    assert!(
        text.contains("root@sim:~# colours"),
        "the echo as the board printed it: {v}"
    );
    let next = v["next_cursor"].as_u64().expect("next_cursor");
    // From the cursor on: only what came after.
    run(&a, &lease, "echo later").await;
    let v: Value = get(
        format!("/console?board=sim&cursor={next}"),
        Some(cookie.clone()),
    )
    .await
    .expect("GET")
    .json()
    .await
    .expect("json");
    let text = v["text"].as_str().unwrap_or_default();
    assert!(text.contains("later") && !text.contains("red text"), "{v}");
    let r = get("/console?board=nope".into(), Some(cookie))
        .await
        .expect("GET");
    assert_eq!(r.status(), 404);
    // The page itself carries the view and no external asset.
    let js = get("/page.js".into(), None)
        .await
        .expect("GET")
        .text()
        .await
        .expect("text");
    assert!(
        js.contains("/console?board="),
        "page.js fetches the console view"
    );
    assert!(
        !js.contains("http://") && !js.contains("https://"),
        "no external assets"
    );
}

/// Issue 29: an ordinary interactive bash (Debian's coloured prompt with its window title,
/// bracketed paste on, readline, a pty at 115200) prints the marker line and its next
/// prompt in one read. Each call must end when that prompt is seen, not after the 5 s
/// settle limit (`PROMPT_AFTER_INTERRUPT`) that a missed prompt runs into: 5,008 ms a call
/// before the fix. The output and status stay exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interactive_bash_board_answers_without_waiting_out_the_settle_limit() {
    let yaml = format!(
        r#"
clients:
  - name: vm-a
    token: {TOKEN_A}
boards:
  - name: sim
    usb: "1-2"
    console: {{path: $DIR/ttyBOARD, baud: 115200}}
"#
    );
    let s = Server::start(&yaml);
    sim_board::plug_bash(&s.path("ttyBOARD"), 115200);
    let a = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("a");
    let lease = call(&a, "lock_board", json!({"board": "sim"})).await;
    assert!(!is_error(&lease), "{lease:?}");
    let lease = structured(&lease)["lease_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    while structured(&call(&a, "list_boards", json!({})).await)["boards"][0]["console"]["state"]
        != "open"
    {
        assert!(Instant::now() < deadline, "the console never opened");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut slowest = Duration::ZERO;
    for (command, output, status) in [
        ("echo hi", "hi\n", 0),
        ("echo hi", "hi\n", 0),
        ("printf 'a\\nb\\n'; false", "a\nb\n", 1),
        ("echo hi", "hi\n", 0),
    ] {
        let t0 = Instant::now();
        let v = run(&a, &lease, command).await;
        slowest = slowest.max(t0.elapsed());
        assert_eq!(
            (v["output"].as_str(), v["exit_code"].as_i64()),
            (Some(output), Some(status)),
            "{command}: {v}"
        );
    }
    assert!(
        slowest < Duration::from_secs(3),
        "a call waited {slowest:?}: the prompt after the marker was missed and the 5 s settle limit ran out"
    );
}
