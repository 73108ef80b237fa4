//! `run_test_plan` end to end (issue 50): the real binary, real MCP clients over loopback,
//! and a pty with a real interactive bash behind it as the board's shell (Debian's bash,
//! coloured prompt, bracketed paste); a second writer on the wire prints console lines
//! (a kernel panic, a `fail_on` line) while a step runs. The JUnit report is read back by
//! an XML parser in tests/python/test_test_plans.py.

use crate::harness;
use crate::sim_board;

use std::io::Write;
use std::time::{Duration, Instant};

use harness::{Client, Era, Server, TOKEN_A, TOKEN_B, call, connect, is_error, structured, text};
use serde_json::{Value, json};

/// The server, a bash board (and the writer beside it), client a holding the lease.
async fn bench() -> (Server, Client, String, std::fs::File) {
    let yaml = format!(
        "clients:\n  - name: vm-a\n    token: {TOKEN_A}\n  - name: vm-b\n    token: {TOKEN_B}\n\
         file_roots: [$DIR]\n\
         boards:\n  - name: sim\n    usb: \"1-2\"\n    console: {{path: $DIR/ttyBOARD, baud: 115200}}\n"
    );
    let s = Server::start(&yaml);
    let line = sim_board::plug_bash_with_line(&s.path("ttyBOARD"), 115200);
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
    (s, a, lease, line)
}

async fn plan(c: &Client, lease: &str, plan: Value) -> (Value, bool) {
    let r = call(
        c,
        "run_test_plan",
        json!({"board": "sim", "lease": lease, "plan": plan}),
    )
    .await;
    (structured(&r), is_error(&r))
}

fn verdicts(v: &Value) -> Vec<String> {
    v["steps"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|s| s["verdict"].as_str().unwrap_or("?").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Prints `text` on the board's console after `after`, from another thread.
fn print_later(line: &std::fs::File, after: Duration, text: &'static str) {
    let mut w = line.try_clone().expect("clone");
    std::thread::spawn(move || {
        std::thread::sleep(after);
        let _ = w.write_all(text.as_bytes());
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passing_plan_reports_each_step_with_junit_and_audits_under_its_job() {
    let (s, a, lease, _line) = bench().await;
    let p = json!({"name": "smoke", "steps": [
        {"name": "hello", "run": "echo hello", "expect": "^hello$"},
        {"name": "kernel", "run": "uname -s", "expect": "Linux"},
        {"name": "exit three", "run": "bash -c 'exit 3'", "expect_exit": 3},
    ]});
    let (v, err) = plan(&a, &lease, p).await;
    assert!(!err, "{v}");
    assert_eq!(v["verdict"], "pass", "{v}");
    assert_eq!(v["plan"], "smoke");
    assert_eq!(v["board"], "sim");
    assert_eq!(v["state"], "succeeded");
    assert_eq!(verdicts(&v), ["pass", "pass", "pass"], "{v}");
    assert_eq!(v["steps"][0]["output"], "hello\n", "{v}");
    assert_eq!(v["steps"][2]["exit_code"], 3, "{v}");
    assert_eq!(v["faults"], json!([]));
    let junit = v["junit"].as_str().unwrap_or_default();
    assert!(
        junit.contains(
            "<testsuite name=\"smoke\" tests=\"3\" failures=\"0\" errors=\"0\" skipped=\"0\""
        ),
        "{junit}"
    );
    let job = v["job"].as_str().unwrap_or_default().to_string();
    assert!(job.starts_with("job-"), "{v}");

    // The same plan as YAML text, and from a file beneath the roots.
    let yaml = "name: yaml\nsteps:\n  - name: one\n    run: echo one\n    expect: one\n";
    let (v, _) = plan(&a, &lease, json!(yaml)).await;
    assert_eq!(v["verdict"], "pass", "{v}");
    std::fs::write(s.path("plan.yaml"), yaml).expect("plan file");
    let r = call(
        &a,
        "run_test_plan",
        json!({"board": "sim", "lease": lease, "plan_file": s.path("plan.yaml")}),
    )
    .await;
    assert_eq!(structured(&r)["verdict"], "pass", "{}", text(&r));
    let r = call(
        &a,
        "run_test_plan",
        json!({"board": "sim", "lease": lease, "plan_file": "/etc/passwd"}),
    )
    .await;
    assert!(is_error(&r));
    assert_eq!(
        structured(&r)["refusal"]["reason"],
        "outside_roots",
        "{}",
        text(&r)
    );

    // Every record of the first run names its job: the start, each step, the verdict.
    let log = crate::harness::settled_audit(s.path("state/audit.log")).unwrap_or_default();
    let mine: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r["job"] == job.as_str())
        .collect();
    let events: Vec<&str> = mine.iter().filter_map(|r| r["event"].as_str()).collect();
    for e in [
        "job_started",
        "test_plan_started",
        "test_plan_step",
        "test_plan_ended",
        "job_ended",
    ] {
        assert!(events.contains(&e), "{e} missing from {events:?}");
    }
    assert_eq!(events.iter().filter(|e| **e == "test_plan_step").count(), 3);
    let end = mine.iter().find(|r| r["event"] == "test_plan_ended");
    assert_eq!(end.map(|r| r["verdict"].clone()), Some(json!("pass")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_steps_fail_the_plan_and_skip_the_rest_unless_they_continue() {
    let (_s, a, lease, _line) = bench().await;
    let p = json!({"name": "checks", "steps": [
        {"name": "wrong output", "run": "echo actual", "expect": "expected", "continue": true},
        {"name": "wrong exit", "run": "false"},
        {"name": "never", "run": "echo never"},
    ]});
    let (v, err) = plan(&a, &lease, p).await;
    assert!(err, "a failed plan is an error result: {v}");
    assert_eq!(v["verdict"], "fail", "{v}");
    assert_eq!(v["state"], "failed", "{v}");
    assert_eq!(verdicts(&v), ["fail", "fail", "skipped"], "{v}");
    assert_eq!(v["steps"][0]["exit_code"], 0, "{v}");
    assert_eq!(v["steps"][0]["output"], "actual\n", "{v}");
    let m0 = v["steps"][0]["message"].as_str().unwrap_or_default();
    assert!(m0.contains("does not match /expected/"), "{m0}");
    assert_eq!(v["steps"][1]["exit_code"], 1, "{v}");
    let m1 = v["steps"][1]["message"].as_str().unwrap_or_default();
    assert!(m1.contains("exit code 1, expected 0"), "{m1}");
    assert_eq!(v["steps"][2]["exit_code"], Value::Null);
    let junit = v["junit"].as_str().unwrap_or_default();
    assert!(
        junit.contains("tests=\"3\" failures=\"2\" errors=\"0\" skipped=\"1\""),
        "{junit}"
    );
    // Without continue, the first failure skips the rest.
    let p = json!({"name": "stop", "steps": [
        {"name": "wrong output", "run": "echo actual", "expect": "expected"},
        {"name": "after", "run": "true"},
    ]});
    let (v, _) = plan(&a, &lease, p).await;
    assert_eq!(verdicts(&v), ["fail", "skipped"], "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_that_times_out_is_an_error_and_the_board_runs_the_next_plan() {
    let (_s, a, lease, _line) = bench().await;
    let p = json!({"name": "slow", "steps": [
        {"name": "hang", "run": "sleep 30", "timeout_secs": 1},
        {"name": "after", "run": "true"},
    ]});
    let t = Instant::now();
    let (v, _) = plan(&a, &lease, p).await;
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
    assert_eq!(v["verdict"], "error", "{v}");
    assert_eq!(verdicts(&v), ["error", "skipped"], "{v}");
    let m = v["steps"][0]["message"].as_str().unwrap_or_default();
    assert!(m.contains("timed out after 1 s; Ctrl-C sent"), "{m}");
    assert!(
        v["junit"]
            .as_str()
            .unwrap_or_default()
            .contains("errors=\"1\""),
        "{v}"
    );
    let (v, _) = plan(
        &a,
        &lease,
        json!({"name": "again", "steps": [{"name": "ok", "run": "echo ok", "expect": "ok"}]}),
    )
    .await;
    assert_eq!(v["verdict"], "pass", "{v}");
    // The call's own timeout_secs bounds the whole run: the job is timed_out.
    let r = call(
        &a,
        "run_test_plan",
        json!({"board": "sim", "lease": lease, "timeout_secs": 2, "plan": {"name": "long", "steps": [
            {"name": "hang", "run": "sleep 30", "timeout_secs": 60}, {"name": "after", "run": "true"}]}}),
    )
    .await;
    let v = structured(&r);
    assert_eq!(v["state"], "timed_out", "{v}");
    assert_eq!(verdicts(&v), ["error", "skipped"], "{v}");
    let m = v["steps"][0]["message"].as_str().unwrap_or_default();
    assert!(m.contains("the plan's time limit ran out"), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fail_on_line_and_a_kernel_panic_on_the_console_fail_the_plan() {
    let (_s, a, lease, line) = bench().await;
    let p = json!({"name": "watch", "fail_on": ["EXT4-fs error"], "steps": [
        {"name": "quiet", "run": "echo fine"},
        {"name": "during", "run": "sleep 20", "timeout_secs": 30},
        {"name": "after", "run": "true", "continue": true},
    ]});
    print_later(
        &line,
        Duration::from_millis(1500),
        "\r\nEXT4-fs error (device mmcblk0p2): ext4_find_entry:1455: inode #2: comm ls\r\n",
    );
    let t = Instant::now();
    let (v, _) = plan(&a, &lease, p).await;
    assert_eq!(v["verdict"], "fail", "{v}");
    assert_eq!(verdicts(&v), ["pass", "fail", "skipped"], "{v}");
    assert_eq!(v["faults"][0]["kind"], "fail_on", "{v}");
    assert_eq!(v["faults"][0]["step"], "during", "{v}");
    assert!(
        v["faults"][0]["line"]
            .as_str()
            .unwrap_or_default()
            .starts_with("EXT4-fs error (device mmcblk0p2)"),
        "{v}"
    );
    // The fault stopped the step (Ctrl-C) rather than letting it run out.
    assert!(
        t.elapsed() < Duration::from_secs(12),
        "the step ran out: {:?}",
        t.elapsed()
    );

    let p = json!({"name": "panic", "steps": [
        {"name": "during", "run": "sleep 20", "timeout_secs": 30},
    ]});
    print_later(
        &line,
        Duration::from_millis(1500),
        "\r\n[   42.123456] Kernel panic - not syncing: Attempted to kill init! exitcode=0x0000000b\r\n",
    );
    let t = Instant::now();
    let (v, _) = plan(&a, &lease, p).await;
    assert!(
        t.elapsed() < Duration::from_secs(12),
        "the step ran out: {:?}",
        t.elapsed()
    );
    assert_eq!(v["verdict"], "fail", "{v}");
    assert_eq!(verdicts(&v), ["fail"], "{v}");
    assert_eq!(v["faults"][0]["kind"], "kernel_panic", "{v}");
    let junit = v["junit"].as_str().unwrap_or_default();
    assert!(
        junit.contains("kernel_panic: [   42.123456] Kernel panic"),
        "{junit}"
    );
    // A command whose own echo quotes a fault word is not a fault.
    let (v, _) = plan(
        &a,
        &lease,
        json!({"name": "quote", "steps": [{"name": "q", "run": "true Kernel panic - not syncing"}]}),
    )
    .await;
    assert_eq!(v["verdict"], "pass", "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_client_is_refused_and_a_background_plan_is_a_job() {
    let (s, a, lease, _line) = bench().await;
    let b = connect(&s.url, Some(TOKEN_B), Era::Modern)
        .await
        .expect("b");
    let p = json!({"name": "mine", "steps": [{"name": "x", "run": "echo x"}]});
    let r = call(&b, "run_test_plan", json!({"board": "sim", "plan": p})).await;
    assert!(is_error(&r), "{}", text(&r));
    let reason = structured(&r)["refusal"]["reason"].clone();
    assert!(
        reason == "lease_invalid" || reason == "device_busy",
        "{reason}: {}",
        text(&r)
    );
    // Nothing ran: no plan started on the board.
    let log = crate::harness::settled_audit(s.path("state/audit.log")).unwrap_or_default();
    assert!(!log.contains("test_plan_started"), "{log}");
    assert!(log.contains("test_plan_refused"));

    // Bad plans are refused with what to fix.
    let r = call(&a, "run_test_plan", json!({"board": "sim", "lease": lease})).await;
    assert_eq!(structured(&r)["refusal"]["reason"], "invalid_request");
    assert!(text(&r).contains("plan_file"), "{}", text(&r));
    let bad = json!({"name": "bad", "steps": [{"name": "x", "run": "ls\nreboot"}]});
    let r = call(
        &a,
        "run_test_plan",
        json!({"board": "sim", "lease": lease, "plan": bad}),
    )
    .await;
    assert_eq!(structured(&r)["refusal"]["reason"], "invalid_request");
    assert!(text(&r).contains("steps[0]"), "{}", text(&r));

    // In the background: a job id at once, a line per step in wait_job, the result at the end.
    let p = json!({"name": "bg", "steps": [
        {"name": "one", "run": "echo one"}, {"name": "two", "run": "sleep 1; echo two"}]});
    let r = call(
        &a,
        "run_test_plan",
        json!({"board": "sim", "lease": lease, "plan": p, "background": true}),
    )
    .await;
    let v = structured(&r);
    assert_eq!(v["state"], "running", "{v}");
    let job = v["job"].as_str().unwrap_or_default().to_string();
    let end = Instant::now() + Duration::from_secs(30);
    let w = loop {
        let r = call(&a, "wait_job", json!({"job": job, "timeout_secs": 5})).await;
        let w = structured(&r);
        if w["state"] != "running" {
            break w;
        }
        assert!(Instant::now() < end, "the plan did not end: {w}");
    };
    assert_eq!(w["state"], "succeeded", "{w}");
    let result = &w["result"];
    assert_eq!(result["verdict"], "pass", "{w}");
    assert_eq!(result["job"], job.as_str());
    let out = w.to_string();
    assert!(out.contains("step 2/2 two: pass"), "{out}");

    // cancel_job stops a running plan: the step is an error, the rest skipped.
    let p = json!({"name": "long", "steps": [
        {"name": "hang", "run": "sleep 30", "timeout_secs": 60}, {"name": "after", "run": "true"}]});
    let r = call(
        &a,
        "run_test_plan",
        json!({"board": "sim", "lease": lease, "plan": p, "background": true}),
    )
    .await;
    let job = structured(&r)["job"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    tokio::time::sleep(Duration::from_millis(800)).await;
    let r = call(&a, "cancel_job", json!({"job": job})).await;
    assert!(!is_error(&r), "{}", text(&r));
    let end = Instant::now() + Duration::from_secs(20);
    let w = loop {
        let r = call(&a, "wait_job", json!({"job": job, "timeout_secs": 5})).await;
        let w = structured(&r);
        if w["state"] != "running" {
            break w;
        }
        assert!(Instant::now() < end, "the plan was not cancelled: {w}");
    };
    assert_eq!(w["state"], "cancelled", "{w}");
    let result = &w["result"];
    assert_eq!(verdicts(result), ["error", "skipped"], "{w}");
}

/// A board at its login prompt (the tests' simulator: a login with a password, then a
/// shell): the first step logs in as board_run does, the plan runs; a board that answers
/// nothing makes the step an error, naming what was awaited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_logs_in_first_and_a_silent_board_is_an_error() {
    let yaml = format!(
        "clients:\n  - name: vm-a\n    token: {TOKEN_A}\n\
         boards:\n  - name: sim\n    usb: \"1-2\"\n    console: {{path: $DIR/ttyBOARD, baud: 115200, login: {{user: root, password_env: SIM_PW}}}}\n\
         \x20 - name: off\n    usb: \"1-3\"\n    console: {{path: $DIR/ttyOFF, baud: 115200}}\n"
    );
    let s = Server::start_with(&yaml, &[], &[("SIM_PW", sim_board::PASSWORD)]);
    sim_board::plug(&s.path("ttyBOARD"), sim_board::Start::Login, 115200, None);
    sim_board::plug(&s.path("ttyOFF"), sim_board::Start::Off, 115200, None);
    let a = connect(&s.url, Some(TOKEN_A), Era::Legacy)
        .await
        .expect("a");
    for board in ["sim", "off"] {
        let r = call(&a, "lock_board", json!({"board": board})).await;
        assert!(!is_error(&r), "{}", text(&r));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let l = structured(&call(&a, "list_boards", json!({})).await);
        let open = l["boards"]
            .as_array()
            .is_some_and(|b| b.iter().all(|b| b["console"]["state"] == "open"));
        if open {
            break;
        }
        assert!(Instant::now() < deadline, "the consoles never opened: {l}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let p = json!({"name": "login", "steps": [
        {"name": "hello", "run": "echo hello world", "expect": "^hello world$"},
        {"name": "status", "run": "status 42", "expect_exit": 42},
    ]});
    let r = call(&a, "run_test_plan", json!({"board": "sim", "plan": p})).await;
    let v = structured(&r);
    assert_eq!(v["verdict"], "pass", "{v}");
    assert_eq!(verdicts(&v), ["pass", "pass"], "{v}");

    let p = json!({"name": "silent", "steps": [{"name": "x", "run": "true", "timeout_secs": 2}]});
    let r = call(&a, "run_test_plan", json!({"board": "off", "plan": p})).await;
    let v = structured(&r);
    assert_eq!(v["verdict"], "error", "{v}");
    let m = v["steps"][0]["message"].as_str().unwrap_or_default();
    assert!(m.starts_with("not run: waited"), "{m}");
}
