//! Per-board isolation end to end: the real `gatecmd` binary under the umockdev preload,
//! two identical RK3588 boards (2207:350b on ports 1-2 and 1-3), real programs that
//! enumerate through libusb and libudev (`lsusb`, Debian's `rkdeveloptool`), and a fake
//! flashing tool that records which usbfs node it found and when.
//!
//! The views are built over the testbed (`isolation.sysfs_root`/`devfs_root` point into
//! `$UMOCKDEV_DIR`); the children inherit the preload from the server (exec.rs
//! `umockdev_env`), so they see the testbed as /sys and /dev, and in it only their board.
#![cfg(feature = "udev")]

use crate::common;
use crate::harness;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::umockdev::{Testbed, is_inner_run, rerun_under_preload};
use common::{RK3588_LOADER_1_2, RK3588_MASKROM_1_2, RK3588_MASKROM_1_3, ROOT_HUB, SYS_1_2};
use harness::*;
use serde_json::{Value, json};

const LSUSB: &str = "/usr/bin/lsusb";
const RKDEVELOPTOOL: &str = "/usr/bin/rkdeveloptool";

const TOKEN_C: &str = "token-for-vm-c-5555555555";

/// A stand-in for a flashing tool without a device selector: it takes the only usbfs
/// node it can find (refusing, like rkdeveloptool, when there are several), opens it,
/// and logs `start NODE TIME` / `end NODE TIME`.
const FAKE_FLASH: &str = r#"set -- /dev/bus/usb/*/*
if [ "$#" -ne 1 ]; then echo "Found too many rockusb devices ($#): $*" >&2; exit 3; fi
node=$1
exec 3<"$node" || exit 4
echo "start $node $(date +%s.%N)" >> "$FAKE_FLASH_LOG"
sleep "${FAKE_FLASH_SECS:-0.3}"
echo "end $node $(date +%s.%N)" >> "$FAKE_FLASH_LOG"
echo "wrote $node""#;

fn config(root: &Path, tools: &Path) -> String {
    let root = root.display();
    let tools = tools.display();
    format!(
        r#"
clients:
  - name: vm-a
    token: {TOKEN_A}
  - name: vm-b
    token: {TOKEN_B}
  - name: vm-c
    token: {TOKEN_C}
devices:
  - name: rockusb
    match: {{vid: "2207", pid: "350b"}}
isolation:
  sysfs_root: {root}/sys
  devfs_root: {root}/dev
commands:
  - name: lsusb
    binary: {LSUSB}
    device: rockusb
    isolate: true
    allowed_args:
      - pattern: ""
  - name: lsusb-all
    binary: {LSUSB}
    device: rockusb
    allowed_args:
      - pattern: ""
  - name: rkdeveloptool
    binary: {RKDEVELOPTOOL}
    device: rockusb
    isolate: true
    allowed_args:
      - pattern: ld
  - name: rkdeveloptool-all
    binary: {RKDEVELOPTOOL}
    device: rockusb
    allowed_args:
      - pattern: ld
  - name: flash
    binary: {tools}/fake-flash
    device: rockusb
    isolate: true
    env: {{FAKE_FLASH_LOG: "{tools}/flash.log", FAKE_FLASH_SECS: "0.3"}}
    allowed_args:
      - pattern: wl {{lba}}
    params: {{lba: "[0-9]+"}}
"#
    )
}

fn start(tb: &Testbed, tools: &Path) -> Server {
    let root = tb.root_dir();
    let root_str = root.to_str().expect("utf8");
    Server::start_with(
        &config(&root, tools),
        &[],
        &[
            ("LD_PRELOAD", "libumockdev-preload.so.0"),
            ("UMOCKDEV_DIR", root_str),
        ],
    )
}

fn testbed_with_two_boards() -> Testbed {
    let tb = Testbed::new();
    tb.add_from_string(ROOT_HUB);
    tb.add_from_string(RK3588_MASKROM_1_2);
    tb.add_from_string(RK3588_MASKROM_1_3);
    tb
}

async fn wait_for_boards(c: &Client, n: usize) {
    for _ in 0..250 {
        let r = call(c, "list_devices", json!({"class": "rockusb"})).await;
        if structured(&r)["devices"].as_array().map_or(0, |a| a.len()) == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the server never listed {n} boards");
}

/// `execute_command` of `command` with the other arguments in `args`.
async fn run(c: &Client, command: &str, args: Value) -> rmcp::model::CallToolResult {
    let mut args = args;
    args["command"] = json!(command);
    call(c, "execute_command", args).await
}

fn stdout_of(r: &rmcp::model::CallToolResult) -> String {
    structured(r)["stdout"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn isolated_programs_see_only_the_chosen_board() {
    if !is_inner_run() {
        return rerun_under_preload(
            module_path!(),
            "isolated_programs_see_only_the_chosen_board",
        );
    }
    let tools = tempfile::tempdir().expect("tempdir");
    script(tools.path(), "fake-flash", FAKE_FLASH);
    let tb = testbed_with_two_boards();
    let s = start(&tb, tools.path());
    let c = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("connect");
    wait_for_boards(&c, 2).await;

    // Without isolation, the same programs see both boards.
    let all = run(&c, "lsusb-all", json!({})).await;
    let out = stdout_of(&all);
    assert!(
        out.contains("Bus 001 Device 002: ID 2207:350b")
            && out.contains("Bus 001 Device 004: ID 2207:350b"),
        "{}",
        text(&all)
    );
    let all = run(&c, "rkdeveloptool-all", json!({"args": ["ld"]})).await;
    let out = stdout_of(&all);
    assert!(
        out.contains("LocationID=102") && out.contains("LocationID=103"),
        "{}",
        text(&all)
    );

    // Isolated, each run sees exactly its board: libusb and libudev enumerate one device.
    for (board, devnum, other, location) in
        [("1-2", "002", "004", "102"), ("1-3", "004", "002", "103")]
    {
        let r = run(&c, "lsusb", json!({"device": board})).await;
        assert!(!is_error(&r), "{}", text(&r));
        let out = stdout_of(&r);
        assert_eq!(out.lines().count(), 1, "lsusb on {board}: {out}");
        assert!(
            out.contains(&format!("Bus 001 Device {devnum}: ID 2207:350b")),
            "{out}"
        );
        assert!(!out.contains(&format!("Device {other}")), "{out}");
        let sc = structured(&r);
        assert_eq!(sc["device"], json!(board));
        assert_eq!(sc["lock_keys"], json!([format!("port:{board}")]));
        assert_eq!(sc["shared_lock_keys"], json!(["usb:2207:350b"]));
        assert_eq!(sc["isolated_view"]["device"], json!(board));

        let r = run(
            &c,
            "rkdeveloptool",
            json!({"args": ["ld"], "device": board}),
        )
        .await;
        assert!(!is_error(&r), "{}", text(&r));
        let out = stdout_of(&r);
        assert_eq!(out.lines().count(), 1, "rkdeveloptool ld on {board}: {out}");
        assert!(out.contains(&format!("LocationID={location}")), "{out}");

        // A tool without a selector that refuses several boards works on each.
        let r = run(&c, "flash", json!({"args": ["wl", "0"], "device": board})).await;
        assert!(!is_error(&r), "{}", text(&r));
        assert!(
            stdout_of(&r).contains(&format!("wrote /dev/bus/usb/001/{devnum}")),
            "{}",
            text(&r)
        );
    }

    // With two boards attached, an isolated command needs to be told which.
    let r = run(&c, "lsusb", json!({})).await;
    assert!(is_error(&r));
    assert!(
        text(&r).contains("2 rockusb boards are attached (1-2, 1-3)")
            && text(&r).contains("pass `device`"),
        "{}",
        text(&r)
    );

    // A dry run shows the view it would build, and builds nothing.
    let r = run(&c, "lsusb", json!({"device": "1-3", "dry_run": true})).await;
    assert!(!is_error(&r), "{}", text(&r));
    let view = &structured(&r)["isolated_view"];
    assert_eq!(view["device"], json!("1-3"));
    assert_eq!(view["sysfs_entries"], json!(["1-3", "1-3:1.0"]));
    assert_eq!(view["devnum"], json!(4));
    let root = tb.root_dir();
    assert_eq!(
        view["device_nodes"],
        json!([format!("{}/dev/bus/usb/001/004", root.display())])
    );
    assert_eq!(view["privilege"], json!("root"));
    assert!(
        text(&r).contains("holds only: 1-3, 1-3:1.0"),
        "{}",
        text(&r)
    );

    // Re-enumeration: board 1-2 comes back in Loader mode with a new device number; the
    // next isolated command sees it as it is now.
    tb.unplug(SYS_1_2);
    tb.add_from_string(RK3588_LOADER_1_2);
    for _ in 0..250 {
        let r = call(&c, "list_devices", json!({"id": "1-2"})).await;
        if structured(&r)["devices"][0]["devnum"] == json!(5) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r = run(&c, "lsusb", json!({"device": "1-2"})).await;
    let out = stdout_of(&r);
    assert!(
        out.contains("Bus 001 Device 005: ID 2207:350b"),
        "{}",
        text(&r)
    );
    assert_eq!(out.lines().count(), 1, "{out}");
    let r = run(
        &c,
        "rkdeveloptool",
        json!({"args": ["ld"], "device": "1-2"}),
    )
    .await;
    assert!(stdout_of(&r).contains("Loader"), "{}", text(&r));
    // The host's view was never touched.
    let listing: Vec<String> = std::fs::read_dir(root.join("sys/bus/usb/devices"))
        .expect("listing")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        listing.iter().any(|n| n == "1-3") && listing.iter().any(|n| n == "usb1"),
        "{listing:?}"
    );
}

/// Parses the fake flasher's log into (node, start, end) intervals.
fn intervals(log: &str) -> Vec<(String, f64, f64)> {
    let mut open: BTreeMap<String, f64> = BTreeMap::new();
    let mut out = Vec::new();
    for line in log.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let [what, node, t] = parts.as_slice() else {
            panic!("bad log line {line:?}")
        };
        let t: f64 = t.parse().expect("time");
        match *what {
            "start" => {
                assert!(
                    open.insert(node.to_string(), t).is_none(),
                    "two runs on {node} at once:\n{log}"
                );
            }
            "end" => {
                let start = open.remove(*node).expect("end without start");
                out.push((node.to_string(), start, t));
            }
            other => panic!("bad log line {other:?}"),
        }
    }
    assert!(open.is_empty(), "runs that never ended: {open:?}");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_flash_two_identical_boards_at_once_under_board_leases() {
    if !is_inner_run() {
        return rerun_under_preload(
            module_path!(),
            "two_clients_flash_two_identical_boards_at_once_under_board_leases",
        );
    }
    let tools = tempfile::tempdir().expect("tempdir");
    script(tools.path(), "fake-flash", FAKE_FLASH);
    let tb = testbed_with_two_boards();
    let s = start(&tb, tools.path());
    let a = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("a");
    let b = connect(&s.url, Some(TOKEN_B), Era::Legacy)
        .await
        .expect("b");
    let c = connect(&s.url, Some(TOKEN_C), Era::Modern)
        .await
        .expect("c");
    wait_for_boards(&a, 2).await;

    // `lock_device {device}` on a class with isolated commands leases the board.
    let la = call(
        &a,
        "lock_device",
        json!({"device": "1-2", "note": "flashing 1-2"}),
    )
    .await;
    assert!(!is_error(&la), "{}", text(&la));
    assert_eq!(structured(&la)["key"], json!("port:1-2"));
    assert_eq!(structured(&la)["shared_keys"], json!(["usb:2207:350b"]));
    let lease_a = structured(&la)["lease_id"]
        .as_str()
        .expect("lease")
        .to_string();
    let lb = call(&b, "lock_device", json!({"key": "port:1-3"})).await;
    assert!(!is_error(&lb), "{}", text(&lb));
    let lease_b = structured(&lb)["lease_id"]
        .as_str()
        .expect("lease")
        .to_string();

    // Nobody can take the whole VID:PID while boards are leased...
    let r = run(&c, "lsusb-all", json!({})).await;
    assert!(is_error(&r));
    assert!(text(&r).contains("through board port:1-2"), "{}", text(&r));
    let r = call(&c, "lock_device", json!({"key": "usb:2207:350b"})).await;
    assert!(is_error(&r), "{}", text(&r));
    // ...nor use a leased board.
    let r = run(&c, "flash", json!({"args": ["wl", "9"], "device": "1-2"})).await;
    assert!(is_error(&r));
    assert!(
        text(&r).contains(
            "device port:1-2 is locked by client \"vm-a\" (lease, note: \"flashing 1-2\")"
        ),
        "{}",
        text(&r)
    );
    let r = call(&a, "list_devices", json!({"id": "1-2"})).await;
    let d = &structured(&r)["devices"][0];
    assert_eq!(d["board_lock"]["key"], json!("port:1-2"));
    assert_eq!(d["board_lock"]["lease_id"], json!(lease_a));
    assert_eq!(d["lock"]["shared_by"][0]["via"], json!("port:1-2"));

    let flash_three = |client: Client, board: &'static str, lease: String| async move {
        for lba in 0..3 {
            let r = run(
                &client,
                "flash",
                json!({"args": ["wl", lba.to_string()], "device": board, "lease": lease}),
            )
            .await;
            assert!(!is_error(&r), "{board}: {}", text(&r));
            assert_eq!(structured(&r)["isolated_view"]["device"], json!(board));
        }
        client
    };
    // vm-c queues for board 1-2 behind vm-a's lease, while vm-a and vm-b flash.
    let c_task = tokio::spawn(async move {
        let r = run(
            &c,
            "flash",
            json!({"args": ["wl", "7"], "device": "1-2", "wait_secs": 30}),
        )
        .await;
        assert!(!is_error(&r), "vm-c: {}", text(&r));
        c
    });
    let (a, b) = tokio::join!(
        flash_three(a, "1-2", lease_a.clone()),
        flash_three(b, "1-3", lease_b.clone())
    );
    for (client, lease) in [(&a, &lease_a), (&b, &lease_b)] {
        let r = call(client, "unlock_device", json!({"lease": lease})).await;
        assert!(!is_error(&r), "{}", text(&r));
    }
    let _c = tokio::time::timeout(Duration::from_secs(30), c_task)
        .await
        .expect("vm-c ran after the lease ended")
        .expect("vm-c task");

    let log = std::fs::read_to_string(tools.path().join("flash.log")).expect("flash log");
    let runs = intervals(&log);
    let on = |node: &str| -> Vec<(f64, f64)> {
        runs.iter()
            .filter(|(n, _, _)| n == node)
            .map(|(_, s, e)| (*s, *e))
            .collect()
    };
    let (b2, b4) = (on("/dev/bus/usb/001/002"), on("/dev/bus/usb/001/004"));
    assert_eq!((b2.len(), b4.len()), (4, 3), "{log}");
    // On one board, never two at once (the log parser also checks this as it goes).
    for runs in [&b2, &b4] {
        let mut sorted = runs.clone();
        sorted.sort_by(|x, y| x.0.total_cmp(&y.0));
        for w in sorted.windows(2) {
            assert!(w[0].1 <= w[1].0, "overlap on one board: {w:?}\n{log}");
        }
    }
    // On different boards, at the same time.
    let overlapping = b2.iter().any(|x| b4.iter().any(|y| x.0 < y.1 && y.0 < x.1));
    assert!(
        overlapping,
        "the two boards were never flashed at once:\n{log}"
    );
}
