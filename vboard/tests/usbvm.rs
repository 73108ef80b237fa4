//! gatecmd-vboard against Debian's real rkdeveloptool on a real kernel: one boot of
//! the repository's test VM, tests/vm (Debian's kernel, `dummy_hcd`, QEMU TCG) runs `usbvm_guest.sh`, which
//! starts the vboard with two 64 MiB boards (vb2 is only powered on and off: while two
//! are attached rkdeveloptool refuses all but `ld`) and drives vb1 with `/usr/bin/rkdeveloptool`
//! (copied in with its libusb) and the console's host-side tty:
//! power on --maskrom → ld Maskrom → db of a garbage loader (rkdeveloptool's own refusal,
//! still Maskrom) → db of a loader whose usbplug the ROM does not start (still Maskrom) →
//! db → Loader → rid, rfi, rci, ppt, wl 0x40 IMAGE, rl read-back equal → rd → the boot
//! log names the image's SHA-256 → login root → uname -a, `$?` → power off → on
//! --maskrom → db → ef (back in MaskROM) → wl in MaskROM refused → db → the region reads
//! back as zeros → power off, power on with that blank flash: the boot fails on the
//! console (which stayed on the bus) and the board comes up in MaskROM. It also captures rkdeveloptool's own bytes during `db` and `wl`
//! (docs/VBOARD.md quotes them) and checks allowed_commands.yaml's `progress:` regex
//! against the `wl` lines.
//!
//! Skips (with a `SKIP:` line) where the harness is absent; with the harness present, a
//! missing QEMU or rkdeveloptool fails under `CI=true` (scripts/setup.sh --test installs
//! both), as tests/usbvm/mod.rs does for the server's VM tests.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

const GUEST: &str = "tests/usbvm_guest.sh";
const RKDEVELOPTOOL: &str = "/usr/bin/rkdeveloptool";

fn skip_or_fail(why: &str, installed_by_ci: bool) {
    let ci = std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1");
    if installed_by_ci && ci {
        panic!(
            "usbvm_rkdeveloptool: {why}; CI installs this (scripts/setup.sh --test), so it may not skip"
        );
    }
    let _ = writeln!(std::io::stderr(), "SKIP: usbvm_rkdeveloptool: {why}");
}

/// The repository's test VM harness (tests/vm), found as tests/usbvm/mod.rs finds it
/// (`GATECMD_VM_DIR` overrides it).
fn harness() -> Option<PathBuf> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    [
        std::env::var_os("GATECMD_VM_DIR").map(PathBuf::from),
        Some(repo.join("tests/vm")),
    ]
    .into_iter()
    .flatten()
    .find(|d| d.join("run.sh").exists())
    .and_then(|d| d.canonicalize().ok())
}

fn has(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A bootable image: the rk35xx idbloader magic, then pseudo-random bytes (an LCG, so a
/// dropped or misplaced sector changes the hash).
fn image(len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    v.extend_from_slice(b"RKNS");
    let mut x: u32 = 0x1234_5678;
    while v.len() < len {
        x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        v.push((x >> 24) as u8);
    }
    v
}

struct Run {
    log: String,
    steps: HashMap<String, i32>,
}

impl Run {
    fn rc(&self, step: &str) -> i32 {
        *self
            .steps
            .get(step)
            .unwrap_or_else(|| panic!("step {step} never ran\n{}", self.log))
    }

    /// The tool's output of a step, `\r` shown as `~`.
    fn text(&self, step: &str) -> String {
        let start = format!("TEXT {step}\n");
        let end = format!("\nEND {step}\n");
        let Some(a) = self.log.find(&start) else {
            panic!("no output of {step}\n{}", self.log)
        };
        let rest = &self.log[a + start.len()..];
        rest[..rest.find(&end).unwrap_or(rest.len())].to_string()
    }

    fn expect(&self, step: &str, rc: i32, contains: &str) {
        let text = self.text(step);
        assert_eq!(self.rc(step), rc, "{step}: exit status\n{text}");
        assert!(
            text.contains(contains),
            "{step}: expected {contains:?} in\n{text}"
        );
    }
}

fn run_vm(usbvm: &Path, work: &Path, vboard: &Path, files: &Path) -> Run {
    let guest = Path::new(env!("CARGO_MANIFEST_DIR")).join(GUEST);
    let out = Command::new(usbvm.join("run.sh"))
        .env("USBVM_EXTRA_MODULES", "usb_f_fs usb_f_acm cdc_acm")
        .arg("--bin")
        .arg(&guest)
        .arg("--file")
        .arg(format!(
            "{}:/usr/local/bin/gatecmd-vboard",
            vboard.display()
        ))
        .arg("--file")
        .arg(RKDEVELOPTOOL)
        .arg("--file")
        .arg(format!("{}:/opt/vboard", files.display()))
        .args(["--udcs", "4", "--timeout", "150", "--quiet", "--workdir"])
        .arg(work)
        .output()
        .expect("run.sh");
    let log = std::fs::read_to_string(work.join("console.log"))
        .unwrap_or_default()
        .replace("\r\n", "\n");
    println!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success() && log.contains("GUEST DONE"),
        "the VM run failed ({}):\n{log}",
        out.status
    );
    let steps = log
        .lines()
        .filter_map(|l| l.strip_prefix("STEP "))
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let name = w.next()?.to_string();
            let rc = w.next()?.strip_prefix("rc=")?.parse().ok()?;
            Some((name, rc))
        })
        .collect();
    Run { log, steps }
}

/// allowed_commands.yaml's `progress:` regex of the rkdeveloptool command, unquoted.
fn bundled_progress_regex() -> regex::Regex {
    let yaml = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../allowed_commands.yaml"),
    )
    .expect("allowed_commands.yaml");
    let at = yaml
        .find("name: rkdeveloptool")
        .expect("the rkdeveloptool command");
    let line = yaml[at..]
        .lines()
        .find_map(|l| l.trim().strip_prefix("progress:"))
        .expect("a progress: key");
    let quoted = line.trim();
    let inner = quoted.trim_matches('"').replace("\\\\", "\\");
    regex::Regex::new(&inner).expect("the bundled regex compiles")
}

fn strip_ansi(s: &str) -> String {
    regex::Regex::new(r"\x1b\[[0-9;]*[A-Za-z]")
        .expect("re")
        .replace_all(s, "")
        .into_owned()
}

#[test]
fn usbvm_rkdeveloptool() {
    let Some(usbvm) = harness() else {
        skip_or_fail(
            "no test VM harness (tests/vm in the repository, or GATECMD_VM_DIR)",
            true,
        );
        return;
    };
    for program in ["qemu-system-x86_64", "python3", "strip", RKDEVELOPTOOL] {
        if !has(program) {
            skip_or_fail(
                &format!("{program} is not installed (scripts/setup.sh --test installs it)"),
                true,
            );
            return;
        }
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let (files, work) = (tmp.path().join("files"), tmp.path().join("work"));
    std::fs::create_dir_all(&files).expect("files");
    std::fs::create_dir_all(&work).expect("work");
    // A stripped copy: debug info would make the initramfs huge.
    let vboard = tmp.path().join("gatecmd-vboard");
    std::fs::copy(env!("CARGO_BIN_EXE_gatecmd-vboard"), &vboard).expect("copy");
    assert!(
        Command::new("strip")
            .arg(&vboard)
            .status()
            .is_ok_and(|s| s.success())
    );
    for (name, flag) in [
        ("loader.bin", None),
        ("garbage_loader.bin", Some("--bad-crc")),
        ("badpayload_loader.bin", Some("--bad-payload")),
    ] {
        let mut c = Command::new(&vboard);
        c.arg("make-loader").arg("--out").arg(files.join(name));
        c.args(flag);
        assert!(c.status().is_ok_and(|s| s.success()), "make-loader {name}");
    }
    let img = image(4 << 20);
    std::fs::write(files.join("image.img"), &img).expect("image");
    let sha = hex::encode(Sha256::digest(&img));

    let r = run_vm(&usbvm, &work, &vboard, &files);

    r.expect("power_vb2", 0, "vb2: maskrom");
    r.expect("power_maskrom", 0, "vb1: maskrom");
    r.expect("ld_two", 0, "DevNo=2");
    r.expect("power_vb2_off", 0, "vb2: off");
    assert!(
        r.log
            .contains("board vb2 rockusb=dummy_udc.2 port=3-1 console=dummy_udc.3 port=4-1"),
        "{}",
        r.log
    );
    assert!(
        !r.text("ld_maskrom").contains("DevNo=2"),
        "vb2 is still attached"
    );
    r.expect("ld_maskrom", 0, "Vid=0x2207,Pid=0x350b");
    r.expect("ld_maskrom", 0, "Maskrom");
    r.expect(
        "db_garbage",
        1,
        "Opening loader failed, exiting download boot!",
    );
    r.expect("ld_after_garbage", 0, "Maskrom");
    r.expect("db_badpayload", 0, "Downloading bootloader succeeded.");
    r.expect("ld_after_badpayload", 0, "Maskrom");
    r.expect("db", 0, "Downloading bootloader succeeded.");
    assert_eq!(r.rc("wait_loader"), 0, "no Loader after db\n{}", r.log);
    r.expect("ld_loader", 0, "Loader");
    r.expect("rid", 0, "Flash ID: 45 4D 4D 43 20");
    r.expect("rfi", 0, "Flash Size: 64 MB");
    r.expect("rfi", 0, "Flash Size: 131072 Sectors");
    r.expect("rci", 0, "Chip Info:  38 38 35 33 30 30 31 56");
    r.expect("ppt", 1, "Not found any partition table!");
    r.expect("wl", 0, "Write LBA from file (100%)");
    r.expect("rl", 0, "Read LBA to file (100%)");
    assert_eq!(
        r.rc("rl_equal"),
        0,
        "rl read back other bytes than wl wrote"
    );
    r.expect("rd", 0, "Reset Device OK.");
    let console = {
        let a = r.log.find("BEGIN console\n").expect("console capture");
        let b = r.log.find("\nEND console").expect("console end");
        r.log[a..b].to_string()
    };
    assert!(
        console.contains(&format!(
            "vboard: region lba=0x40 sectors=8192 bytes=4194304 sha256={sha}"
        )),
        "the boot log does not name the image's SHA-256 {sha}:\n{console}"
    );
    for want in [
        "Starting kernel ...",
        "vb1 login: root",
        "Linux vb1 6.1.0-vboard #1 SMP PREEMPT",
        "-sh: nosuch: command not found",
        "status=127",
    ] {
        assert!(
            console.contains(want),
            "{want:?} missing from the console:\n{console}"
        );
    }
    assert!(
        console.contains("~\n"),
        "console lines end in \\r\\n:\n{console}"
    );
    r.expect("ld_running", 1, "not found any devices!");
    r.expect("power_off", 0, "vb1: off");
    r.expect("ld_off", 1, "not found any devices!");
    r.expect("db2", 0, "Downloading bootloader succeeded.");
    r.expect("ef", 0, "Erasing flash complete.");
    r.expect("ld_after_ef", 0, "Maskrom");
    r.expect("wl_in_maskrom", 1, "Write LBA failed!");
    r.expect("db3", 0, "Downloading bootloader succeeded.");
    assert_eq!(r.rc("erased_zero"), 0, "ef left data at LBA 0x40");
    r.expect("power_on_blank", 0, "vb1: maskrom");
    let console2 = {
        let a = r.log.find("BEGIN console2\n").expect("console2 capture");
        let b = r.log.find("\nEND console2").expect("console2 end");
        r.log[a..b].to_string()
    };
    assert!(
        console2.contains("vboard: no bootable image")
            && console2.contains("falling back to MaskROM"),
        "a blank flash must fail its boot on the console:\n{console2}"
    );
    r.expect("ld_after_blank", 0, "Maskrom");
    assert_eq!(
        r.rc("vboard_exit"),
        0,
        "gatecmd-vboard did not stop cleanly on SIGTERM"
    );
    // Every refusal is on the vboard's stderr with what was expected.
    assert!(
        r.log
            .contains("WRITE_LBA (0x15) in MaskROM: the mask ROM has no flash driver"),
        "{}",
        r.log
    );
    assert!(r.log.contains("is not a vboard usbplug"), "{}", r.log);

    // What rkdeveloptool really prints, and the bundled progress regex against it.
    println!(
        "--- rkdeveloptool db (\\r shown as ~) ---\n{}",
        r.text("db")
    );
    let wl = r.text("wl");
    println!("--- rkdeveloptool wl ---\n{wl}");
    let re = bundled_progress_regex();
    let percents: Vec<u32> = wl
        .lines()
        .filter_map(|l| re.captures(&strip_ansi(l)).and_then(|c| c[1].parse().ok()))
        .collect();
    assert!(
        percents.len() > 10,
        "the progress regex {re} matched {percents:?} in\n{wl}"
    );
    assert!(percents.windows(2).all(|w| w[0] <= w[1]), "{percents:?}");
    assert_eq!(percents.last(), Some(&100), "{percents:?}");
    println!(
        "progress regex {re}: {} matches, {percents:?}",
        percents.len()
    );
}
