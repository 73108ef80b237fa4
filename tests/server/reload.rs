//! SIGHUP reload of the real server: a good configuration takes effect at once; a broken one
//! is refused, the log says where and why, and the old configuration stays in force. Each
//! class of setting either changes behaviour without a restart or is reported restart-only
//! (the log line and the `config_reloaded` audit record name the key).

use crate::harness;

use std::time::Duration;

use harness::*;
use nix::sys::signal::Signal;
use serde_json::{Value, json};

fn config(extra: &str) -> String {
    format!(
        r#"
clients:
  - name: vm-a
    token: {TOKEN_A}
commands:
  - name: echo
    binary: /bin/echo
    allowed_args:
      - pattern: "{{word}}"
{extra}
"#
    )
}

const DATE: &str = r#"
  - name: date
    binary: /bin/date
    allowed_args:
      - pattern: "+%Y"
"#;

/// Line 12 of the broken file: `binary: date` (relative).
const BROKEN: &str = r#"
  - name: date
    binary: date
    allowed_args:
      - pattern: "+%Y"
"#;

async fn command_names(url: &str) -> Vec<String> {
    let c = connect(url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("connect");
    let r = call(&c, "list_commands", json!({})).await;
    let _ = c.cancel().await;
    structured(&r)["commands"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|c| c["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn audit_events(s: &Server) -> Vec<Value> {
    crate::harness::settled_audit(s.path("state/audit.log"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("whole JSON line"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_applies_a_good_config_and_refuses_a_broken_one() {
    let s = Server::start(&config(""));
    let cfg = s.path("config.yaml");
    assert_eq!(command_names(&s.url).await, ["echo"]);

    // A good change: a new command appears without a restart.
    std::fs::write(&cfg, config(DATE)).expect("rewrite config");
    s.signal(Signal::SIGHUP);
    assert!(
        eventually(Duration::from_secs(10), || s
            .log_text()
            .contains("configuration reloaded")),
        "no reload in the log:\n{}",
        s.log_text()
    );
    assert_eq!(command_names(&s.url).await, ["echo", "date"]);
    let c = connect(&s.url, Some(TOKEN_A), Era::Legacy)
        .await
        .expect("connect");
    let r = call(
        &c,
        "execute_command",
        json!({"command": "date", "args": ["+%Y"]}),
    )
    .await;
    assert!(!is_error(&r), "{}", text(&r));

    // A broken change: refused, the log names file, line and field, the old config stays.
    std::fs::write(&cfg, config(BROKEN)).expect("rewrite config");
    s.signal(Signal::SIGHUP);
    assert!(
        eventually(Duration::from_secs(10), || s
            .log_text()
            .contains("reload refused")),
        "no refusal in the log:\n{}",
        s.log_text()
    );
    let log = s.log_text();
    let refusal = log
        .lines()
        .find(|l| l.contains("reload refused"))
        .expect("refusal line");
    let located = format!("{}:12:", cfg.display());
    assert!(refusal.contains(&located), "refusal not located: {refusal}");
    assert!(refusal.contains("commands[1].binary"), "{refusal}");
    assert!(refusal.contains("not an absolute path"), "{refusal}");
    assert!(refusal.contains("old one stays in force"), "{refusal}");

    // Still the good configuration: `date` is listed and runs (through the same session).
    assert_eq!(command_names(&s.url).await, ["echo", "date"]);
    let r = call(
        &c,
        "execute_command",
        json!({"command": "date", "args": ["+%Y"]}),
    )
    .await;
    assert!(!is_error(&r), "{}", text(&r));
    assert!(text(&r).contains("exit code 0"), "{}", text(&r));

    // The audit log has both reloads.
    let events = audit_events(&s);
    let kinds: Vec<&str> = events
        .iter()
        .filter_map(|e| e["event"].as_str())
        .filter(|e| e.starts_with("config_"))
        .collect();
    assert_eq!(kinds, ["config_reloaded", "config_reload_refused"]);
    let refused = events
        .iter()
        .find(|e| e["event"] == "config_reload_refused")
        .expect("refused record");
    assert!(
        refused["reason"]
            .as_str()
            .is_some_and(|r| r.contains("not an absolute path")),
        "{refused}"
    );
    let _ = c.cancel().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_hear_that_the_commands_changed() {
    #![allow(deprecated)] // resources/subscribe is the 2025-11-25 way
    let s = Server::start(&config(""));
    let (c, mut heard) = connect_recorder(&s.url, Some(TOKEN_A), Era::Legacy)
        .await
        .expect("connect");
    c.subscribe(rmcp::model::SubscribeRequestParams::new(
        "gatecmd://commands",
    ))
    .await
    .expect("subscribe");
    std::fs::write(s.path("config.yaml"), config(DATE)).expect("rewrite config");
    s.signal(Signal::SIGHUP);
    let got = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(h) = heard.recv().await {
            if matches!(&h, Heard::ResourceUpdated(u) if u == "gatecmd://commands") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(
        got,
        Ok(true),
        "no resources/updated for gatecmd://commands after SIGHUP"
    );
    assert!(command_names(&s.url).await.contains(&"date".to_string()));
}

// One test per class of setting: each either takes effect on reload (the behaviour changes
// without a restart) or is restart-only and named as such in the log and the audit record.

/// A configuration with `top` (top-level YAML) before the commands.
fn with(top: &str) -> String {
    format!(
        r#"
clients:
  - name: vm-a
    token: {TOKEN_A}
{top}
commands:
  - name: echo
    binary: /bin/echo
    allowed_args:
      - pattern: "{{word}}"
  - name: sleep
    binary: /bin/sleep
    allowed_args:
      - pattern: "{{secs}}"
"#
    )
}

/// Rewrites the configuration, sends SIGHUP and waits for the reload's log line and its
/// `config_reloaded` audit record (written just after the line: waiting for the line alone
/// raced the record on a loaded machine).
fn reload(s: &Server, yaml: &str) -> String {
    let done = || s.log_text().matches("configuration reloaded").count();
    let audited = || {
        audit_events(s)
            .iter()
            .filter(|e| e["event"] == "config_reloaded")
            .count()
    };
    let (before, audited_before) = (done(), audited());
    std::fs::write(s.path("config.yaml"), yaml).expect("rewrite config");
    s.signal(Signal::SIGHUP);
    assert!(
        eventually(Duration::from_secs(10), || done() > before),
        "no reload in the log:\n{}",
        s.log_text()
    );
    assert!(
        eventually(Duration::from_secs(10), || audited() > audited_before),
        "no config_reloaded audit record"
    );
    s.log_text()
        .lines()
        .rfind(|l| l.contains("configuration reloaded"))
        .expect("reload line")
        .to_string()
}

/// The `restart_only` keys of the last `config_reloaded` audit record.
fn last_restart_only(s: &Server) -> Vec<String> {
    let events = audit_events(s);
    let last = events
        .iter()
        .rev()
        .find(|e| e["event"] == "config_reloaded")
        .expect("config_reloaded record");
    serde_json::from_value(last["restart_only"].clone()).expect("restart_only list")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executor_limits_apply_on_reload() {
    let s = Server::start(&with("limits: {max_output_bytes: 1048576}"));
    let c = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("connect");
    let echo = json!({"command": "echo", "args": ["hello"]});
    let r = structured(&call(&c, "execute_command", echo.clone()).await);
    assert_eq!(r["stdout"], json!("hello\n"));
    assert_eq!(r["stdout_truncated"], json!(false));

    let line = reload(&s, &with("limits: {max_output_bytes: 2}"));
    assert!(!line.contains("restart"), "nothing waits: {line}");
    assert!(last_restart_only(&s).is_empty());
    let r = structured(&call(&c, "execute_command", echo).await);
    assert_eq!(r["stdout"], json!("he"), "{r}");
    assert_eq!(r["stdout_truncated"], json!(true), "{r}");
    let _ = c.cancel().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_ttls_apply_on_reload() {
    let s = Server::start(&with(""));
    let c = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("connect");
    let lock = |key: &str| json!({"key": key});
    let r = call(&c, "lock_device", lock("usb:2207:350b")).await;
    assert!(!is_error(&r), "{}", text(&r));
    assert_eq!(structured(&r)["ttl_secs"], json!(600));
    let r = call(
        &c,
        "lock_device",
        json!({"key": "usb:2207:350a", "ttl_secs": 7200}),
    )
    .await;
    assert!(is_error(&r), "over the default maximum: {}", text(&r));

    reload(
        &s,
        &with("leases: {default_ttl_secs: 30, max_ttl_secs: 7200}"),
    );
    let r = call(&c, "lock_device", lock("usb:2207:350c")).await;
    assert!(!is_error(&r), "{}", text(&r));
    assert_eq!(structured(&r)["ttl_secs"], json!(30), "new default TTL");
    let r = call(
        &c,
        "lock_device",
        json!({"key": "usb:2207:350a", "ttl_secs": 7200}),
    )
    .await;
    assert!(!is_error(&r), "new maximum: {}", text(&r));
    let _ = c.cancel().await;
}

/// The upload chunk size `list_files` advertises.
async fn chunk_size(c: &Client) -> Option<u64> {
    let r = call(c, "list_files", json!({})).await;
    structured(&r)["limits"]["max_chunk_bytes"].as_u64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_body_limit_applies_on_reload_and_list_files_follows_it() {
    let root = tempfile::tempdir().expect("root");
    let roots = format!("file_roots: [{}]", root.path().display());
    let s = Server::start(&with(&roots));
    let c = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("connect");
    assert_eq!(chunk_size(&c).await, Some(2 << 20));
    let post = |len: usize| {
        let url = s.url.clone();
        async move {
            reqwest::Client::new()
                .post(url)
                .bearer_auth(TOKEN_A)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .body(vec![b' '; len])
                .send()
                .await
                .expect("post")
        }
    };
    assert_ne!(post(300_000).await.status(), 413, "under the default limit");

    reload(
        &s,
        &with(&format!(
            "{roots}\nlimits: {{max_request_body_bytes: 200000}}\nstaging: {{max_chunk_bytes: 100000}}"
        )),
    );
    let resp = post(300_000).await;
    assert_eq!(resp.status(), 413);
    let body: Value = resp.json().await.expect("JSON body");
    assert_eq!(body["error"], json!("payload_too_large"));
    assert_eq!(body["limit_bytes"], json!(200000));
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("limits.max_request_body_bytes")),
        "{body}"
    );
    // The chunk size advertised fits the body limit in force.
    assert_eq!(chunk_size(&c).await, Some(100_000));
    let _ = c.cancel().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_idle_time_is_restart_only_and_named() {
    let s = Server::start(&with("limits: {session_idle_secs: 3600}"));
    let line = reload(&s, &with("limits: {session_idle_secs: 60}"));
    assert!(
        line.contains("restart") && line.contains("limits.session_idle_secs"),
        "{line}"
    );
    assert_eq!(last_restart_only(&s), ["limits.session_idle_secs"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_client_slots_are_resized_on_reload() {
    // A command that says when it started, so the test knows the one slot is taken.
    let tools = tempfile::tempdir().expect("tools dir");
    let started = tools.path().join("started");
    let slow = script(
        tools.path(),
        "slow",
        &format!("touch {}\nexec sleep 5", started.display()),
    );
    let yaml = |limit: u32| {
        with(&format!("limits: {{max_concurrent_per_client: {limit}}}")).replace(
            "commands:\n",
            &format!(
                "commands:\n  - name: slow\n    binary: {}\n    allowed_args:\n      - pattern: \"{{secs}}\"\n",
                slow.display()
            ),
        )
    };
    let s = Server::start(&yaml(1));
    let (a, _rx) = connect_recorder(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("a");
    let c = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("c");
    let running = start_call(
        &a,
        "execute_command",
        json!({"command": "slow", "args": ["5"]}),
    )
    .await;
    assert!(
        eventually(Duration::from_secs(10), || started.exists()),
        "the slow command never started:\n{}",
        s.log_text()
    );
    let echo = json!({"command": "echo", "args": ["hi"]});
    let r = call(&c, "execute_command", echo.clone()).await;
    assert!(
        is_error(&r) && text(&r).contains("limits.max_concurrent_per_client"),
        "{}",
        text(&r)
    );

    reload(&s, &yaml(2));
    let r = call(&c, "execute_command", echo).await;
    assert!(
        !is_error(&r),
        "a second slot while the first still runs: {}",
        text(&r)
    );
    let _ = running.await_response().await.expect("the first call ends");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_only_change_is_named_and_the_rest_applies() {
    let s = Server::start(&with(""));
    assert_eq!(command_names(&s.url).await, ["echo", "sleep"]);
    let changed = with("bind: 127.0.0.1:9333").replace(
        "commands:\n",
        &format!("commands:{}\n", DATE.trim_end_matches('\n')),
    );
    let line = reload(&s, &changed);
    assert!(line.contains("restart") && line.contains("bind"), "{line}");
    assert_eq!(last_restart_only(&s), ["bind"]);
    // Everything else applied: the new command is listed, and the server still listens
    // where it did.
    assert_eq!(command_names(&s.url).await, ["date", "echo", "sleep"]);
}
