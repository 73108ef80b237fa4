//! Locks and leases through the real server and real MCP clients.
#![cfg(feature = "udev")]

use crate::common;
use crate::harness;

use std::time::Duration;

use common::umockdev::{Testbed, is_inner_run, rerun_under_preload};
use common::{RK3588_MASKROM_1_2, ROOT_HUB};
use harness::*;
use serde_json::json;

fn config(dir_note: &str) -> String {
    format!(
        r#"
# {dir_note}
clients:
  - name: vm-a
    token: {TOKEN_A}
  - name: vm-b
    token: {TOKEN_B}
devices:
  - name: rockusb
    match: {{vid: "2207"}}
commands:
  - name: flash
    binary: {rk}
    device: rockusb
    env: {{FAKE_RK_STEPS: "400", FAKE_RK_IGNORE_TERM: "1", FAKE_RK_CHILD: $DIR/gc.pid}}
    allowed_args:
      - pattern: wl
  - name: record
    binary: $DIR/record.sh
    device: rockusb
    allowed_args:
      - pattern: "{{who}}"
"#,
        rk = fake_rk()
    )
}

/// The tool every client runs: appends its start and end times (ns) to one file.
fn record_script(dir: &std::path::Path) {
    script(
        dir,
        "record.sh",
        &format!(
            "s=$(date +%s%N)\nsleep 0.002\ne=$(date +%s%N)\necho \"$s $e $1\" >> {}/intervals",
            dir.display()
        ),
    );
}

fn intervals(dir: &std::path::Path) -> Vec<(u128, u128, String)> {
    let text = std::fs::read_to_string(dir.join("intervals")).unwrap_or_default();
    let mut v: Vec<(u128, u128, String)> = text
        .lines()
        .map(|l| {
            let mut p = l.split(' ');
            let s = p.next().and_then(|x| x.parse().ok()).expect("start");
            let e = p.next().and_then(|x| x.parse().ok()).expect("end");
            (s, e, p.next().unwrap_or_default().to_string())
        })
        .collect();
    v.sort();
    v
}

fn start_with_board(tb: &Testbed) -> Server {
    tb.add_from_string(ROOT_HUB);
    tb.add_from_string(RK3588_MASKROM_1_2);
    let root = tb.root_dir();
    let s = Server::start_with(
        &config("stress"),
        &[],
        &[
            ("LD_PRELOAD", "libumockdev-preload.so.0"),
            ("UMOCKDEV_DIR", root.to_str().expect("utf8")),
        ],
    );
    record_script(s.dir.path());
    s
}

const CLIENTS: usize = 16;
const RUNS_EACH: usize = 32; // 16 × 32 = 512 executions

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_two_commands_on_one_device_overlap() {
    if !is_inner_run() {
        return rerun_under_preload(module_path!(), "no_two_commands_on_one_device_overlap");
    }
    let tb = Testbed::new();
    let s = start_with_board(&tb);
    let mut tasks = Vec::new();
    for i in 0..CLIENTS {
        let url = s.url.clone();
        tasks.push(tokio::spawn(async move {
            let token = if i % 2 == 0 { TOKEN_A } else { TOKEN_B };
            let era = if i % 3 == 0 { Era::Legacy } else { Era::Modern };
            let c = connect(&url, Some(token), era).await.expect("connect");
            for n in 0..RUNS_EACH {
                let r = call(
                    &c,
                    "execute_command",
                    json!({"command": "record", "args": [format!("c{i}n{n}")], "wait_secs": 120}),
                )
                .await;
                assert!(!is_error(&r), "client {i} run {n}: {}", text(&r));
            }
        }));
    }
    for t in tasks {
        t.await.expect("client task");
    }
    let v = intervals(s.dir.path());
    assert_eq!(v.len(), CLIENTS * RUNS_EACH, "every run recorded");
    for w in v.windows(2) {
        assert!(w[0].1 <= w[1].0, "overlap: {:?} and {:?}", w[0], w[1]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_overlap_with_leases_interleaved() {
    if !is_inner_run() {
        return rerun_under_preload(module_path!(), "no_overlap_with_leases_interleaved");
    }
    let tb = Testbed::new();
    let s = start_with_board(&tb);
    let mut tasks = Vec::new();
    for i in 0..CLIENTS {
        let url = s.url.clone();
        tasks.push(tokio::spawn(async move {
            let token = if i % 2 == 0 { TOKEN_A } else { TOKEN_B };
            let c = connect(&url, Some(token), Era::Modern).await.expect("connect");
            let mut n = 0;
            while n < RUNS_EACH {
                // Lease takers are two different clients (a client asking again for a key it
                // already leases is answered "already held", not queued).
                if i < 2 && n % 8 == 0 {
                    // A leased sequence of four commands: nobody else runs in between.
                    let r = call(&c, "lock_device", json!({"device": "1-2", "wait_secs": 120, "note": format!("c{i}")})).await;
                    assert!(!is_error(&r), "{}", text(&r));
                    let lease = structured(&r)["lease_id"].as_str().expect("lease").to_string();
                    for _ in 0..4 {
                        let r = call(&c, "execute_command", json!({"command": "record", "args": [format!("L{i}n{n}")], "lease": lease, "wait_secs": 120})).await;
                        assert!(!is_error(&r), "{}", text(&r));
                        n += 1;
                    }
                    let r = call(&c, "unlock_device", json!({"lease": lease})).await;
                    assert!(!is_error(&r), "{}", text(&r));
                } else {
                    let r = call(&c, "execute_command", json!({"command": "record", "args": [format!("c{i}n{n}")], "wait_secs": 120})).await;
                    assert!(!is_error(&r), "{}", text(&r));
                    n += 1;
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("client task");
    }
    let v = intervals(s.dir.path());
    assert_eq!(v.len(), CLIENTS * RUNS_EACH);
    for w in v.windows(2) {
        assert!(w[0].1 <= w[1].0, "overlap: {:?} and {:?}", w[0], w[1]);
    }
    // Each leased sequence of four is contiguous: no other client's run inside it.
    let names: Vec<&str> = v.iter().map(|x| x.2.as_str()).collect();
    for (k, name) in names.iter().enumerate() {
        if let Some(rest) = name.strip_prefix('L') {
            let (client, n) = rest.split_once('n').expect("Lc n");
            let n: usize = n.parse().expect("n");
            if n.is_multiple_of(8) {
                for j in 1..4 {
                    let expect = format!("L{client}n{}", n + j);
                    assert_eq!(
                        names.get(k + j).copied(),
                        Some(expect.as_str()),
                        "lease sequence interrupted at {k}"
                    );
                }
            }
        }
    }
}

fn lease_config() -> String {
    format!(
        "clients:\n  - name: vm-a\n    token: {TOKEN_A}\n  - name: vm-b\n    token: {TOKEN_B}\n  - name: ops\n    token: ops-token-123456\n    admin: true\n"
    )
}

async fn queue_len(c: &Client, key: &str) -> u64 {
    let r = call(c, "list_locks", json!({})).await;
    structured(&r)["locks"]
        .as_array()
        .and_then(|a| a.iter().find(|l| l["key"] == json!(key)))
        .map(|l| l["queue_len"].as_u64().unwrap_or(0))
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_waiter_leaves_the_queue() {
    let s = Server::start(&lease_config());
    let a = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("a");
    let (b, _rx) = connect_recorder(&s.url, Some(TOKEN_B), Era::Legacy)
        .await
        .expect("b");
    let r = call(&a, "lock_device", json!({"key": "usb:2207:350b"})).await;
    assert!(!is_error(&r), "{}", text(&r));
    let h = start_call(
        &b,
        "lock_device",
        json!({"key": "usb:2207:350b", "wait_secs": 60}),
    )
    .await;
    assert!(
        tokio::time::timeout(Duration::from_secs(5), async {
            while queue_len(&a, "usb:2207:350b").await != 1 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .is_ok(),
        "b never queued"
    );
    h.cancel(Some("changed my mind".into()))
        .await
        .expect("cancel");
    assert!(
        tokio::time::timeout(Duration::from_secs(5), async {
            while queue_len(&a, "usb:2207:350b").await != 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .is_ok(),
        "the cancelled waiter stayed in the queue"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_a_legacy_session_releases_its_lease() {
    let s = Server::start(&lease_config());
    let a = connect(&s.url, Some(TOKEN_A), Era::Legacy)
        .await
        .expect("a");
    let b = connect(&s.url, Some(TOKEN_B), Era::Modern)
        .await
        .expect("b");
    let r = call(
        &a,
        "lock_device",
        json!({"key": "group:bench", "ttl_secs": 3600}),
    )
    .await;
    assert!(!is_error(&r), "{}", text(&r));
    let r = call(&b, "lock_device", json!({"key": "group:bench"})).await;
    assert!(is_error(&r));
    assert!(
        text(&r).contains("is locked by client \"vm-a\" (lease)"),
        "{}",
        text(&r)
    );
    assert!(text(&r).contains("; 0 waiting."), "{}", text(&r));
    a.cancel().await.expect("close session (DELETE)");
    let ok = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let r = call(&b, "lock_device", json!({"key": "group:bench"})).await;
            if !is_error(&r) {
                return structured(&r)["holder"].clone();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert_eq!(ok, Ok(json!("vm-b")), "the lease outlived its session");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_ownership_and_admin_release() {
    let s = Server::start(&lease_config());
    let a = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("a");
    let b = connect(&s.url, Some(TOKEN_B), Era::Modern)
        .await
        .expect("b");
    let ops = connect(&s.url, Some("ops-token-123456"), Era::Modern)
        .await
        .expect("ops");
    let r = call(
        &a,
        "lock_device",
        json!({"key": "usb:2207:350b", "ttl_secs": 600}),
    )
    .await;
    let lease = structured(&r)["lease_id"]
        .as_str()
        .expect("lease")
        .to_string();
    assert_eq!(structured(&r)["ttl_secs"], json!(600));
    let r = call(&b, "unlock_device", json!({"lease": lease})).await;
    assert!(is_error(&r));
    assert_eq!(
        text(&r),
        format!(
            "lease {lease} belongs to client \"vm-a\", not \"vm-b\"; take your own lease with lock_device."
        )
    );
    let r = call(&a, "lock_device", json!({"key": "usb:2207:350b"})).await;
    assert!(
        text(&r).contains(&lease),
        "already held names the lease: {}",
        text(&r)
    );
    let r = call(
        &a,
        "lock_device",
        json!({"key": "usb:2207:350b", "ttl_secs": 999999}),
    )
    .await;
    assert!(is_error(&r));
    // Only the holder sees the lease id in list_locks.
    let r = call(&b, "list_locks", json!({})).await;
    assert!(!text(&r).contains(&lease) && !structured(&r).to_string().contains(&lease));
    let r = call(&a, "list_locks", json!({})).await;
    assert!(structured(&r).to_string().contains(&lease));
    // An admin client may release it.
    let r = call(&ops, "unlock_device", json!({"lease": lease})).await;
    assert!(!is_error(&r), "{}", text(&r));
    let r = call(&a, "unlock_device", json!({"lease": lease})).await;
    assert!(is_error(&r));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_expires_after_its_ttl() {
    let s = Server::start(&lease_config());
    let a = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("a");
    let b = connect(&s.url, Some(TOKEN_B), Era::Modern)
        .await
        .expect("b");
    let r = call(&a, "lock_device", json!({"key": "group:x", "ttl_secs": 1})).await;
    assert!(!is_error(&r));
    // b queues and gets the key when the lease expires.
    let r = call(&b, "lock_device", json!({"key": "group:x", "wait_secs": 5})).await;
    assert!(!is_error(&r), "{}", text(&r));
    assert_eq!(structured(&r)["holder"], json!("vm-b"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_command_frees_the_device_after_its_group_is_gone() {
    if !is_inner_run() {
        return rerun_under_preload(
            module_path!(),
            "cancelling_a_command_frees_the_device_after_its_group_is_gone",
        );
    }
    let tb = Testbed::new();
    let s = start_with_board(&tb);
    for era in ERAS {
        let pidfile = s.path("gc.pid");
        let _ = std::fs::remove_file(&pidfile);
        let (a, _rx) = connect_recorder(&s.url, Some(TOKEN_A), era)
            .await
            .expect("a");
        let b = connect(&s.url, Some(TOKEN_B), Era::Modern)
            .await
            .expect("b");
        let h = start_call(
            &a,
            "execute_command",
            json!({"command": "flash", "args": ["wl"]}),
        )
        .await;
        // The tool writes its pid after creating the file: wait for the number, not the file.
        assert!(eventually(Duration::from_secs(5), || {
            std::fs::read_to_string(&pidfile).is_ok_and(|t| t.trim().parse::<i32>().is_ok())
        }));
        let gc: i32 = std::fs::read_to_string(&pidfile)
            .expect("pid")
            .trim()
            .parse()
            .expect("num");
        let r = call(&b, "lock_device", json!({"device": "1-2"})).await;
        assert!(text(&r).contains("running \"flash wl\""), "{}", text(&r));
        h.cancel(Some("stop".into())).await.expect("cancel");
        // b queues for the key; it gets it only once the tool's whole group is gone.
        let r = call(&b, "lock_device", json!({"device": "1-2", "wait_secs": 10})).await;
        assert!(!is_error(&r), "{era:?}: {}", text(&r));
        assert!(
            process_gone(gc),
            "{era:?}: the key was handed over while grandchild {gc} lived"
        );
        let lease = structured(&r)["lease_id"]
            .as_str()
            .expect("lease")
            .to_string();
        let r = call(&b, "unlock_device", json!({"lease": lease})).await;
        assert!(!is_error(&r));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_expires_and_its_lease_with_it() {
    // session_idle_secs is the knob that keeps idle listeners connected (default 24 h);
    // set to 1 s here to show that it is applied and that expiry releases the lease.
    let yaml = format!("{}limits:\n  session_idle_secs: 1\n", lease_config());
    let s = Server::start(&yaml);
    let a = connect(&s.url, Some(TOKEN_A), Era::Legacy)
        .await
        .expect("a");
    let b = connect(&s.url, Some(TOKEN_B), Era::Modern)
        .await
        .expect("b");
    let r = call(
        &a,
        "lock_device",
        json!({"key": "group:idle", "ttl_secs": 3600}),
    )
    .await;
    assert!(!is_error(&r), "{}", text(&r));
    let r = call(
        &b,
        "lock_device",
        json!({"key": "group:idle", "wait_secs": 10}),
    )
    .await;
    assert!(
        !is_error(&r),
        "the idle session's lease was not released: {}",
        text(&r)
    );
    assert_eq!(structured(&r)["holder"], json!("vm-b"));
    // The server logs the release after the hand-off it caused, and the harness reads
    // its stderr on another thread: wait for the line rather than race it.
    wait_until(
        "the log line of the idle session's release",
        Duration::from_secs(5),
        || {
            s.log_text()
                .contains("session ended: its lease was released")
        },
    )
    .await;
}

/// Issue 15, finding 3: leases on made-up keys with long notes no longer grow the
/// server without bound. Each limit is a refusal naming itself; a long listing says
/// how much it left out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_limits_refuse_and_name_the_limit() {
    let config = format!(
        "{}leases:\n  max_leases_per_client: 2\n  max_note_bytes: 16\n  max_listed: 1\n",
        lease_config()
    );
    let s = Server::start(&config);
    let a = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("a");
    let b = connect(&s.url, Some(TOKEN_B), Era::Modern)
        .await
        .expect("b");
    let r = call(
        &a,
        "lock_device",
        json!({"key": "group:k1", "note": "x".repeat(17)}),
    )
    .await;
    assert!(is_error(&r));
    assert_eq!(
        text(&r),
        "the note is 17 bytes, the limit (leases.max_note_bytes) is 16; shorten it to at most 16 bytes (others see it when they find the device busy)."
    );
    for key in ["group:k1", "group:k2"] {
        let r = call(
            &a,
            "lock_device",
            json!({"key": key, "note": "x".repeat(16)}),
        )
        .await;
        assert!(!is_error(&r), "{}", text(&r));
    }
    let r = call(&a, "lock_device", json!({"key": "group:k3"})).await;
    assert!(is_error(&r));
    assert!(
        text(&r).contains("the limit (leases.max_leases_per_client) is 2; release a lease with unlock_device first"),
        "{}",
        text(&r)
    );
    // Another client's count is its own.
    let r = call(&b, "lock_device", json!({"key": "group:k3"})).await;
    assert!(!is_error(&r), "{}", text(&r));

    let r = call(&b, "list_locks", json!({})).await;
    assert_eq!(structured(&r)["locks"].as_array().map(Vec::len), Some(1));
    assert_eq!(structured(&r)["omitted"], json!(2));
    assert!(
        text(&r).contains("2 more keys in use are not listed"),
        "{}",
        text(&r)
    );
}
