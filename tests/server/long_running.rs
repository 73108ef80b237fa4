//! Long-running commands over MCP: progress, cancellation, `cancel: never`, timeouts.

use crate::harness;

use std::time::{Duration, Instant};

use harness::*;
use rmcp::model::{CallToolResult, ServerResult};
use serde_json::json;

/// The config with `extra_env`'s lines (`      KEY: "value"`) added to the flash command's
/// environment, replacing a default of the same key (a YAML mapping holds a key once).
fn config(extra_env: &str) -> String {
    let overridden: Vec<&str> = extra_env
        .lines()
        .filter_map(|l| l.trim().split_once(':').map(|(k, _)| k))
        .collect();
    let defaults: String = [
        "      FAKE_RK_STEPS: \"10\"",
        "      FAKE_RK_DELAY: \"0.15\"",
        "      FAKE_RK_MARKER: $DIR/flash.done",
        "      FAKE_RK_CHILD: $DIR/grandchild.pid",
    ]
    .iter()
    .filter(|l| {
        !overridden
            .iter()
            .any(|k| l.trim().starts_with(&format!("{k}:")))
    })
    .map(|l| format!("{l}\n"))
    .collect();
    format!(
        r#"
clients:
  - name: vm-a
    token: {TOKEN_A}
limits:
  kill_grace_secs: 1
commands:
  - name: flash
    binary: {rk}
    progress: "\\((\\d+)%\\)"
    env:
{defaults}{extra_env}
    allowed_args:
      - pattern: wl {{lba}}
      - pattern: db {{lba}}
        cancel: never
      - pattern: slow {{lba}}
        timeout_secs: 1
    params:
      lba: "[0-9]+"
  - name: sleeper
    binary: /bin/sleep
    allowed_args:
      - pattern: "{{secs}}"
"#,
        rk = fake_rk()
    )
}

fn result(r: ServerResult) -> CallToolResult {
    match r {
        ServerResult::CallToolResult(r) => r,
        other => panic!("unexpected response {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_follows_the_tools_output_then_the_result() {
    let s = Server::start(&config(""));
    for era in ERAS {
        let (c, mut heard) = connect_recorder(&s.url, Some(TOKEN_A), era)
            .await
            .expect("connect");
        let h = start_call(
            &c,
            "execute_command",
            json!({"command": "flash", "args": ["wl", "0"]}),
        )
        .await;
        let token = h.progress_token.clone();
        let r = result(h.await_response().await.expect("response"));
        assert!(!is_error(&r), "{}", text(&r));
        // The rkdeveloptool byte format collapses to its final lines.
        assert_eq!(
            structured(&r)["stdout"],
            json!("Write LBA from file (100%)\nWrite LBA from file OK.\n")
        );
        let mut seen = Vec::new();
        // The client dispatches notifications on its own tasks: the last may land just after
        // the response, so drain until 100% or a short quiet period.
        while let Ok(Some(Heard::Progress(p))) =
            tokio::time::timeout(Duration::from_millis(500), heard.recv()).await
        {
            assert_eq!(p.progress_token, token);
            assert_eq!(p.total, Some(100.0));
            assert!(
                p.message
                    .as_deref()
                    .is_some_and(|m| m.starts_with("Write LBA from file (")),
                "{p:?}"
            );
            seen.push(p.progress);
            if p.progress >= 100.0 {
                break;
            }
        }
        assert!(seen.len() >= 5, "{era:?}: only {seen:?}");
        assert!(
            seen.windows(2).all(|w| w[0] < w[1]),
            "not increasing: {seen:?}"
        );
        assert_eq!(seen.last(), Some(&100.0), "{seen:?}");
        std::fs::remove_file(s.path("flash.done")).expect("the tool completed");
        c.cancel().await.expect("close");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_kills_the_process_group_in_both_eras() {
    let s = Server::start(&config(
        "      FAKE_RK_IGNORE_TERM: \"1\"\n      FAKE_RK_STEPS: \"400\"",
    ));
    for era in ERAS {
        let pidfile = s.path("grandchild.pid");
        let _ = std::fs::remove_file(&pidfile);
        let (c, _heard) = connect_recorder(&s.url, Some(TOKEN_A), era)
            .await
            .expect("connect");
        let h = start_call(
            &c,
            "execute_command",
            json!({"command": "flash", "args": ["wl", "0"]}),
        )
        .await;
        let mut pid = None;
        assert!(
            eventually(Duration::from_secs(5), || {
                pid = read_pid_file(&pidfile);
                pid.is_some()
            }),
            "{era:?}: tool did not start"
        );
        let gc = pid.expect("num");
        let cancelled = Instant::now();
        h.cancel(Some("test".into())).await.expect("cancel");
        // Grace 1 s (the tool ignores SIGTERM) plus a margin.
        assert!(
            eventually(Duration::from_millis(2500), || process_gone(gc)),
            "{era:?}: grandchild {gc} still alive {:?} after cancel",
            cancelled.elapsed()
        );
        assert!(
            !s.path("flash.done").exists(),
            "{era:?}: the cancelled write completed"
        );
        assert!(
            eventually(Duration::from_secs(2), || s
                .log_text()
                .contains("cancelled=true")),
            "{}",
            s.log_text()
        );
        c.cancel().await.expect("close");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_never_runs_to_completion() {
    let s = Server::start(&config(""));
    let (c, _heard) = connect_recorder(&s.url, Some(TOKEN_A), Era::Legacy)
        .await
        .expect("connect");
    let h = start_call(
        &c,
        "execute_command",
        json!({"command": "flash", "args": ["db", "0"]}),
    )
    .await;
    assert!(eventually(Duration::from_secs(5), || s
        .path("grandchild.pid")
        .exists()));
    h.cancel(Some("test".into())).await.expect("cancel");
    assert!(
        eventually(Duration::from_secs(5), || s.path("flash.done").exists()),
        "cancel: never was stopped"
    );
    assert!(s.log_text().contains("cancel refused"), "{}", s.log_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_returns_partial_output_and_reason() {
    let s = Server::start(&config("      FAKE_RK_STEPS: \"100\""));
    let c = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("connect");
    let started = Instant::now();
    let r = call(
        &c,
        "execute_command",
        json!({"command": "flash", "args": ["slow", "0"]}),
    )
    .await;
    assert!(is_error(&r));
    let v = structured(&r);
    assert_eq!(v["timed_out"], json!(true));
    assert!(v["exit_code"].is_null());
    let out = v["stdout"].as_str().unwrap_or_default();
    assert!(
        out.starts_with("Write LBA from file ("),
        "partial output: {out:?}"
    );
    assert!(!out.contains("OK."));
    assert!(
        v["stop_reason"]
            .as_str()
            .unwrap_or_default()
            .starts_with("timed out after 1 s"),
        "{v}"
    );
    assert!(text(&r).contains("timed out after 1 s"));
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_progress_without_a_regex() {
    let s = Server::start(&config(""));
    let (c, mut heard) = connect_recorder(&s.url, Some(TOKEN_A), Era::Legacy)
        .await
        .expect("connect");
    let h = start_call(
        &c,
        "execute_command",
        json!({"command": "sleeper", "args": ["6"]}),
    )
    .await;
    let r = result(h.await_response().await.expect("response"));
    assert!(!is_error(&r));
    let mut beats = Vec::new();
    while let Ok(Heard::Progress(p)) = heard.try_recv() {
        beats.push((p.progress, p.total, p.message));
    }
    assert_eq!(beats.len(), 1, "{beats:?}");
    assert_eq!(beats[0].0, 5.0);
    assert_eq!(beats[0].1, None);
    assert_eq!(beats[0].2.as_deref(), Some("running for 5 s"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_the_server_and_its_children() {
    let mut s = Server::start(&config(
        "      FAKE_RK_IGNORE_TERM: \"1\"\n      FAKE_RK_STEPS: \"400\"",
    ));
    let (c, _heard) = connect_recorder(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("connect");
    let _h = start_call(
        &c,
        "execute_command",
        json!({"command": "flash", "args": ["wl", "0"]}),
    )
    .await;
    let pidfile = s.path("grandchild.pid");
    let mut pid = None;
    assert!(
        eventually(Duration::from_secs(5), || {
            pid = read_pid_file(&pidfile);
            pid.is_some()
        }),
        "the fake tool never wrote a complete grandchild.pid"
    );
    let gc = pid.expect("num");
    s.signal(nix::sys::signal::Signal::SIGTERM);
    let status = s
        .wait(Duration::from_secs(10))
        .expect("server exits after SIGTERM");
    assert!(status.success(), "{status:?}\n{}", s.log_text());
    assert!(
        eventually(Duration::from_secs(2), || process_gone(gc)),
        "grandchild {gc} outlived the server"
    );
    assert!(!s.path("flash.done").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_cannot_run_more_than_its_share_at_once() {
    let yaml = config("").replace("limits:\n", "limits:\n  max_concurrent_per_client: 1\n");
    let s = Server::start(&yaml);
    let (a, _rx) = connect_recorder(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("a");
    let c = connect(&s.url, Some(TOKEN_A), Era::Legacy)
        .await
        .expect("c");
    let first = start_call(
        &a,
        "execute_command",
        json!({"command": "sleeper", "args": ["2"]}),
    )
    .await;
    // The server logs a command as allowed once it holds the client's slot, just before the
    // spawn: from then on the client's only slot is taken.
    s.wait_for_log(
        "the first sleeper as allowed",
        Duration::from_secs(10),
        |l| l.contains(r#"argv=["/bin/sleep", "2"]"#) && l.contains("verdict=\"allowed\""),
    )
    .await;
    let r = call(
        &c,
        "execute_command",
        json!({"command": "sleeper", "args": ["0"]}),
    )
    .await;
    assert!(is_error(&r));
    assert!(
        text(&r).contains(
            "client \"vm-a\" already runs 1 commands at once (limits.max_concurrent_per_client)"
        ),
        "{}",
        text(&r)
    );
    let r = result(first.await_response().await.expect("first"));
    assert!(!is_error(&r));
    let r = call(
        &c,
        "execute_command",
        json!({"command": "sleeper", "args": ["0"]}),
    )
    .await;
    assert!(!is_error(&r), "the slot is free again: {}", text(&r));
}
