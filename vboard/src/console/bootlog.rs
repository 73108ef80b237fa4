//! What the board prints when it boots: U-Boot-like, then kernel-like lines, `\r\n`
//! endings and a few ANSI colours; one line per region written since the last boot with
//! its start LBA, length and SHA-256 (docs/VBOARD.md shows a whole log).

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

/// The lines of a successful boot, up to (not including) the login prompt.
pub fn boot(board: &str, soc: &str, regions: &[Region]) -> Vec<String> {
    let lines: Vec<String> = regions.iter().map(region_line).collect();
    boot_with(board, soc, &lines)
}

/// A successful boot whose written-data lines the caller made (the fastboot and DFU boards
/// name partitions and alt settings rather than LBAs).
pub fn boot_with(board: &str, soc: &str, written: &[String]) -> Vec<String> {
    let mut v = vec![
        String::new(),
        "U-Boot SPL 2024.01-vboard (Dec 01 2026 - 00:00:00)".to_string(),
        "Trying to boot from MMC1".to_string(),
        String::new(),
        String::new(),
        format!("{BOLD}U-Boot 2024.01-vboard (Dec 01 2026 - 00:00:00 +0000){RESET}"),
        String::new(),
        format!("Model: gatecmd virtual board {board} ({soc})"),
        "DRAM:  8 GiB".to_string(),
        "MMC:   mmc@fe2e0000: 0".to_string(),
        "Hit any key to stop autoboot:  0 ".to_string(),
    ];
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
        "[    1.204117] Run /sbin/init as init process".to_string(),
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
    }
}
