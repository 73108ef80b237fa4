//! What the board prints when it boots: an RK3588-like boot (the DDR blob, U-Boot SPL,
//! TF-A, OP-TEE, U-Boot, the kernel, systemd), `\r\n` endings and a few ANSI colours; one
//! line per region written since the last boot with its start LBA, length and SHA-256
//! (docs/VBOARD.md shows a whole log). `GATECMD_VBOARD_BOOT` in `serve`'s environment makes
//! the boards' boots go wrong, for the boot report tests: `panic` (the kernel panics when
//! init fails) or `reset-loop` (the board starts over three times before the kernel is
//! up, then stays silent); `vbN=MODE` for one board, several separated by commas.

/// A region written since the last boot: start LBA, sectors, SHA-256 (hex).
pub struct Region {
    pub lba: u64,
    pub sectors: u64,
    pub sha256: String,
}

const GREEN: &str = "\x1b[32m";
const RED: &str = "\x1b[31m";
const BOLD: &str = "\x1b[1m";
const RESET: &str = "\x1b[0m";

pub fn region_line(r: &Region) -> String {
    format!(
        "vboard: region lba=0x{:x} sectors={} bytes={} sha256={}",
        r.lba,
        r.sectors,
        r.sectors * 512,
        r.sha256
    )
}

/// How a board's boots go (`GATECMD_VBOARD_BOOT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BootMode {
    Normal,
    Panic,
    ResetLoop,
}

impl BootMode {
    fn parse(s: &str) -> Option<BootMode> {
        match s {
            "normal" => Some(BootMode::Normal),
            "panic" => Some(BootMode::Panic),
            "reset-loop" => Some(BootMode::ResetLoop),
            _ => None,
        }
    }
}

/// Board `board`'s mode in `spec` (`MODE` or `vbN=MODE`, comma-separated; its own first).
pub fn mode_in(spec: &str, board: &str) -> BootMode {
    let mut all = BootMode::Normal;
    for part in spec.split(',').map(str::trim) {
        match part.split_once('=') {
            Some((b, m)) if b == board => return BootMode::parse(m).unwrap_or(BootMode::Normal),
            Some(_) => {}
            None => all = BootMode::parse(part).unwrap_or(all),
        }
    }
    all
}

/// Board `board`'s mode now.
pub fn mode(board: &str) -> BootMode {
    mode_in(
        &std::env::var("GATECMD_VBOARD_BOOT").unwrap_or_default(),
        board,
    )
}

/// Whether the boot reaches the login prompt.
pub fn reaches_login(board: &str) -> bool {
    mode(board) == BootMode::Normal
}

/// The firmware before U-Boot proper: Rockchip's DDR blob, U-Boot SPL, TF-A, OP-TEE.
fn firmware() -> Vec<String> {
    [
        "DDR 9fffbe1e78 cym 24/02/04-10:09:20,fwver: v1.16",
        "LPDDR5, 2400MHz",
        "channel[0] BW=16 Col=10 Bk=16 CS0 Row=16 CS=1 Die BW=16 Size=2048MB",
        "out",
        "U-Boot SPL board init",
        "U-Boot SPL 2024.01-vboard (Dec 01 2026 - 00:00:00)",
        "Trying to boot from MMC1",
        "NOTICE:  BL31: v2.10.0(release):vboard",
        "NOTICE:  BL31: Built : 00:00:00, Dec  1 2026",
        "I/TC: OP-TEE version: 4.0.0-vboard (gcc version 12.2.0) #1 Tue Dec  1 00:00:00 UTC 2026 aarch64",
        "I/TC: Primary CPU switching to normal world boot",
    ]
    .map(String::from)
    .to_vec()
}

/// The lines of a successful boot, up to (not including) the login prompt.
pub fn boot(board: &str, soc: &str, regions: &[Region]) -> Vec<String> {
    let lines: Vec<String> = regions.iter().map(region_line).collect();
    boot_with(board, soc, &lines)
}

/// A successful boot whose written-data lines the caller made (the fastboot and DFU boards
/// name partitions and alt settings rather than LBAs).
pub fn boot_with(board: &str, soc: &str, written: &[String]) -> Vec<String> {
    let boot_mode = mode(board);
    let mut v = vec![String::new()];
    v.extend(firmware());
    v.extend([
        String::new(),
        String::new(),
        format!("{BOLD}U-Boot 2024.01-vboard (Dec 01 2026 - 00:00:00 +0000){RESET}"),
        String::new(),
        format!("Model: gatecmd virtual board {board} ({soc})"),
        "DRAM:  8 GiB".to_string(),
        "MMC:   mmc@fe2e0000: 0".to_string(),
        "Hit any key to stop autoboot:  0 ".to_string(),
    ]);
    if written.is_empty() {
        v.push("vboard: no regions written since the last boot".to_string());
    }
    v.extend(written.iter().cloned());
    v.extend([
        "Starting kernel ...".to_string(),
        String::new(),
        "[    0.000000] Booting Linux on physical CPU 0x0000000000 [0x412fd050]".to_string(),
        "[    0.000000] Linux version 6.1.0-vboard (gatecmd-vboard) #1 SMP PREEMPT".to_string(),
        format!("[    0.000000] Machine model: gatecmd virtual board {board} ({soc})"),
    ]);
    if boot_mode == BootMode::ResetLoop {
        // Three turns that start over before the kernel is up, then nothing.
        let turn: Vec<String> = v.clone();
        for _ in 0..3 {
            v.extend(turn.iter().cloned());
        }
        return v;
    }
    v.push("[    1.204117] Run /sbin/init as init process".to_string());
    if boot_mode == BootMode::Panic {
        v.extend([
            "[    1.310402] Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000100".to_string(),
            "[    1.310510] CPU: 0 PID: 1 Comm: init Not tainted 6.1.0-vboard #1".to_string(),
            "[    1.310620] ---[ end Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000100 ]---".to_string(),
        ]);
        return v;
    }
    v.extend([
        "[    1.311020] systemd[1]: systemd 252.22-1~deb12u1 running in system mode".to_string(),
        String::new(),
        format!("Welcome to {BOLD}Debian GNU/Linux 12 (bookworm){RESET}!"),
        String::new(),
        format!("[{GREEN}  OK  {RESET}] Reached target {BOLD}Multi-User System{RESET}."),
        String::new(),
        format!("Debian GNU/Linux 12 {board} ttyFIQ0"),
        String::new(),
    ]);
    v
}

/// A flash with nothing bootable: the boot ROM finds no idbloader and falls back.
pub fn failure(reason: &str) -> Vec<String> {
    failure_to(reason, "falling back to MaskROM")
}

/// A failed boot and what the board does instead (`staying in fastboot mode`, …).
pub fn failure_to(reason: &str, then: &str) -> Vec<String> {
    vec![
        String::new(),
        format!("{RED}vboard: no bootable image: {reason}{RESET}"),
        format!("{RED}vboard: boot failed, {then}{RESET}"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_names_each_region_and_its_hash() {
        let r = Region {
            lba: 0x40,
            sectors: 8192,
            sha256: "ab".repeat(32),
        };
        let lines = boot("vb1", "rk3588", &[r]);
        let text = lines.join("\r\n");
        assert!(text.contains(&format!(
            "lba=0x40 sectors=8192 bytes=4194304 sha256={}",
            "ab".repeat(32)
        )));
        assert!(text.contains("Starting kernel"));
        assert!(
            boot("vb1", "rk3588", &[])
                .join("\n")
                .contains("no regions written")
        );
        for stage in [
            "DDR 9fffbe1e78",
            "U-Boot SPL 20",
            "NOTICE:  BL31: v",
            "OP-TEE version",
            "Run /sbin/init",
            "systemd[1]: ",
        ] {
            assert!(text.contains(stage), "{stage}");
        }
    }

    #[test]
    fn a_boot_mode_is_read_per_board() {
        assert_eq!(mode_in("", "vb1"), BootMode::Normal);
        assert_eq!(mode_in("panic", "vb2"), BootMode::Panic);
        assert_eq!(mode_in("panic,vb2=reset-loop", "vb2"), BootMode::ResetLoop);
        assert_eq!(mode_in("vb2=reset-loop", "vb1"), BootMode::Normal);
    }
}
