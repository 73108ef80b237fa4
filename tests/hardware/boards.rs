//! Boards through the real server and real MCP clients (issue 16): `lock_board {match}`
//! allocation (fair, exclusive, bounded by the boards there are), a board lease keeping
//! other clients' commands, port leases and power actions out, and `power_board cycle`
//! with a fake uhubctl that unplugs and replugs the umockdev board.
#![cfg(feature = "udev")]
#![allow(deprecated)] // resources/subscribe is the 2025-11-25 way, which is served on purpose

use crate::common;
use crate::harness;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::umockdev::{Testbed, is_inner_run, rerun_under_preload};
use common::{RK3588_MASKROM_1_2, ROOT_HUB, SYS_1_2};
use harness::*;
use serde_json::{Value, json};

const CLIENTS: usize = 8;

fn token(i: usize) -> String {
    format!("token-for-board-client-{i}-0123456789")
}

fn allocation_config() -> String {
    let mut y = String::from("clients:\n");
    for i in 0..CLIENTS {
        y.push_str(&format!("  - name: c{i}\n    token: {}\n", token(i)));
    }
    y.push_str("boards:\n");
    for (n, port) in ["1-2", "1-3", "1-4"].iter().enumerate() {
        y.push_str(&format!(
            "  - name: rk{n}\n    tags: {{soc: rk3588}}\n    usb: \"{port}\"\n"
        ));
    }
    // A board of another SoC that a match for rk3588 must never hand out.
    y.push_str("  - name: other\n    tags: {soc: rk3568}\n    usb: \"1-5\"\n");
    y
}

/// 8 clients ask for "any rk3588" (3 boards) one after another, each holding its board for
/// 600 ms: at most 3 hold at once, no board is held by two, and the queued requests are
/// served in the order they arrived.
///
/// The order of arrival is the server's: client i asks only once every earlier request is
/// either answered or seen waiting in `list_boards` (`match_waiting`), so a loaded machine
/// that delays a request cannot reorder them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn match_allocation_is_fair_and_exclusive() {
    let s = Server::start(&allocation_config());
    let epoch = Instant::now();
    let (turn_tx, turn_rx) = tokio::sync::watch::channel(usize::MAX);
    let answered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let ready = Arc::new(tokio::sync::Barrier::new(CLIENTS + 1));
    let mut tasks = Vec::new();
    for i in 0..CLIENTS {
        let url = s.url.clone();
        let ready = Arc::clone(&ready);
        let answered = Arc::clone(&answered);
        let mut turn = turn_rx.clone();
        tasks.push(tokio::spawn(async move {
            let c = connect(&url, Some(&token(i)), Era::Modern)
                .await
                .expect("connect");
            ready.wait().await;
            turn.wait_for(|t| *t == i).await.expect("turn");
            let asked = epoch.elapsed();
            let r = call(
                &c,
                "lock_board",
                json!({"match": {"soc": "rk3588"}, "wait_secs": 30, "note": format!("c{i}")}),
            )
            .await;
            assert!(!is_error(&r), "c{i}: {}", text(&r));
            let got = epoch.elapsed();
            answered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let v = structured(&r);
            let board = v["board"].as_str().expect("board").to_string();
            // The server's grant order (every lease has the default TTL, so expiry orders
            // them as grants do): answers may reach their clients out of order.
            let acquired: chrono::DateTime<chrono::Utc> = v["expires_at"]
                .as_str()
                .and_then(|t| t.parse().ok())
                .expect("expires_at");
            tokio::time::sleep(Duration::from_millis(600)).await;
            let released = epoch.elapsed();
            let u = call(&c, "unlock_device", json!({"lease": v["lease_id"]})).await;
            assert!(!is_error(&u), "c{i} unlock: {}", text(&u));
            (i, board, asked, got, released, acquired)
        }));
    }
    let observer = connect(&s.url, Some(&token(0)), Era::Modern)
        .await
        .expect("observer");
    ready.wait().await;
    for i in 0..CLIENTS {
        turn_tx.send_replace(i);
        // A request counts as arrived once answered or queued; it is never both (it
        // leaves the queue before its answer is sent), so the sum never over-counts.
        let give_up = Instant::now() + Duration::from_secs(20);
        loop {
            let boards = structured(&call(&observer, "list_boards", json!({})).await);
            let queued = boards["boards"][0]["match_waiting"]
                .as_u64()
                .expect("match_waiting");
            let done = answered.load(std::sync::atomic::Ordering::SeqCst) as u64;
            if done + queued > i as u64 {
                break;
            }
            assert!(Instant::now() < give_up, "c{i}'s request never arrived");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let mut held = Vec::new();
    for t in tasks {
        held.push(t.await.expect("client task"));
    }
    for (i, board, asked, got, released, _) in &held {
        println!("c{i}: asked {asked:?}, got {board} at {got:?}, released at {released:?}");
        assert!(board.starts_with("rk"), "c{i} got {board}");
    }
    // No board to two clients: per board, the holds follow each other.
    for b in ["rk0", "rk1", "rk2"] {
        let mut on: Vec<_> = held.iter().filter(|h| h.1 == b).collect();
        on.sort_by_key(|h| h.3);
        for w in on.windows(2) {
            assert!(
                w[0].4 <= w[1].3,
                "{b} held by c{} and c{} at once",
                w[0].0,
                w[1].0
            );
        }
    }
    // At most 3 at once.
    for h in &held {
        let at_once = held.iter().filter(|o| o.3 <= h.3 && h.3 < o.4).count();
        assert!(at_once <= 3, "{at_once} boards held at {:?}", h.3);
    }
    // FIFO: served in the order asked.
    let mut by_grant = held.clone();
    by_grant.sort_by_key(|h| h.5);
    let order: Vec<usize> = by_grant.iter().map(|h| h.0).collect();
    assert_eq!(order, (0..CLIENTS).collect::<Vec<_>>(), "grant order");
    // The last ones waited: the queue was really used.
    assert!(held[CLIENTS - 1].3 - held[CLIENTS - 1].2 > Duration::from_millis(300));
}

/// A match nobody can satisfy is refused at once with the reason; a waiter that gives up
/// is told who holds each board.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_match_says_who_holds_each_board() {
    let s = Server::start(&allocation_config());
    let a = connect(&s.url, Some(&token(0)), Era::Modern)
        .await
        .expect("a");
    let b = connect(&s.url, Some(&token(1)), Era::Modern)
        .await
        .expect("b");
    let r = call(&a, "lock_board", json!({"match": {"soc": "rk9999"}})).await;
    assert_eq!(
        structured(&r)["refusal"]["reason"],
        "not_found",
        "{}",
        text(&r)
    );
    let r = call(
        &a,
        "lock_board",
        json!({"board": "other", "note": "bring-up"}),
    )
    .await;
    assert!(!is_error(&r), "{}", text(&r));
    assert_eq!(structured(&r)["key"], "board:other");
    let r = call(
        &b,
        "lock_board",
        json!({"match": {"soc": "rk3568"}, "wait_secs": 1}),
    )
    .await;
    let v = structured(&r);
    assert_eq!(v["refusal"]["reason"], "device_busy", "{v}");
    let msg = text(&r);
    assert!(
        msg.contains("other: leased by c0") && msg.contains("bring-up"),
        "{msg}"
    );
    let l = call(&b, "list_boards", json!({})).await;
    let boards = structured(&l)["boards"].clone();
    assert_eq!(boards.as_array().map(Vec::len), Some(4), "{boards}");
    let other = boards
        .as_array()
        .and_then(|v| v.iter().find(|x| x["name"] == "other"))
        .cloned()
        .unwrap_or(Value::Null);
    assert_eq!(other["lock"]["holder"], "c0", "{other}");
    assert_eq!(other["device"], Value::Null);
}

fn bench_config() -> String {
    format!(
        r#"
clients:
  - name: vm-a
    token: {TOKEN_A}
  - name: vm-b
    token: {TOKEN_B}
devices:
  - name: rockusb
    match: {{vid: "2207"}}
commands:
  - name: record
    binary: $DIR/record.sh
    device: rockusb
    allowed_args:
      - pattern: "{{who}}"
boards:
  - name: rock5b-1
    usb: "1-2"
    console: {{port: "1-3", baud: 1500000}}
    power: {{uhubctl: {{hub: "1-1", port: 2, binary: $DIR/uhubctl}}}}
"#
    )
}

/// The bench server with the board plugged in (MaskROM on 1-2).
fn start_bench(tb: &Testbed) -> Server {
    tb.add_from_string(RK3588_MASKROM_1_2);
    start_empty_bench(tb)
}

/// The bench server with nothing on the board's port.
fn start_empty_bench(tb: &Testbed) -> Server {
    tb.add_from_string(ROOT_HUB);
    let root = tb.root_dir();
    let s = Server::start_with(
        &bench_config(),
        &[],
        &[
            ("LD_PRELOAD", "libumockdev-preload.so.0"),
            ("UMOCKDEV_DIR", root.to_str().expect("utf8")),
        ],
    );
    let dir = s.dir.path();
    script(
        dir,
        "record.sh",
        &format!("echo \"$1\" >> {}/ran", dir.display()),
    );
    // The fake hub switch: records each action; the test plays the board's answer.
    script(
        dir,
        "uhubctl",
        &format!("echo \"$@\" >> {}/power", dir.display()),
    );
    s
}

fn board_of(list: &CallToolResult) -> Value {
    structured(list)["boards"][0].clone()
}

use rmcp::model::CallToolResult;

/// A board lease keeps another client's commands (by board and by device), port leases
/// and power actions out, with the usual holder text; the holder runs through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_board_lease_keeps_other_clients_out() {
    if !is_inner_run() {
        return rerun_under_preload(module_path!(), "a_board_lease_keeps_other_clients_out");
    }
    let tb = Testbed::new();
    let s = start_bench(&tb);
    let a = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("a");
    let b = connect(&s.url, Some(TOKEN_B), Era::Modern)
        .await
        .expect("b");
    wait_attached(&a).await;
    let r = call(
        &a,
        "lock_board",
        json!({"board": "rock5b-1", "note": "flashing"}),
    )
    .await;
    assert!(!is_error(&r), "{}", text(&r));
    let v = structured(&r);
    let lease = v["lease_id"].clone();
    assert_eq!(v["device"], "1-2", "{v}");
    assert_eq!(
        v["shared_keys"],
        json!(["port:1-2", "usb:2207:350b"]),
        "{v}"
    );

    for args in [
        json!({"command": "record", "args": ["b"], "board": "rock5b-1"}),
        json!({"command": "record", "args": ["b"], "device": "1-2"}),
        json!({"command": "record", "args": ["b"]}),
    ] {
        let r = call(&b, "execute_command", args.clone()).await;
        let v = structured(&r);
        assert_eq!(v["refusal"]["reason"], "device_busy", "{args}: {v}");
        let msg = text(&r);
        assert!(msg.contains("vm-a"), "{args}: {msg}");
    }
    let r = call(&b, "lock_device", json!({"key": "port:1-2"})).await;
    assert_eq!(
        structured(&r)["refusal"]["reason"],
        "device_busy",
        "{}",
        text(&r)
    );
    let r = call(
        &b,
        "power_board",
        json!({"board": "rock5b-1", "action": "off"}),
    )
    .await;
    assert!(is_error(&r), "{}", text(&r));
    assert_eq!(
        structured(&r)["refusal"]["reason"],
        "device_busy",
        "{}",
        text(&r)
    );
    assert!(!s.path("power").exists(), "b's power action ran");

    let r = call(
        &a,
        "execute_command",
        json!({"command": "record", "args": ["a"], "board": "rock5b-1", "lease": lease}),
    )
    .await;
    assert!(!is_error(&r), "{}", text(&r));
    let keys = structured(&r)["lock_keys"].clone();
    assert!(
        keys.as_array()
            .is_some_and(|k| k.contains(&json!("board:rock5b-1"))),
        "{keys}"
    );
    assert_eq!(
        std::fs::read_to_string(s.path("ran")).unwrap_or_default(),
        "a\n"
    );

    let d = call(&b, "list_devices", json!({})).await;
    assert_eq!(structured(&d)["devices"][0]["board"], "rock5b-1");
    let l = call(&b, "list_boards", json!({})).await;
    let board = board_of(&l);
    assert_eq!(board["soc"], "rk3588", "{board}");
    assert_eq!(board["mode"], "maskrom", "{board}");
    // The console's capture reports on its adapter: none is plugged on port 1-3 here.
    assert_eq!(board["console"]["state"], "absent", "{board}");
    assert_eq!(board["console"]["baud"], 1500000, "{board}");
    assert!(
        board["console"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("1-3")),
        "{board}"
    );
    assert_eq!(
        board["power"],
        json!({"backend": "uhubctl", "state": "unknown"})
    );
    assert_eq!(board["lock"]["holder"], "vm-a");
    assert!(
        board["lock"].get("lease_id").is_none(),
        "lease id shown to another client"
    );

    let u = call(&a, "unlock_device", json!({"lease": lease})).await;
    assert!(!is_error(&u), "{}", text(&u));
    let r = call(
        &b,
        "execute_command",
        json!({"command": "record", "args": ["b"], "board": "rock5b-1"}),
    )
    .await;
    assert!(!is_error(&r), "after release: {}", text(&r));
    // lock_device on the board key holds what lock_board holds.
    let r = call(&b, "lock_device", json!({"key": "board:rock5b-1"})).await;
    assert_eq!(
        structured(&r)["shared_keys"],
        json!(["port:1-2", "usb:2207:350b"]),
        "{}",
        text(&r)
    );
    let r = call(&a, "lock_device", json!({"key": "board:nosuch"})).await;
    assert_eq!(
        structured(&r)["refusal"]["reason"],
        "not_found",
        "{}",
        text(&r)
    );
}

/// A board leased while nothing is attached holds no VID:PID key; a device that then
/// enumerates on its port is still the board's: another client's command on it, by port or
/// through the command's device class (the `usb:2207:350b` key), is refused with the holder
/// named, even under a lease that client took on that VID:PID key meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_arriving_on_a_leased_empty_board_is_the_boards() {
    if !is_inner_run() {
        return rerun_under_preload(
            module_path!(),
            "a_device_arriving_on_a_leased_empty_board_is_the_boards",
        );
    }
    let tb = Testbed::new();
    let s = start_empty_bench(&tb);
    let a = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("a");
    let b = connect(&s.url, Some(TOKEN_B), Era::Legacy)
        .await
        .expect("b");
    let r = call(&a, "lock_board", json!({"board": "rock5b-1"})).await;
    assert!(!is_error(&r), "{}", text(&r));
    let v = structured(&r);
    assert_eq!(v["device"], Value::Null, "{v}");
    let shared = v["shared_keys"].to_string();
    assert!(!shared.contains("usb:"), "no device, no VID:PID key: {v}");

    tb.add_from_string(RK3588_MASKROM_1_2);
    wait_attached(&b).await;
    for args in [
        json!({"command": "record", "args": ["b"], "device": "1-2"}),
        json!({"command": "record", "args": ["b"]}),
    ] {
        let r = call(&b, "execute_command", args.clone()).await;
        let v = structured(&r);
        assert_eq!(v["refusal"]["reason"], "device_busy", "{args}: {v}");
        assert!(text(&r).contains("vm-a"), "{args}: {}", text(&r));
    }
    assert!(!s.path("ran").exists(), "b's command ran on a's board");
    // Even a lease b takes on the VID:PID key does not get it onto the board.
    let r = call(&b, "lock_device", json!({"key": "usb:2207:350b"})).await;
    assert!(!is_error(&r), "{}", text(&r));
    let lease = structured(&r)["lease_id"].clone();
    for args in [
        json!({"command": "record", "args": ["b"], "lease": lease}),
        json!({"command": "record", "args": ["b"], "device": "1-2", "lease": lease}),
    ] {
        let r = call(&b, "execute_command", args.clone()).await;
        let v = structured(&r);
        assert_eq!(v["refusal"]["reason"], "device_busy", "{args}: {v}");
        assert!(text(&r).contains("vm-a"), "{args}: {}", text(&r));
    }
    assert!(!s.path("ran").exists(), "b's command ran on a's board");
}

async fn wait_attached(c: &Client) {
    let r = call(
        c,
        "wait_for_device",
        json!({"match": {"id": "1-2"}, "state": "attached", "timeout_secs": 10}),
    )
    .await;
    assert!(!is_error(&r), "{}", text(&r));
}

/// `power_board cycle` runs the fake uhubctl off, waits, on; the test plays the board
/// (unplug on off, replug on on), and list_boards shows it leave and come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_cycle_unplugs_and_replugs_the_board() {
    if !is_inner_run() {
        return rerun_under_preload(module_path!(), "power_cycle_unplugs_and_replugs_the_board");
    }
    let tb = Testbed::new();
    let s = start_bench(&tb);
    let a = Arc::new(
        connect(&s.url, Some(TOKEN_A), Era::Modern)
            .await
            .expect("a"),
    );
    wait_attached(&a).await;
    let (watcher, mut heard) = connect_recorder(&s.url, Some(TOKEN_B), Era::Legacy)
        .await
        .expect("watcher");
    watcher
        .subscribe(rmcp::model::SubscribeRequestParams::new(
            "gatecmd://boards/rock5b-1",
        ))
        .await
        .expect("subscribe");
    let r = call(
        &a,
        "power_board",
        json!({"board": "rock5b-1", "action": "on"}),
    )
    .await;
    assert_eq!(
        structured(&r)["refusal"]["reason"],
        "lease_missing",
        "{}",
        text(&r)
    );
    let r = call(&a, "lock_board", json!({"board": "rock5b-1"})).await;
    let lease = structured(&r)["lease_id"].clone();
    let cycle = {
        let a = Arc::clone(&a);
        let lease = lease.clone();
        tokio::spawn(async move {
            call(
                &a,
                "power_board",
                json!({"board": "rock5b-1", "action": "cycle", "off_secs": 2, "lease": lease}),
            )
            .await
        })
    };
    let power = s.path("power");
    let read = || std::fs::read_to_string(&power).unwrap_or_default();
    wait_until("uhubctl off", Duration::from_secs(10), || {
        read().contains("-a off")
    })
    .await;
    assert_eq!(read().trim(), "-l 1-1 -p 2 -a off");
    tb.unplug(SYS_1_2);
    let mut left = false;
    for _ in 0..100 {
        let l = call(&a, "list_boards", json!({})).await;
        if board_of(&l)["device"].is_null() {
            assert_eq!(board_of(&l)["power"]["state"], "off");
            left = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(left, "the board never left");
    wait_until("uhubctl on", Duration::from_secs(10), || {
        read().contains("-a on")
    })
    .await;
    tb.add_from_string(RK3588_MASKROM_1_2);
    let r = cycle.await.expect("cycle task");
    assert!(!is_error(&r), "{}", text(&r));
    let v = structured(&r);
    assert_eq!(v["state"], "on", "{v}");
    assert_eq!(v["argv"].as_array().map(Vec::len), Some(2), "{v}");
    assert!(
        v["duration_ms"].as_u64().is_some_and(|ms| ms >= 2000),
        "{v}"
    );
    wait_attached(&a).await;
    let l = call(&a, "list_boards", json!({})).await;
    let board = board_of(&l);
    assert_eq!(board["device"]["id"], "1-2", "{board}");
    assert_eq!(board["power"]["state"], "on", "{board}");
    // The subscriber heard the board change (lease, power, device leaving and returning).
    let mut updates = 0;
    while let Ok(h) = heard.try_recv() {
        if matches!(&h, Heard::ResourceUpdated(u) if u == "gatecmd://boards/rock5b-1") {
            updates += 1;
        }
    }
    assert!(updates >= 3, "{updates} board updates heard");
    let read = watcher
        .read_resource(rmcp::model::ReadResourceRequestParams::new(
            "gatecmd://boards/rock5b-1",
        ))
        .await
        .expect("read board resource");
    let body = format!("{:?}", read.contents);
    assert!(
        body.contains("uhubctl") && body.contains("rock5b-1"),
        "{body}"
    );
    let audit = crate::harness::settled_audit(s.path("state/audit.log")).unwrap_or_default();
    assert!(audit.contains("\"event\":\"power_board\""), "{audit}");
}

/// `gatecmd check` (the real binary) names file, line and field of each board error, and
/// prints a valid board section.
#[test]
fn check_names_file_line_and_field_of_board_errors() {
    let bin = std::env::var_os("GATECMD_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_gatecmd").into());
    let dir = tempfile::tempdir().expect("tempdir");
    let run = |yaml: &str| {
        let cfg = dir.path().join("boards.yaml");
        std::fs::write(&cfg, yaml).expect("write");
        let out = std::process::Command::new(&bin)
            .arg("check")
            .arg("--config")
            .arg(&cfg)
            .output()
            .expect("run check");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let bad = "boards:\n  - name: a\n    usb: \"1-2\"\n  - name: b\n    usb: \"1-2\"\n    console: {port: \"1-3\", baud: 1234}\n    power: {on: {command: relay, args: \"on 1\"}, off: {command: relay, args: \"off 1\"}}\n";
    let (code, _, err) = run(bad);
    assert_eq!(code, Some(2), "{err}");
    for want in [
        "boards.yaml:5:5: boards[1].usb: board \"b\" is on usb port \"1-2\", which board \"a\" already uses",
        "boards.yaml:6:28: boards[1].console.baud: baud rate 1234",
        "boards.yaml:7:18: boards[1].power.on.command: unknown command \"relay\"",
    ] {
        assert!(err.contains(want), "missing {want:?} in:\n{err}");
    }
    let good = "boards:\n  - name: a\n    tags: {soc: rk3588}\n    usb: \"1-2\"\n    console: {port: \"1-3\", baud: 1500000}\n    power: {uhubctl: {hub: \"1-1\", port: 2}}\n  - name: b\n    usb: \"1-4\"\n    console: {port: \"1-5\", baud: 115200, buffer_bytes: 65536}\n";
    let (code, out, err) = run(good);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("a: usb 1-2, soc=rk3588, console port 1-3 at 1500000 baud, power /usr/sbin/uhubctl -l 1-1 -p 2 -a on|off"),
        "{out}"
    );
    assert!(
        out.contains("b: usb 1-4, console port 1-5 at 115200 baud, ring 65536 bytes"),
        "{out}"
    );
}

/// The `commands` power backend: the configured relay command with its args, checked by
/// the sanitizer, under the caller's lease; without the lease id the holder is told it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_through_configured_commands() {
    let yaml = format!(
        r#"
clients:
  - name: vm-a
    token: {TOKEN_A}
commands:
  - name: relay
    binary: $DIR/relay
    allowed_args:
      - pattern: "on {{n}}"
      - pattern: "off {{n}}"
    params: {{n: "^[0-9]$"}}
boards:
  - name: rig
    usb: "2-1"
    power:
      on: {{command: relay, args: "on 3"}}
      off: {{command: relay, args: ["off", "3"]}}
"#
    );
    let s = Server::start(&yaml);
    let dir = s.dir.path();
    script(
        dir,
        "relay",
        &format!("echo \"$@\" >> {}/relay.log", dir.display()),
    );
    let a = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("a");
    let r = call(&a, "lock_board", json!({"board": "rig"})).await;
    let lease = structured(&r)["lease_id"].clone();
    let r = call(&a, "power_board", json!({"board": "rig", "action": "off"})).await;
    assert_eq!(
        structured(&r)["refusal"]["reason"],
        "lease_missing",
        "{}",
        text(&r)
    );
    assert!(
        text(&r).contains(lease.as_str().unwrap_or("?")),
        "{}",
        text(&r)
    );
    let r = call(
        &a,
        "power_board",
        json!({"board": "rig", "action": "cycle", "off_secs": 0, "lease": lease}),
    )
    .await;
    assert!(!is_error(&r), "{}", text(&r));
    let v = structured(&r);
    let relay = format!("{}/relay", dir.display());
    assert_eq!(
        v["argv"],
        json!([[relay, "off", "3"], [relay, "on", "3"]]),
        "{v}"
    );
    assert_eq!(v["state"], "on");
    assert_eq!(
        std::fs::read_to_string(s.path("relay.log")).unwrap_or_default(),
        "off 3\non 3\n"
    );
    let l = call(&a, "list_boards", json!({})).await;
    assert_eq!(
        structured(&l)["boards"][0]["power"],
        json!({"backend": "commands", "state": "on"})
    );
}
