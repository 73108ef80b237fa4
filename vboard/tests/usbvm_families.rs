//! gatecmd-vboard's fastboot and DFU families against Debian's real tools on a real kernel:
//! one boot of the test VM (tests/vm) runs `usbvm_families_guest.sh`, which starts the vboard with
//! a fastboot board (vb1) and a DFU board (vb2), 64 MiB each, writes throttled to 1 MiB/s,
//! fastboot's max-download-size 1 MiB.
//!
//! fastboot (1:29.0.6): power on --recovery → `devices`, `getvar product`,
//! `getvar partition-size:boot` → `flash userdata` (a raw image) → `erase userdata` →
//! `flash recovery` refused (no such partition) → `flash boot` of a 3 MiB image, three sparse
//! pieces (RAW, FILL and DONT_CARE chunks), once through a pipe and once on a pty →
//! `reboot-bootloader` → `getvar product` (re-enumerated) → `reboot`: the boot log names
//! boot's region with the image's SHA-256 (and nothing of the erased userdata), login.
//!
//! dfu-util (0.11): power on --recovery (DFU mode) → `-l` lists both alt settings by name →
//! `-a u-boot -D` (pipe, then pty) → `-U` reads back the same bytes → power off, power on:
//! the boot log names alt 0's image and SHA-256, the device comes up in runtime mode (`-l`
//! says Runtime) → `-a rootfs -D` detaches it into DFU mode and downloads → `-U` equal.
//!
//! The raw output of both tools during a write (pipe and pty) goes to
//! `$VBOARD_TOOL_OUTPUT_DIR` when that is set, with when each piece arrived.
//!
//! Skips (with a `SKIP:` line) where the harness is absent; with the harness present, a
//! missing program fails under `CI=true` when `scripts/setup.sh --test` installs its package
//! (QEMU and python3 do; fastboot and dfu-util once that script lists them), else skips.

mod common;

use std::path::Path;

use common::{ci_installs, harness, has, noise, run_vm, skip_or_fail, stripped_vboard};
use sha2::{Digest, Sha256};

const TEST: &str = "usbvm_fastboot_and_dfu";
const GUEST: &str = "tests/usbvm_families_guest.sh";

/// An Android boot image as far as the board looks (the magic), then data that gives
/// libsparse every chunk kind: 1 MiB of noise (RAW), 512 KiB of zeros (FILL), 1.5 MiB of noise.
fn boot_image() -> Vec<u8> {
    let mut v = b"ANDROID!".to_vec();
    v.extend(noise((1 << 20) - 8, 7));
    v.extend(vec![0u8; 512 << 10]);
    v.extend(noise(3 << 19, 11));
    v
}

fn sha256(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

fn console(log: &str, board: &str) -> String {
    let start = format!("BEGIN console {board}\n");
    let a = log
        .find(&start)
        .unwrap_or_else(|| panic!("no console capture of {board}\n{log}"));
    let rest = &log[a + start.len()..];
    rest[..rest
        .find(&format!("\nEND console {board}"))
        .unwrap_or(rest.len())]
        .to_string()
}

#[test]
fn usbvm_fastboot_and_dfu() {
    let Some(usbvm) = harness() else {
        skip_or_fail(
            TEST,
            "no test VM harness (tests/vm in the repository, or GATECMD_VM_DIR)",
            true,
        );
        return;
    };
    // (program, its Debian package)
    for (program, package) in [
        ("qemu-system-x86_64", "qemu-system-x86"),
        ("python3", "python3-venv"),
        ("strip", "binutils"),
        ("/usr/bin/fastboot", "fastboot"),
        ("/usr/bin/dfu-util", "dfu-util"),
        ("/usr/bin/script", "bsdutils"),
    ] {
        if !has(program) {
            let ci = ci_installs(package);
            let how = if ci {
                "scripts/setup.sh --test installs it".to_string()
            } else {
                format!(
                    "apt-get install {package}; scripts/setup.sh --test does not install it yet"
                )
            };
            skip_or_fail(TEST, &format!("{program} is not installed ({how})"), ci);
            return;
        }
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let (files, work) = (tmp.path().join("files"), tmp.path().join("work"));
    std::fs::create_dir_all(&files).expect("files");
    std::fs::create_dir_all(&work).expect("work");
    let vboard = stripped_vboard(tmp.path());
    let boot = boot_image();
    let small = noise(100_000, 3); // not a whole number of sectors: the tail is padded
    let uboot = noise((256 << 10) + 123, 5); // a short last DFU block
    let rootfs = noise(1 << 20, 9);
    for (name, data) in [
        ("boot.img", &boot),
        ("small.img", &small),
        ("uboot.bin", &uboot),
        ("rootfs.bin", &rootfs),
    ] {
        std::fs::write(files.join(name), data).expect("image");
    }
    let guest = Path::new(env!("CARGO_MANIFEST_DIR")).join(GUEST);
    let r = run_vm(
        &usbvm,
        &work,
        &guest,
        &[
            format!("{}:/usr/local/bin/gatecmd-vboard", vboard.display()),
            // /usr/bin/fastboot is a symlink: name the guest path, or it lands where it points.
            "/usr/bin/fastboot:/usr/bin/fastboot".into(),
            "/usr/bin/dfu-util:/usr/bin/dfu-util".into(),
            "/usr/bin/script:/usr/bin/script".into(),
            format!("{}:/opt/vboard", files.display()),
        ],
        240,
    );
    println!("VM run: {:.1} s wall", r.seconds);

    // The ready lines: each board's own word where Rockchip boards say rockusb, and family=.
    assert!(
        r.log
            .contains("board vb1 fastboot=dummy_udc.0 port=1-1 console=dummy_udc.1 port=2-1 ")
            && r.log.contains("family=fastboot"),
        "{}",
        r.log
    );
    assert!(
        r.log
            .contains("board vb2 dfu=dummy_udc.2 port=3-1 console=dummy_udc.3 port=4-1 ")
            && r.log.contains("family=dfu"),
        "{}",
        r.log
    );

    // ---- fastboot ----
    r.expect("fb_power", 0, "vb1: fastboot");
    r.expect("fb_devices", 0, "vboard-vb1\tfastboot");
    r.expect("fb_getvar", 0, "product: vboard");
    r.expect("fb_getvar_size", 0, "partition-size:boot: 0x800000");
    r.expect("fb_flash_small", 0, "Writing 'userdata'");
    r.expect("fb_erase", 0, "Erasing 'userdata'");
    r.expect("fb_flash_nopart", 1, "Partition doesn't exist: recovery");
    for step in ["fb_flash", "fb_flash_pty"] {
        r.expect(step, 0, "Sending sparse 'boot' 1/3");
        r.expect(step, 0, "Sending sparse 'boot' 3/3");
    }
    assert!(
        r.log
            .contains("sparse image, 5 chunks (raw 2, fill 1, dont-care 2)"),
        "the middle piece should carry RAW, FILL and DONT_CARE chunks:\n{}",
        r.log
    );
    r.expect("fb_reboot_bootloader", 0, "Rebooting into bootloader");
    r.expect("fb_getvar_again", 0, "product: vboard");
    r.expect("fb_reboot", 0, "Rebooting");
    assert_eq!(
        r.rc("fb_login"),
        0,
        "no login prompt after reboot\n{}",
        r.log
    );
    assert_eq!(
        r.text("fb_devices_running").trim(),
        "",
        "a running board has no fastboot device"
    );
    let c1 = console(&r.log, "vb1");
    let want = format!(
        "vboard: region partition=boot offset=0x0 bytes={} sha256={}",
        boot.len(),
        sha256(&boot)
    );
    assert!(
        c1.contains(&want),
        "the boot log does not name boot.img's SHA-256 ({want}):\n{c1}"
    );
    assert!(
        !c1.contains("partition=userdata"),
        "userdata was erased after its flash: no region should remain\n{c1}"
    );
    assert!(
        c1.contains("Starting kernel ...") && c1.contains("vb1 login: "),
        "{c1}"
    );

    // ---- DFU ----
    r.expect("dfu_power", 0, "vb2: dfu");
    for alt in [
        r#"intf=0, path="3-1", alt=0, name="u-boot", serial="vboard-vb2""#,
        r#"intf=0, path="3-1", alt=1, name="rootfs", serial="vboard-vb2""#,
    ] {
        r.expect("dfu_list", 0, alt);
    }
    r.expect("dfu_list", 0, "Found DFU: [0483:df11]");
    for step in ["dfu_download", "dfu_download_pty"] {
        r.expect(step, 0, "Download done.");
        r.expect(step, 0, "DFU state(7) = dfuMANIFEST");
        r.expect(step, 0, "Done!");
    }
    r.expect(
        "dfu_upload",
        0,
        &format!("Received a total of {} bytes", uboot.len()),
    );
    assert_eq!(
        r.rc("dfu_upload_equal"),
        0,
        "-U gave other bytes than -D sent"
    );
    r.expect("dfu_on", 0, "vb2: running");
    r.expect("dfu_list_runtime", 0, "Found Runtime: [0483:df11]");
    r.expect(
        "dfu_detach_download",
        0,
        "Device really in Run-Time Mode, send DFU detach request",
    );
    r.expect("dfu_detach_download", 0, "Device will detach and reattach");
    r.expect("dfu_detach_download", 0, "Download done.");
    r.expect(
        "dfu_upload_rootfs",
        0,
        &format!("Received a total of {} bytes", rootfs.len()),
    );
    assert_eq!(r.rc("dfu_rootfs_equal"), 0, "rootfs read back differs");
    let c2 = console(&r.log, "vb2");
    let want = format!(
        "vboard: region alt=0 name=u-boot bytes={} sha256={}",
        uboot.len(),
        sha256(&uboot)
    );
    assert!(
        c2.contains(&want),
        "{want} missing from the boot log:\n{c2}"
    );
    assert!(c2.contains("vb2 login: "), "{c2}");
    r.expect("status", 0, r#""state":"dfu""#);
    assert_eq!(
        r.rc("vboard_exit"),
        0,
        "gatecmd-vboard did not stop cleanly"
    );

    // ---- the tools' own bytes during a write, and when they arrived ----
    let out_dir = std::env::var_os("VBOARD_TOOL_OUTPUT_DIR").map(std::path::PathBuf::from);
    let mut timing = String::new();
    for (step, file) in [
        ("fb_flash", "fastboot-flash.txt"),
        ("fb_flash_pty", "fastboot-flash.pty.txt"),
        ("dfu_download", "dfu-util-download.txt"),
        ("dfu_download_pty", "dfu-util-download.pty.txt"),
    ] {
        let raw = r.raw(step);
        assert!(!raw.is_empty(), "{step}: nothing captured");
        let stamps = r.stamps(step);
        let line = format!("{file}: {}\n", stamps.summary());
        print!("{line}");
        timing.push_str(&line);
        timing.push_str(&stamps.listing());
        if let Some(d) = &out_dir {
            std::fs::create_dir_all(d).expect("output dir");
            std::fs::write(d.join(file), &raw).expect("write capture");
        }
    }
    // dfu-util's progress is `\r`-separated on stdout; fastboot's status lines go to stderr.
    assert!(r.raw("dfu_download").contains(&b'\r'));
    if let Some(d) = &out_dir {
        std::fs::write(d.join("timing.txt"), timing).expect("timing");
    }
    // The vboard's own log, stamped: where the time went.
    if let Some(a) = r.log.find("BEGIN vboard stderr\n") {
        let rest = &r.log[a..];
        println!(
            "{}",
            &rest[..rest.find("END vboard stderr").unwrap_or(rest.len())]
        );
    }
}
