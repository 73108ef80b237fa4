//! The audit log of the real server: every completed decision is on disk, one whole JSON
//! line each, even when the server is SIGKILLed in the middle of a run.

use crate::harness;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use harness::*;
use nix::sys::signal::Signal;
use serde_json::{Value, json};

fn config() -> String {
    format!(
        r#"
clients:
  - name: vm-a
    token: {TOKEN_A}
limits:
  kill_grace_secs: 1
commands:
  - name: echo
    binary: /bin/echo
    allowed_args:
      - pattern: "{{word}}"
  - name: fail
    binary: /bin/false
    allowed_args:
      - pattern: ""
  - name: sleeper
    binary: /bin/sleep
    allowed_args:
      - pattern: "{{secs}}"
    params:
      secs: "[0-9]+"
"#
    )
}

fn read_log(s: &Server) -> (String, Vec<Value>) {
    let raw = crate::harness::settled_audit(s.path("state/audit.log")).expect("audit.log exists");
    let lines = raw
        .lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not a whole JSON line ({e}): {l}"))
        })
        .collect();
    (raw, lines)
}

fn find<'a>(events: &'a [Value], event: &str, pred: impl Fn(&Value) -> bool) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["event"] == event && pred(e))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_completed_decision_survives_a_sigkill() {
    let mut s = Server::start(&config());
    let c = connect(&s.url, Some(TOKEN_A), Era::Legacy)
        .await
        .expect("connect");

    // Completed decisions of every kind.
    let ok = call(
        &c,
        "execute_command",
        json!({"command": "echo", "args": ["hi"]}),
    )
    .await;
    assert!(!is_error(&ok), "{}", text(&ok));
    let refused = call(
        &c,
        "execute_command",
        json!({"command": "echo", "args": ["a;b"]}),
    )
    .await;
    assert!(is_error(&refused));
    let unknown = call(
        &c,
        "execute_command",
        json!({"command": "rm", "args": ["-rf", "/"]}),
    )
    .await;
    assert!(is_error(&unknown));
    let failed = call(&c, "execute_command", json!({"command": "fail"})).await;
    assert!(is_error(&failed));
    let timed = call(
        &c,
        "execute_command",
        json!({"command": "sleeper", "args": ["30"], "timeout_secs": 1}),
    )
    .await;
    assert_eq!(
        structured(&timed)["timed_out"],
        json!(true),
        "{}",
        text(&timed)
    );
    let dry = call(
        &c,
        "execute_command",
        json!({"command": "echo", "args": ["x"], "dry_run": true}),
    )
    .await;
    assert!(!is_error(&dry));

    // A lease: taken and released, both recorded as lock events.
    let lease = call(
        &c,
        "lock_device",
        json!({"key": "usb:2207:350b", "note": "audit test"}),
    )
    .await;
    assert!(!is_error(&lease), "{}", text(&lease));
    let lease_id = structured(&lease)["lease_id"].clone();
    let unlock = call(&c, "unlock_device", json!({"lease": lease_id})).await;
    assert!(!is_error(&unlock), "{}", text(&unlock));

    // A long command is running when the server dies.
    let client = c.clone();
    let running = tokio::spawn(async move {
        let _ = client
            .call_tool(
                rmcp::model::CallToolRequestParams::new("execute_command").with_arguments(
                    json!({"command": "sleeper", "args": ["20"]})
                        .as_object()
                        .cloned()
                        .unwrap_or_default(),
                ),
            )
            .await;
    });
    assert!(
        eventually(Duration::from_secs(10), || std::fs::read_to_string(
            s.path("state/audit.log")
        )
        .is_ok_and(|t| t.contains("\"20\""))),
        "the long run was never recorded as started"
    );
    // (The orphaned `sleep 20` ends by itself: a SIGKILLed server cannot stop its children;
    // under systemd, KillMode=control-group does.)
    s.signal(Signal::SIGKILL);
    assert!(
        s.wait(Duration::from_secs(5)).is_some(),
        "server survived SIGKILL"
    );
    running.abort();

    let (raw, events) = read_log(&s);
    assert!(raw.ends_with('\n'), "last line cut: {raw}");
    let mode = std::fs::metadata(s.path("state/audit.log"))
        .expect("meta")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "audit.log must be owner-only");
    for e in &events {
        assert!(e["ts"].is_string(), "no ts: {e}");
    }
    assert_eq!(find(&events, "server_started", |_| true).len(), 1);

    // Allowed and finished, with its outcome.
    let echo = find(&events, "execute_finished", |e| e["command"] == "echo");
    assert_eq!(echo.len(), 1, "{raw}");
    assert_eq!(echo[0]["client"], "vm-a");
    assert_eq!(echo[0]["outcome"], "exited");
    assert_eq!(echo[0]["exit_code"], 0);
    assert_eq!(echo[0]["argv"], json!(["/bin/echo", "hi"]));
    assert_eq!(echo[0]["stdout_bytes"], 3);
    assert!(echo[0]["duration_ms"].is_u64());
    assert!(
        echo[0]["session"].is_string(),
        "legacy session id recorded: {}",
        echo[0]
    );
    let started = find(&events, "execute_started", |e| {
        e["run_id"] == echo[0]["run_id"]
    });
    assert_eq!(started.len(), 1, "started and finished share run_id");

    // Refusals, with the reason and the arguments as sent.
    let bad = find(&events, "execute_refused", |e| e["command"] == "echo");
    assert_eq!(bad.len(), 1, "{raw}");
    assert_eq!(bad[0]["args"], json!(["a;b"]));
    assert!(
        bad[0]["reason"].as_str().is_some_and(|r| r.contains(';')),
        "{}",
        bad[0]
    );
    let rm = find(&events, "execute_refused", |e| e["command"] == "rm");
    assert_eq!(rm.len(), 1, "{raw}");
    assert!(
        rm[0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("unknown command"))
    );

    // A non-zero exit and a timeout.
    let fail = find(&events, "execute_finished", |e| e["command"] == "fail");
    assert_eq!(fail[0]["exit_code"], 1);
    let timeout = find(&events, "execute_finished", |e| {
        e["args"].is_null() && e["timed_out"] == true
    });
    assert_eq!(timeout.len(), 1, "{raw}");
    assert_eq!(timeout[0]["outcome"], "timed_out");
    assert_eq!(timeout[0]["exit_code"], Value::Null);
    assert_eq!(find(&events, "execute_dry_run", |_| true).len(), 1);

    // Lease events from the lock manager's stream (written by a task; awaited above).
    let lock_kinds: Vec<&str> = find(&events, "lock", |e| e["key"] == "usb:2207:350b")
        .iter()
        .filter_map(|e| e["kind"].as_str())
        .collect();
    assert_eq!(lock_kinds, ["taken", "released"], "{raw}");
    let taken = find(&events, "lock", |e| e["kind"] == "taken");
    assert_eq!(taken[0]["client"], "vm-a");
    assert_eq!(taken[0]["lease_id"], lease_id);

    // The run in progress at the kill: started, never finished.
    let long = find(&events, "execute_started", |e| {
        e["argv"] == json!(["/bin/sleep", "20"])
    });
    assert_eq!(long.len(), 1, "{raw}");
    assert!(
        find(&events, "execute_finished", |e| e["run_id"]
            == long[0]["run_id"])
        .is_empty()
    );
}
