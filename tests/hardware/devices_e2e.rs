//! End to end: the real `gatecmd` binary under the umockdev preload, with a testbed owned by
//! this test; real MCP clients (both protocol revisions) subscribed to the device resources;
//! boards plugged and unplugged.
#![cfg(feature = "udev")]
#![allow(deprecated)] // resources/subscribe is the 2025-11-25 way, which we serve on purpose

use crate::common;
use crate::harness;

use std::time::Duration;

use common::umockdev::{Testbed, is_inner_run, rerun_under_preload};
use common::{RK3588_LOADER_1_2, RK3588_MASKROM_1_2, RK3588_MASKROM_1_3, ROOT_HUB, SYS_1_2};
use harness::*;
use rmcp::model::{ServerNotification, SubscribeRequestParams, SubscriptionFilter};
use serde_json::json;
use tokio::sync::mpsc::UnboundedReceiver;

const DEADLINE: Duration = Duration::from_secs(5);

fn config() -> String {
    format!(
        r#"
clients:
  - name: vm-a
    token: {TOKEN_A}
  - name: vm-b
    token: {TOKEN_B}
devices:
  - name: rockusb
    match: {{vid: "2207", pid: "350b"}}
commands:
  - name: rk
    binary: {rk}
    device: rockusb
    env: {{FAKE_RK_STEPS: "2", FAKE_RK_DELAY: "0.01"}}
    allowed_args:
      - pattern: wl {{lba}}
    params: {{lba: "[0-9]+"}}
"#,
        rk = fake_rk()
    )
}

fn start(tb: &Testbed) -> Server {
    let root = tb.root_dir();
    let root = root.to_str().expect("utf8");
    Server::start_with(
        &config(),
        &[],
        &[
            ("LD_PRELOAD", "libumockdev-preload.so.0"),
            ("UMOCKDEV_DIR", root),
        ],
    )
}

/// Waits for a legacy notification matching `pred`.
async fn heard(rx: &mut UnboundedReceiver<Heard>, what: &str, pred: impl Fn(&Heard) -> bool) {
    let found = tokio::time::timeout(DEADLINE, async {
        while let Some(h) = rx.recv().await {
            if pred(&h) {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(
        found,
        Ok(true),
        "legacy client did not hear {what} within {DEADLINE:?}"
    );
}

/// Waits for two legacy notifications, matching `a` and `b`, in either order: rmcp's client
/// may hand two notifications sent back to back to its handler out of order.
async fn heard_both(
    rx: &mut UnboundedReceiver<Heard>,
    what: &str,
    a: impl Fn(&Heard) -> bool,
    b: impl Fn(&Heard) -> bool,
) {
    let found = tokio::time::timeout(DEADLINE, async {
        let (mut got_a, mut got_b) = (false, false);
        while let Some(h) = rx.recv().await {
            got_a |= a(&h);
            got_b |= b(&h);
            if got_a && got_b {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(
        found,
        Ok(true),
        "legacy client did not hear {what} within {DEADLINE:?}"
    );
}

async fn device_ids(c: &Client) -> Vec<String> {
    let r = call(c, "list_devices", json!({})).await;
    structured(&r)["devices"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|d| d["id"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hotplug_reaches_subscribed_clients_in_both_eras() {
    if !is_inner_run() {
        return rerun_under_preload(
            module_path!(),
            "hotplug_reaches_subscribed_clients_in_both_eras",
        );
    }
    let tb = Testbed::new();
    tb.add_from_string(ROOT_HUB);
    let s = start(&tb);

    let (legacy, mut lrx) = connect_recorder(&s.url, Some(TOKEN_A), Era::Legacy)
        .await
        .expect("legacy");
    legacy
        .subscribe(SubscribeRequestParams::new("gatecmd://devices"))
        .await
        .expect("subscribe");
    legacy
        .subscribe(SubscribeRequestParams::new("gatecmd://devices/1-2"))
        .await
        .expect("subscribe one");
    let (modern, _mrx) = connect_recorder(&s.url, Some(TOKEN_B), Era::Modern)
        .await
        .expect("modern");
    let filter = SubscriptionFilter::builder()
        .resources_list_changed()
        .resource_subscriptions(["gatecmd://devices", "gatecmd://devices/1-2"])
        .build();
    let mut sub = modern.listen(filter).await.expect("listen");
    let plain = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("plain");
    assert!(device_ids(&plain).await.is_empty());

    tb.add_from_string(RK3588_MASKROM_1_2);
    // Both, in whichever order the client's handler tasks record them.
    heard_both(
        &mut lrx,
        "list_changed and updated gatecmd://devices/1-2",
        |h| matches!(h, Heard::ResourceListChanged),
        |h| matches!(h, Heard::ResourceUpdated(u) if u == "gatecmd://devices/1-2"),
    )
    .await;
    let mut got_list = false;
    let mut got_updated = false;
    while !(got_list && got_updated) {
        let n = tokio::time::timeout(DEADLINE, sub.next())
            .await
            .expect("modern notification in time")
            .expect("stream");
        match n.expect("notification") {
            ServerNotification::ResourceListChangedNotification(_) => got_list = true,
            ServerNotification::ResourceUpdatedNotification(u) => {
                got_updated |= u.params.uri == "gatecmd://devices"
            }
            _ => {}
        }
    }

    // list_devices agrees with the notifications.
    let r = call(&plain, "list_devices", json!({"vid": "2207"})).await;
    let d = &structured(&r)["devices"][0];
    assert_eq!(d["id"], json!("1-2"));
    assert_eq!(d["vid"], json!("2207"));
    assert_eq!(d["pid"], json!("350b"));
    assert_eq!(d["soc"], json!("RK3588"));
    assert_eq!(d["mode"], json!("maskrom"));
    assert_eq!(d["class"], json!("rockusb"));
    assert_eq!(d["lock"]["key"], json!("usb:2207:350b"));
    assert_eq!(d["lock"]["held"], json!(false));
    assert!(
        text(&r).contains("1-2  2207:350b  RK3588 MaskROM"),
        "{}",
        text(&r)
    );

    // The device resource reads as JSON.
    let read = plain
        .read_resource(rmcp::model::ReadResourceRequestParams::new(
            "gatecmd://devices/1-2",
        ))
        .await
        .expect("read");
    let body = format!("{read:?}");
    assert!(
        body.contains("application/json") && body.contains("RK3588"),
        "{body}"
    );

    tb.unplug(SYS_1_2);
    heard(&mut lrx, "list_changed after unplug", |h| {
        matches!(h, Heard::ResourceListChanged)
    })
    .await;
    let n = tokio::time::timeout(DEADLINE, async {
        loop {
            if let Some(Ok(ServerNotification::ResourceListChangedNotification(_))) =
                sub.next().await.ok().flatten().map(Ok::<_, ()>)
            {
                return true;
            }
        }
    })
    .await;
    assert_eq!(n, Ok(true), "modern client missed the unplug");
    assert!(device_ids(&plain).await.is_empty());
    let missing = plain
        .read_resource(rmcp::model::ReadResourceRequestParams::new(
            "gatecmd://devices/1-2",
        ))
        .await;
    let err = format!("{missing:?}");
    assert!(err.contains("-32002") || err.contains("not found"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_device_and_locks_across_reenumeration() {
    if !is_inner_run() {
        return rerun_under_preload(
            module_path!(),
            "wait_for_device_and_locks_across_reenumeration",
        );
    }
    let tb = Testbed::new();
    tb.add_from_string(ROOT_HUB);
    let s = start(&tb);
    let a = connect(&s.url, Some(TOKEN_A), Era::Legacy)
        .await
        .expect("a");
    let b = connect(&s.url, Some(TOKEN_B), Era::Modern)
        .await
        .expect("b");

    // Nothing attached: a device command is refused and says what is attached.
    let r = call(
        &a,
        "execute_command",
        json!({"command": "rk", "args": ["wl", "0"]}),
    )
    .await;
    assert!(is_error(&r));
    assert!(
        text(&r).contains("no rockusb device (2207:350b) is attached"),
        "{}",
        text(&r)
    );
    assert!(text(&r).contains("Attached now: nothing"), "{}", text(&r));

    // A lease on a board that is not plugged in yet.
    let r = call(
        &a,
        "lock_device",
        json!({"key": "usb:2207:350b", "note": "flashing"}),
    )
    .await;
    assert!(!is_error(&r), "{}", text(&r));
    let lease = structured(&r)["lease_id"]
        .as_str()
        .expect("lease")
        .to_string();

    // wait_for_device is answered by the hotplug event. The board is plugged only once the
    // waiter reports (by its first progress notification, after 1 s) that it is waiting.
    let (wc, mut wheard) = connect_recorder(&s.url, Some(TOKEN_B), Era::Legacy)
        .await
        .expect("waiter");
    let waiter = start_call(
        &wc,
        "wait_for_device",
        json!({"match": {"vid": "2207", "mode": "maskrom"}, "state": "attached", "timeout_secs": 10}),
    )
    .await;
    heard(&mut wheard, "the waiter's progress (it is waiting)", |h| {
        matches!(h, Heard::Progress(p) if p.message.as_deref().is_some_and(|m| m.starts_with("waiting for")))
    })
    .await;
    tb.add_from_string(RK3588_MASKROM_1_2);
    let r = match tokio::time::timeout(DEADLINE, waiter.await_response())
        .await
        .expect("in time")
        .expect("response")
    {
        rmcp::model::ServerResult::CallToolResult(r) => r,
        other => panic!("unexpected response {other:?}"),
    };
    assert!(!is_error(&r), "{}", text(&r));
    assert_eq!(structured(&r)["device"]["id"], json!("1-2"));
    assert_eq!(structured(&r)["satisfied"], json!(true));

    // The lease holds: b is refused with who holds it; a runs with its lease.
    let r = call(
        &b,
        "execute_command",
        json!({"command": "rk", "args": ["wl", "0"]}),
    )
    .await;
    assert!(is_error(&r));
    assert!(
        text(&r).starts_with(
            "device usb:2207:350b is locked by client \"vm-a\" (lease, note: \"flashing\") since "
        ),
        "{}",
        text(&r)
    );
    let r = call(
        &b,
        "execute_command",
        json!({"command": "rk", "args": ["wl", "0"], "lease": lease}),
    )
    .await;
    assert!(
        text(&r).contains("belongs to client \"vm-a\""),
        "{}",
        text(&r)
    );
    let r = call(
        &a,
        "execute_command",
        json!({"command": "rk", "args": ["wl", "0"], "lease": lease}),
    )
    .await;
    assert!(!is_error(&r), "{}", text(&r));
    assert_eq!(structured(&r)["lock_keys"], json!(["usb:2207:350b"]));
    // The legacy session that took the lease may omit it.
    let r = call(
        &a,
        "execute_command",
        json!({"command": "rk", "args": ["wl", "0"]}),
    )
    .await;
    assert!(!is_error(&r), "{}", text(&r));

    // Re-enumeration into Loader mode on the same port: same id, lease still held.
    tb.unplug(SYS_1_2);
    let r = call(
        &b,
        "wait_for_device",
        json!({"match": {"id": "1-2"}, "state": "detached", "timeout_secs": 5}),
    )
    .await;
    assert_eq!(structured(&r)["satisfied"], json!(true), "{}", text(&r));
    tb.add_from_string(RK3588_LOADER_1_2);
    let r = call(
        &b,
        "wait_for_device",
        json!({"match": {"id": "1-2", "mode": "loader"}, "state": "attached", "timeout_secs": 5}),
    )
    .await;
    assert_eq!(
        structured(&r)["device"]["mode"],
        json!("loader"),
        "{}",
        text(&r)
    );
    let r = call(
        &a,
        "execute_command",
        json!({"command": "rk", "args": ["wl", "0"], "lease": lease}),
    )
    .await;
    assert!(!is_error(&r), "lease survives re-enumeration: {}", text(&r));
    let r = call(&b, "list_devices", json!({"id": "1-2"})).await;
    let lock = &structured(&r)["devices"][0]["lock"];
    assert_eq!(lock["holder"], json!("vm-a"));
    assert!(
        lock.get("lease_id").is_none(),
        "another client saw the lease id"
    );

    // A second board of the same class: both keys... share one VID:PID key.
    tb.add_from_string(RK3588_MASKROM_1_3);
    let r = call(
        &a,
        "execute_command",
        json!({"command": "rk", "args": ["wl", "0"], "device": "1-3", "lease": lease}),
    )
    .await;
    assert!(!is_error(&r), "{}", text(&r));
    assert_eq!(structured(&r)["device"], json!("1-3"));

    let r = call(&a, "unlock_device", json!({"lease": lease})).await;
    assert!(!is_error(&r), "{}", text(&r));
    let r = call(
        &b,
        "execute_command",
        json!({"command": "rk", "args": ["wl", "0"]}),
    )
    .await;
    assert!(!is_error(&r), "released: {}", text(&r));
}

#[test]
fn production_binary_does_not_link_libumockdev() {
    let out = std::process::Command::new("ldd")
        .arg(env!("CARGO_BIN_EXE_gatecmd"))
        .output()
        .expect("ldd");
    let libs = String::from_utf8_lossy(&out.stdout);
    assert!(libs.contains("libudev"), "expected libudev in:\n{libs}");
    assert!(
        !libs.contains("umockdev"),
        "the production binary links umockdev:\n{libs}"
    );
}
