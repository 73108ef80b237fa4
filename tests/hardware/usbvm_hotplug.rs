//! Hotplug over a real kernel with no udev daemon: the real `gatecmd serve` runs in the
//! usbvm guest (tests/vm: Debian's kernel under QEMU, `dummy_hcd` gadgets as USB
//! devices), with the udev backend and systemd-udevd stopped, so it must take the kernel's
//! own uevents (`listening to kernel uevents` in its log). From the host, over the forwarded
//! port, a real MCP client subscribed to `gatecmd://devices` watches a Rockchip board plug
//! in (MaskROM), re-enumerate on the same port in Loader mode, and leave. About 15 s.
//!
//! umockdev tests cover the udev-daemon path; this is the kernel-uevent path's live test.
#![allow(deprecated)] // resources/subscribe is the 2025-11-25 way, which is served on purpose

use crate::harness;
use crate::usbvm;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use harness::*;
use serde_json::{Value, json};

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// Waits until a notification about the devices arrives (list changed, or the
/// `gatecmd://devices` resource updated); returns how long it took.
async fn heard_devices(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<Heard>,
    what: &str,
    since: Instant,
) -> Duration {
    let deadline = since + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, rx.recv()).await {
            Ok(Some(Heard::ResourceListChanged)) => return since.elapsed(),
            Ok(Some(Heard::ResourceUpdated(u))) if u.starts_with("gatecmd://devices") => {
                return since.elapsed();
            }
            Ok(Some(_)) => continue,
            _ => panic!("no devices notification for {what} within 20 s"),
        }
    }
}

async fn devices(c: &Client) -> Vec<Value> {
    let r = call(c, "list_devices", json!({})).await;
    structured(&r)["devices"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Polls `list_devices` until `pred` holds (the notification may come a moment before the
/// registry shows every attribute).
async fn devices_until(c: &Client, what: &str, pred: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let d = devices(c).await;
        if pred(&d) {
            return d;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: list_devices shows {d:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usbvm_kernel_uevent_hotplug() {
    let Some(dir) = usbvm::available("usbvm_kernel_uevent_hotplug") else {
        return;
    };
    let _guest = usbvm::guest_turn().await;
    let t0 = Instant::now();
    let work = tempfile::tempdir().expect("tempdir");
    let bin = std::env::var_os("GATECMD_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_gatecmd")));
    let guest_bin = usbvm::stripped(&bin, work.path());
    let cfg = work.path().join("gatecmd.yaml");
    std::fs::write(
        &cfg,
        format!(
            r#"
clients:
  - name: vm-a
    token: {TOKEN_A}
monitor: {{backend: udev}}
devices:
  - name: rockusb
    match: {{vid: "2207"}}
"#
        ),
    )
    .expect("config");
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let port = free_port();
    let vm_dir = work.path().join("vm");
    std::fs::create_dir(&vm_dir).expect("vm dir");
    let bind = format!("0.0.0.0:{port}");
    let options = [
        "--hold".to_string(),
        "--timeout".into(),
        "180".into(),
        "--port".into(),
        port.to_string(),
        "--file".into(),
        format!("{}:/etc/gatecmd/gatecmd.yaml", cfg.display()),
        "--env".into(),
        "STATE_DIRECTORY=/tmp/gatecmd-state".into(),
        "--env".into(),
        "GATECMD_LOG=info".into(),
    ];
    let mut vm = usbvm::Vm::start(
        &dir,
        &vm_dir,
        &guest_bin,
        &options,
        &[
            "serve",
            "--config",
            "/etc/gatecmd/gatecmd.yaml",
            "--bind",
            &bind,
        ],
    );
    let booted = t0.elapsed();
    // No udev daemon: the guest's systemd-udevd goes, and with it the socket gatecmd
    // looks for. (The harness's `udevadm settle` then returns at once; it checks sysfs.)
    let stopped = vm.command(
        "exec kill $(pidof systemd-udevd); rm -f /run/udev/control; \
         for i in 1 2 3 4 5 6 7 8 9 10; do pidof systemd-udevd >/dev/null || exit 0; sleep 0.2; done; exit 1",
        30,
    );
    assert_eq!(
        stopped.text, "rc=0",
        "systemd-udevd did not stop: {stopped:?}"
    );
    vm.command("start", 30);

    // The guest's server is reachable once it listens (a connect may succeed before that
    // and then be reset: retry).
    let url = format!("http://127.0.0.1:{port}/mcp");
    let deadline = Instant::now() + Duration::from_secs(60);
    let (watcher, mut heard) = loop {
        match connect_recorder(&url, Some(TOKEN_A), Era::Legacy).await {
            Ok(c) => break c,
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "gatecmd in the guest never answered: {e}\n{}",
                    vm.log()
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    assert!(
        vm.log().contains("listening to kernel uevents"),
        "gatecmd did not take the kernel-uevent path:\n{}",
        vm.log()
    );
    watcher
        .subscribe(rmcp::model::SubscribeRequestParams::new(
            "gatecmd://devices",
        ))
        .await
        .expect("subscribe");
    let c = connect(&url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("a second client");
    assert_eq!(
        devices(&c).await,
        Vec::<Value>::new(),
        "nothing plugged yet"
    );

    // Plug: a Rockchip board in MaskROM (bcdUSB 0x0200) on port 1-1.
    let t = Instant::now();
    let plugged = vm.command("plug rk 0x2207 0x350b 0x0200", 60);
    assert!(plugged.text.contains("dev=1-1"), "{plugged:?}");
    let plug_heard = heard_devices(&mut heard, "plug", t).await;
    let d = devices_until(&c, "plug", |d| d.len() == 1).await;
    assert_eq!(
        (&d[0]["id"], &d[0]["vid"], &d[0]["pid"], &d[0]["mode"]),
        (
            &json!("1-1"),
            &json!("2207"),
            &json!("350b"),
            &json!("maskrom")
        ),
        "{d:?}"
    );
    let devnum = d[0]["devnum"].clone();

    // Re-enumeration on the same port, now in Loader mode (bcdUSB 0x0201): same id, new
    // devnum, new mode.
    while heard.try_recv().is_ok() {}
    let t = Instant::now();
    vm.command("replug rk 0x0201 200", 60);
    let replug_heard = heard_devices(&mut heard, "replug", t).await;
    let d = devices_until(&c, "replug", |d| d.len() == 1 && d[0]["mode"] == "loader").await;
    assert_eq!(d[0]["id"], "1-1", "{d:?}");
    assert_ne!(
        d[0]["devnum"], devnum,
        "a re-enumeration gives a new devnum: {d:?}"
    );

    // Unplug: the board leaves.
    while heard.try_recv().is_ok() {}
    let t = Instant::now();
    vm.command("unplug rk", 60);
    let unplug_heard = heard_devices(&mut heard, "unplug", t).await;
    devices_until(&c, "unplug", |d| d.is_empty()).await;
    drop((c, watcher));
    drop(vm);
    // Straight to stderr: libtest hides a passing test's captured output.
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "usbvm_kernel_uevent_hotplug: VM up in {booted:?}; notified {plug_heard:?} after plug \
         was sent, {replug_heard:?} after replug, {unplug_heard:?} after unplug; {:?} in all",
        t0.elapsed()
    );
}
