//! A board console over a real kernel: the repository's test VM (tests/vm) boots Debian's
//! kernel in QEMU with `dummy_hcd`, and `plug … function=acm` gives a real CDC-ACM adapter
//! (`/dev/ttyACM0` under port `1-1`) whose board side is `/dev/ttyGS0`.
//!
//! `usbvm_acm_console` (host) strips a copy of this test binary and runs it in the VM as
//! `usbvm_guest_side`, driven by tests/usbvm/console_acm.py: the console is configured by
//! USB port (`port: "1-1"`), so the tty is found in the real sysfs; the host writes a boot
//! log on ttyGS0, the guest waits for it with a regex, writes Ctrl-C back, the adapter is
//! re-plugged and capture resumes. The host test runs in `make test` (about 20 s under
//! TCG; scripts/setup.sh --test prepares the harness) and skips with a `SKIP:` line where
//! the harness is absent or QEMU is missing (under `CI=true` a missing QEMU fails it, since
//! setup installs QEMU wherever the harness is). The guest side stays ignored: only the
//! VM runs it.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gatecmd_domain::console::{ConsoleConfig, ConsoleSettings, ConsoleState, Consoles, ReadSpec};
use tokio_util::sync::CancellationToken;

use crate::harness;
use crate::usbvm;

/// About 20 s: boot (~5 s under TCG), plug, two reads, a replug.
#[test]
fn usbvm_acm_console() {
    let Some(dir) = usbvm::available("usbvm_acm_console") else {
        return;
    };
    let _guest = usbvm::guest_turn_blocking();
    let me = std::env::current_exe().expect("current exe");
    let work = tempfile::tempdir().expect("tempdir");
    let guest = usbvm::stripped(&me, work.path());
    let driver = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/usbvm/console_acm.py");
    let out = Command::new("python3")
        .arg(&driver)
        .arg(&dir)
        .arg(&guest)
        .arg(harness::test_path(module_path!(), "usbvm_guest_side"))
        .output()
        .expect("run the driver");
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}");
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the usbvm scenario failed");
    assert!(text.contains("PASS"), "{text}");
}

fn say(line: &str) {
    // The guest's stdout is the VM console the host driver reads.
    println!("GUEST {line}");
}

async fn wait_state(c: &Consoles, want: ConsoleState, label: &str, secs: u64) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let v = c.view("board").expect("console");
        if v.state == want {
            say(&format!("{label} tty={:?}", v.tty));
            return;
        }
        assert!(Instant::now() < deadline, "never {want:?}: {v:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The guest side; only meaningful inside the VM (`USBVM=1`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs inside the usbvm guest, started by usbvm_acm_console"]
async fn usbvm_guest_side() {
    if std::env::var_os("USBVM").is_none() {
        return harness::skip(
            "usbvm_guest_side",
            harness::Unavailable::HostProperty,
            "not inside the usbvm guest (usbvm_acm_console starts it there)",
        );
    }
    let settings = ConsoleSettings {
        retry: Duration::from_millis(50),
        ..Default::default()
    };
    let c = Consoles::new(settings, Arc::new(|_: &str, _: &str| Ok(())));
    c.start(
        [(
            "board".to_string(),
            ConsoleConfig {
                port: Some("1-1".into()),
                path: None,
                baud: 1_500_000,
                buffer_bytes: 1 << 20,
            },
        )],
        None,
    );
    say("ready");
    wait_state(&c, ConsoleState::Open, "open1", 60).await;
    let console = c.get("board").expect("console");
    let never = CancellationToken::new();
    let spec = |cursor: Option<u64>, re: &str| ReadSpec {
        cursor,
        max_bytes: 1 << 16,
        tail_bytes: None,
        wait_for: Some(regex::Regex::new(re).expect("regex")),
        timeout: Duration::from_secs(60),
    };
    let r = console
        .read(&spec(Some(0), "Hit any key"), &never)
        .await
        .expect("read");
    assert!(r.matched, "{r:?}");
    say(&format!("matched1 {:?}", r.text));
    console.write(b"\x03").await.expect("write Ctrl-C");
    say("wrote");
    wait_state(&c, ConsoleState::Absent, "absent", 60).await;
    wait_state(&c, ConsoleState::Open, "open2", 60).await;
    let r2 = console
        .read(&spec(Some(r.next_cursor), "second boot"), &never)
        .await
        .expect("read");
    assert!(r2.matched, "{r2:?}");
    say(&format!(
        "matched2 {:?} dropped={}",
        r2.text, r2.dropped_bytes
    ));
    say("done");
}
