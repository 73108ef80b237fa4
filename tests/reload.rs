//! SIGHUP reload of the real server: a good configuration takes effect at once; a broken one
//! is refused, the log says where and why, and the old configuration stays in force.

mod harness;

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
    std::fs::read_to_string(s.path("state/audit.log"))
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
