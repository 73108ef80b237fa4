//! `GET /metrics` through the real binary over real HTTP: access (token, `metrics.clients`,
//! the loopback `metrics.bind`, `--no-auth`), both formats, `promtool check metrics` on the
//! classic body, and counters that move as commands run, are refused, wait for locks, and
//! as boards are plugged and unplugged (umockdev).

#[cfg(feature = "udev")]
use crate::common;
use crate::harness;

use std::time::Duration;

use harness::*;
use serde_json::json;

const TOKEN_OPS: &str = "token-for-ops-5555555555";

fn config() -> String {
    format!(
        r#"
clients:
  - name: vm-a
    token: {TOKEN_A}
  - name: vm-b
    token: {TOKEN_B}
  - name: ops
    token: {TOKEN_OPS}
metrics:
  clients: [ops, vm-a]
commands:
  - name: ok
    binary: /bin/true
    allowed_args:
      - pattern: ""
  - name: fail
    binary: /bin/false
    allowed_args:
      - pattern: ""
  - name: echo
    binary: /bin/echo
    allowed_args:
      - pattern: "{{word}}"
  - name: slow
    binary: /bin/sleep
    timeout_secs: 1
    allowed_args:
      - pattern: "30"
"#
    )
}

/// `GET path` on `base` with `token` and `accept`; status, content type and body.
async fn get(
    base: &str,
    path: &str,
    token: Option<&str>,
    accept: Option<&str>,
) -> (u16, String, String) {
    let mut req = reqwest::Client::new().get(format!("{base}{path}"));
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    if let Some(a) = accept {
        req = req.header("accept", a);
    }
    let resp = req.send().await.expect("GET");
    let status = resp.status().as_u16();
    let ctype = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    (status, ctype, resp.text().await.expect("body"))
}

async fn scrape(s: &Server) -> String {
    let (status, ctype, body) = get(&s.base, "/metrics", Some(TOKEN_OPS), None).await;
    assert_eq!(status, 200, "{body}");
    assert!(ctype.starts_with("text/plain; version=0.0.4"), "{ctype}");
    body
}

/// The sum of the samples of `name` whose labels include every one of `labels` (0 when
/// there is none: a series appears with its first event).
fn value(body: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, v) = l.rsplit_once(' ')?;
            let (n, rest) = series.split_once('{').unwrap_or((series, "}"));
            (n == name
                && labels
                    .iter()
                    .all(|(k, val)| rest.contains(&format!("{k}=\"{val}\""))))
            .then(|| v.parse::<f64>().ok())?
        })
        .sum()
}

/// Runs `promtool check metrics` on `body`; `false` (after a SKIP line) when promtool is
/// missing outside CI.
fn promtool_accepts(test: &str, body: &str) -> bool {
    use std::io::Write as _;
    let spawned = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            skip(
                test,
                Unavailable::InstalledByCi,
                &format!("promtool (Debian package prometheus) is not installed: {e}"),
            );
            return false;
        }
    };
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(body.as_bytes())
        .expect("write to promtool");
    let out = child.wait_with_output().expect("promtool");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool check metrics rejected the scrape:\n{said}\n--- body ---\n{body}"
    );
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_move_and_promtool_accepts_the_scrape() {
    let s = Server::start(&config());
    let a = connect(&s.url, Some(TOKEN_A), Era::Legacy)
        .await
        .expect("connect a");
    let b = connect(&s.url, Some(TOKEN_B), Era::Modern)
        .await
        .expect("connect b");
    let before = scrape(&s).await;

    for (command, args) in [
        ("ok", json!([])),
        ("fail", json!([])),
        ("slow", json!(["30"])),
    ] {
        call(
            &a,
            "execute_command",
            json!({"command": command, "args": args}),
        )
        .await;
    }
    // A refusal with a reason class, and a name that is not configured: not a label.
    call(
        &a,
        "execute_command",
        json!({"command": "echo", "args": ["a;b"]}),
    )
    .await;
    call(
        &a,
        "execute_command",
        json!({"command": "rm -rf /", "args": []}),
    )
    .await;
    // vm-a leases a key; vm-b waits a second for it and gives up.
    let lease = call(&a, "lock_device", json!({"key": "usb:2207:350b"})).await;
    assert!(!is_error(&lease), "{}", text(&lease));
    let busy = call(
        &b,
        "lock_device",
        json!({"key": "usb:2207:350b", "wait_secs": 1}),
    )
    .await;
    assert!(is_error(&busy), "{}", text(&busy));

    let after = scrape(&s).await;
    let moved = |name: &str, labels: &[(&str, &str)]| {
        value(&after, name, labels) - value(&before, name, labels)
    };
    let commands = "gatecmd_commands_total";
    assert_eq!(
        moved(
            commands,
            &[("command", "ok"), ("client", "vm-a"), ("outcome", "ok")]
        ),
        1.0,
        "{after}"
    );
    assert_eq!(
        moved(commands, &[("command", "fail"), ("outcome", "failed")]),
        1.0
    );
    assert_eq!(
        moved(commands, &[("command", "slow"), ("outcome", "timed_out")]),
        1.0
    );
    assert_eq!(
        moved(
            commands,
            &[
                ("command", "echo"),
                ("outcome", "refused"),
                ("reason", "forbidden_character")
            ]
        ),
        1.0
    );
    assert_eq!(
        moved(
            commands,
            &[
                ("command", "other"),
                ("outcome", "refused"),
                ("reason", "unknown_command")
            ]
        ),
        1.0
    );
    assert!(!after.contains("rm -rf"), "request text became a label");
    assert_eq!(
        moved(
            "gatecmd_command_duration_seconds_count",
            &[("command", "ok"), ("outcome", "ok")]
        ),
        1.0
    );
    assert_eq!(
        moved(
            "gatecmd_lock_wait_seconds_count",
            &[("want", "lease"), ("outcome", "gave_up")]
        ),
        1.0
    );
    assert!(
        moved(
            "gatecmd_lock_wait_seconds_sum",
            &[("want", "lease"), ("outcome", "gave_up")]
        ) >= 0.9
    );
    // vm-a's lease found its key free: a wait of 0.
    assert_eq!(
        moved(
            "gatecmd_lock_wait_seconds_bucket",
            &[("want", "lease"), ("outcome", "granted"), ("le", "0.0001")]
        ),
        1.0
    );
    assert_eq!(
        value(&after, "gatecmd_leases_held", &[("client", "vm-a")]),
        1.0
    );
    assert_eq!(
        value(&after, "gatecmd_sessions_open", &[("client", "vm-a")]),
        1.0
    );
    assert!(moved("gatecmd_audit_records_total", &[("result", "written")]) >= 4.0);
    assert!(
        moved(
            "gatecmd_http_requests_total",
            &[("route", "mcp"), ("code", "200")]
        ) >= 6.0
    );

    // Access: no token 401, a client not in metrics.clients 403, both counted.
    let (status, _, _) = get(&s.base, "/metrics", None, None).await;
    assert_eq!(status, 401);
    let (status, _, body) = get(&s.base, "/metrics", Some(TOKEN_B), None).await;
    assert_eq!(status, 403, "{body}");
    // The bench page's routes are counted too (its sign-in form is a 200 to anyone).
    let (status, _, _) = get(&s.base, "/", None, None).await;
    assert_eq!(status, 200);
    let last = scrape(&s).await;
    assert!(
        value(
            &last,
            "gatecmd_http_requests_total",
            &[("route", "page"), ("code", "200")]
        ) >= 1.0,
        "the page's GET / not counted:\n{last}"
    );
    for code in ["401", "403"] {
        assert!(
            value(
                &last,
                "gatecmd_http_requests_total",
                &[("route", "metrics"), ("code", code)]
            ) >= 1.0,
            "{code} not counted:\n{last}"
        );
    }

    // OpenMetrics for a scraper that asks for it (Prometheus does).
    let (status, ctype, om) = get(
        &s.base,
        "/metrics",
        Some(TOKEN_A),
        Some("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"),
    )
    .await;
    assert_eq!(status, 200);
    assert!(ctype.starts_with("application/openmetrics-text"), "{ctype}");
    assert!(om.ends_with("# EOF\n"));
    assert!(om.contains("# TYPE gatecmd_commands counter\n"), "{om}");

    promtool_accepts("counters_move_and_promtool_accepts_the_scrape", &last);
}

/// Issue 29: `metrics.bind` on loopback is reachable from every NAT guest on the host, so
/// it asks for a token like the main bind (it used to serve anyone who connected).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_bind_needs_a_token_and_the_main_bind_can_be_off() {
    let yaml = format!(
        "clients:\n  - name: vm-a\n    token: {TOKEN_A}\n  - name: vm-b\n    token: {TOKEN_B}\nmetrics:\n  enabled: false\n  clients: [vm-a]\n  bind: 127.0.0.1:0\n"
    );
    let s = Server::start(&yaml);
    let line = s
        .wait_for_log("the metrics address", Duration::from_secs(5), |l| {
            l.starts_with("gatecmd: metrics on ")
        })
        .await;
    let url = line.trim_start_matches("gatecmd: metrics on ");
    let base = url.trim_end_matches("/metrics");
    // No token: 401 with the scheme, and none of the figures.
    let resp = reqwest::Client::new().get(url).send().await.expect("GET");
    assert_eq!(resp.status().as_u16(), 401);
    assert_eq!(
        resp.headers().get("www-authenticate").map(|v| v.as_bytes()),
        Some(&b"Bearer"[..])
    );
    let body = resp.text().await.expect("body");
    assert!(!body.contains("gatecmd_"), "{body}");
    // A wrong token and a client not in metrics.clients: refused too.
    let (status, _, body) = get(base, "/metrics", Some("not-a-token-of-anyone"), None).await;
    assert_eq!(status, 401, "{body}");
    let (status, _, body) = get(base, "/metrics", Some(TOKEN_B), None).await;
    assert_eq!(status, 403, "{body}");
    // The listed client reads it, although metrics are off on the main bind.
    let (status, _, body) = get(base, "/metrics", Some(TOKEN_A), None).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("# TYPE gatecmd_lease_max_ttl_seconds gauge"),
        "{body}"
    );
    promtool_accepts("the_metrics_bind_needs_a_token", &body);
    // A Host that is not loopback is refused there too (DNS rebinding), before the token.
    let resp = reqwest::Client::new()
        .get(url)
        .header("host", "evil.example")
        .bearer_auth(TOKEN_A)
        .send()
        .await
        .expect("GET");
    assert_eq!(resp.status().as_u16(), 403);
    // Off on the main bind, even with a token.
    let (status, _, _) = get(&s.base, "/metrics", Some(TOKEN_A), None).await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_auth_on_loopback_serves_metrics_open() {
    let s = Server::start_with("metrics:\n  clients: [default]\n", &["--no-auth"], &[]);
    let (status, _, body) = get(&s.base, "/metrics", None, None).await;
    assert_eq!(status, 200, "{body}");
}

#[test]
fn a_metrics_bind_off_loopback_is_accepted_since_it_is_keyed() {
    let ok = gatecmd_domain::config::Config::parse("metrics:\n  bind: 0.0.0.0:9223\n", "test.yaml")
        .expect("a keyed listener may bind any address");
    assert_eq!(ok.metrics.bind, Some("0.0.0.0:9223".parse().expect("addr")));
}

/// Without tokens, a metrics listener off loopback would be open to the network.
#[test]
fn no_auth_with_a_metrics_bind_off_loopback_is_refused_at_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("c.yaml");
    std::fs::write(
        &cfg,
        format!(
            "state_dir: {}\nmetrics:\n  bind: 0.0.0.0:0\n",
            dir.path().join("state").display()
        ),
    )
    .expect("write");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gatecmd"))
        .args(["serve", "--no-auth", "--bind", "127.0.0.1:0", "--config"])
        .arg(&cfg)
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--no-auth is refused with metrics.bind"),
        "{err}"
    );
}

#[cfg(feature = "udev")]
mod hotplug {
    use super::*;
    use common::umockdev::{Testbed, is_inner_run, rerun_under_preload};
    use common::{ROOT_HUB, SYS_1_2};

    fn config(script: &str) -> String {
        format!(
            r#"
clients:
  - name: vm-a
    token: {TOKEN_A}
devices:
  - name: rockusb
    match: {{vid: "2207", pid: "350b"}}
commands:
  - name: flash
    binary: {script}
    device: rockusb
    allowed_args:
      - pattern: ""
"#
        )
    }

    async fn wait_for(s: &Server, what: &str, f: impl Fn(&str) -> bool) -> String {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let (_, _, body) = get(&s.base, "/metrics", Some(TOKEN_A), None).await;
            if f(&body) {
                return body;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what} not seen in 5 s:\n{body}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn hotplug_and_a_board_lost_mid_command_move_the_counters() {
        if !is_inner_run() {
            return rerun_under_preload(
                module_path!(),
                "hotplug_and_a_board_lost_mid_command_move_the_counters",
            );
        }
        let tb = Testbed::new();
        tb.add_from_string(ROOT_HUB);
        let dir = tempfile::tempdir().expect("tempdir");
        let flash = script(dir.path(), "flash", "sleep 1");
        let root = tb.root_dir();
        let s = Server::start_with(
            &config(flash.to_str().expect("utf8")),
            &[],
            &[
                ("LD_PRELOAD", "libumockdev-preload.so.0"),
                ("UMOCKDEV_DIR", root.to_str().expect("utf8")),
            ],
        );
        let added = &[("event", "added"), ("kind", "rockusb")];
        let rockusb = &[("kind", "rockusb"), ("mode", "maskrom")];
        let body = wait_for(&s, "the first scrape", |_| true).await;
        assert_eq!(value(&body, "gatecmd_hotplug_events_total", added), 0.0);
        // A subscriber, so that the plug is also a notification whose delay is measured.
        let (listener, _heard) = connect_recorder(&s.url, Some(TOKEN_A), Era::Legacy)
            .await
            .expect("subscriber");
        #[allow(deprecated)]
        listener
            .subscribe(rmcp::model::SubscribeRequestParams::new(
                "gatecmd://devices",
            ))
            .await
            .expect("subscribe");

        tb.add_from_string(common::RK3588_MASKROM_1_2);
        wait_for(&s, "the board added and its notification sent", |b| {
            value(b, "gatecmd_hotplug_events_total", added) == 1.0
                && value(b, "gatecmd_devices_attached", rockusb) == 1.0
                && value(
                    b,
                    "gatecmd_notification_delivery_seconds_count",
                    &[("era", "legacy")],
                ) >= 1.0
        })
        .await;

        // The board goes while `flash` runs on it.
        let a = connect(&s.url, Some(TOKEN_A), Era::Modern)
            .await
            .expect("connect");
        let running = start_call(&a, "execute_command", json!({"command": "flash"})).await;
        wait_for(&s, "the command running", |b| {
            value(b, "gatecmd_commands_running", &[]) == 1.0
        })
        .await;
        tb.unplug(SYS_1_2);
        let body = wait_for(&s, "the board lost", |b| {
            value(b, "gatecmd_hotplug_events_total", &[("event", "removed")]) == 1.0
                && value(b, "gatecmd_devices_attached", rockusb) == 0.0
                && value(
                    b,
                    "gatecmd_devices_lost_during_command_total",
                    &[("kind", "rockusb")],
                ) == 1.0
        })
        .await;
        let _ = running.await_response().await;
        promtool_accepts(
            "hotplug_and_a_board_lost_mid_command_move_the_counters",
            &body,
        );
    }
}

/// The alert rules docs/METRICS.md shows are valid rules (`promtool check rules`).
#[test]
fn the_documented_alert_rules_pass_promtool() {
    let doc = include_str!("../../docs/METRICS.md");
    let from = doc.find("## Example alert rules").expect("the section");
    let block = doc[from..].split("```yaml\n").nth(1).expect("a yaml block");
    let rules = block.split("```").next().expect("its end");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("rules.yml");
    std::fs::write(&path, rules).expect("write rules");
    let out = match std::process::Command::new("promtool")
        .args(["check", "rules"])
        .arg(&path)
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            return skip(
                "the_documented_alert_rules_pass_promtool",
                Unavailable::InstalledByCi,
                &format!("promtool (Debian package prometheus) is not installed: {e}"),
            );
        }
    };
    let said =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "promtool check rules:\n{said}\n{rules}"
    );
    assert!(said.contains("SUCCESS: 4 rules found"), "{said}");
}

/// `metrics.clients` and `metrics.enabled` apply on SIGHUP; `metrics.bind` waits for a
/// restart and the reload's log line says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn who_may_read_follows_a_reload_and_the_bind_waits_for_a_restart() {
    let s = Server::start(&config());
    let (status, _, _) = get(&s.base, "/metrics", Some(TOKEN_B), None).await;
    assert_eq!(status, 403);
    let yaml = config().replace(
        "metrics:\n  clients: [ops, vm-a]\n",
        "metrics:\n  clients: [vm-b]\n  bind: 127.0.0.1:0\n",
    );
    let done = || s.log_text().matches("configuration reloaded").count();
    std::fs::write(s.path("config.yaml"), yaml).expect("rewrite config");
    s.signal(nix::sys::signal::Signal::SIGHUP);
    assert!(
        eventually(Duration::from_secs(10), || done() == 1),
        "no reload in the log:\n{}",
        s.log_text()
    );
    let line = s
        .log_lines(|l| l.contains("configuration reloaded"))
        .remove(0);
    assert!(line.contains("metrics.bind"), "{line}");
    let (status, _, _) = get(&s.base, "/metrics", Some(TOKEN_B), None).await;
    assert_eq!(status, 200);
    let (status, _, _) = get(&s.base, "/metrics", Some(TOKEN_A), None).await;
    assert_eq!(status, 403);
    assert!(
        s.log_lines(|l| l.starts_with("gatecmd: metrics on "))
            .is_empty()
    );
}
