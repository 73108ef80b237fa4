//! The MCP tasks extension (SEP-2663, 2026-07-28) over raw HTTP (issue 23): a client that
//! declares it gets a task for a long `execute_command`, whose id is the job's;
//! `tasks/get` follows it to the foreground result, `tasks/cancel` stops it, another
//! client cannot read it, and a quick command stays a plain answer.

use crate::harness;

use std::time::{Duration, Instant};

use harness::*;
use serde_json::json;

fn config() -> String {
    format!(
        r#"
clients:
  - name: vm-a
    token: {TOKEN_A}
  - name: vm-b
    token: {TOKEN_B}
limits:
  kill_grace_secs: 1
commands:
  - name: flash
    binary: {rk}
    destructive: true
    progress: "\\((\\d+)%\\)"
    env: {{FAKE_RK_STEPS: "10", FAKE_RK_DELAY: "0.1"}}
    allowed_args:
      - pattern: wl
  - name: slow
    binary: /bin/sleep
    destructive: true
    allowed_args:
      - pattern: "30"
  - name: echo
    binary: /bin/echo
    allowed_args:
      - pattern: hi
"#,
        rk = fake_rk()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_is_a_job_followed_with_tasks_get() {
    let s = Server::start(&config());
    let created = task_rpc(
        &s,
        TOKEN_A,
        "tools/call",
        json!({"name": "execute_command", "arguments": {"command": "flash", "args": ["wl"]}}),
    )
    .await;
    let r = &created["result"];
    assert_eq!(r["resultType"], "task", "{created}");
    let id = r["taskId"].as_str().expect("taskId").to_string();
    assert!(id.starts_with("job-"), "{created}");
    assert_eq!(r["status"], "working");
    // Another client: not its task.
    let other = task_rpc(&s, TOKEN_B, "tasks/get", json!({"taskId": id})).await;
    assert!(other.get("error").is_some(), "{other}");
    let started = Instant::now();
    let done = loop {
        let g = task_rpc(&s, TOKEN_A, "tasks/get", json!({"taskId": id})).await;
        let status = g["result"]["status"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if status != "working" {
            break g;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "never finished: {g}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(done["result"]["status"], "completed", "{done}");
    let result = &done["result"]["result"];
    assert_eq!(result["structuredContent"]["exit_code"], 0, "{done}");
    assert_ne!(result["isError"], true, "{done}");
    // The job tools see the same id.
    let c = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("connect");
    let w = call(&c, "wait_job", json!({"job": id, "timeout_secs": 0})).await;
    assert_eq!(structured(&w)["origin"], "task", "{}", text(&w));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_cancel_stops_the_job_and_a_quick_command_is_no_task() {
    let s = Server::start(&config());
    let created = task_rpc(
        &s,
        TOKEN_A,
        "tools/call",
        json!({"name": "execute_command", "arguments": {"command": "slow", "args": ["30"]}}),
    )
    .await;
    let id = created["result"]["taskId"]
        .as_str()
        .expect("taskId")
        .to_string();
    let c = task_rpc(&s, TOKEN_A, "tasks/cancel", json!({"taskId": id})).await;
    assert!(c.get("error").is_none(), "{c}");
    let started = Instant::now();
    loop {
        let g = task_rpc(&s, TOKEN_A, "tasks/get", json!({"taskId": id})).await;
        if g["result"]["status"] == "cancelled" {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "not cancelled: {g}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // `echo` is `cancel: kill` (not destructive): answered at once, no task.
    let quick = task_rpc(
        &s,
        TOKEN_A,
        "tools/call",
        json!({"name": "execute_command", "arguments": {"command": "echo", "args": ["hi"]}}),
    )
    .await;
    assert_ne!(quick["result"]["resultType"], "task", "{quick}");
    assert_eq!(
        quick["result"]["structuredContent"]["stdout"], "hi\n",
        "{quick}"
    );
}
