//! What the boot detector costs per console byte (docs/PERFORMANCE.md, "Boot reports"):
//! a realistic RK3588 boot of about 75 KiB (tests/fixtures/boots and kernel chatter) fed
//! in 512-byte pieces, as a USB serial adapter hands them over, after a power-on each
//! time; then two worst cases: every line a match, and one endless line.
//!
//! `cargo bench -p gatecmd-domain --bench boot_detect`

use std::time::Instant;

use gatecmd_domain::boards::boot_reports::{Boots, Trigger};
use gatecmd_domain::config::Config;

const FIRMWARE: &str = include_str!("../../../tests/fixtures/boots/firmware.log");
const KERNEL: &str = include_str!("../../../tests/fixtures/boots/kernel.log");
const USERSPACE: &str = include_str!("../../../tests/fixtures/boots/userspace.log");
const LOGIN: &str = include_str!("../../../tests/fixtures/boots/login.log");

fn boots() -> Boots {
    let config = Config::parse(
        "boards:\n  - name: b1\n    usb: \"1-2\"\n    console: {path: /nonexistent, baud: 1500000}\n",
        "bench.yaml",
    )
    .expect("config");
    let b = Boots::new(config.boots);
    b.configure(&config);
    b
}

/// Feeds `text` `rounds` times (a power-on before each), in 512-byte pieces; ns per byte.
fn measure(name: &str, text: &[u8], rounds: usize) -> f64 {
    let b = boots();
    // Warm-up: the lazy DFA fills its cache on the first lines.
    b.power_on("b1", Trigger::action("power_board", "bench", "on"));
    for piece in text.chunks(512) {
        b.feed("b1", piece);
    }
    let t = Instant::now();
    for _ in 0..rounds {
        b.power_on("b1", Trigger::action("power_board", "bench", "on"));
        for piece in text.chunks(512) {
            b.feed("b1", piece);
        }
    }
    let ns = t.elapsed().as_nanos() as f64 / (text.len() * rounds) as f64;
    println!(
        "{name}: {} bytes x {rounds}: {ns:.1} ns/byte ({:.0} MB/s)",
        text.len(),
        1000.0 / ns
    );
    ns
}

fn main() {
    let mut chatter = String::new();
    let mut i = 0;
    while chatter.len() < 70 * 1024 {
        chatter.push_str(&format!(
            "[   {}.{i:06}] rockchip-drm display-subsystem: bound fdd90000.vop (ops vop2_component_ops)\r\n",
            10 + i / 1000
        ));
        i += 1;
    }
    let boot = format!("{FIRMWARE}{KERNEL}{chatter}{USERSPACE}{LOGIN}").replace('\n', "\r\n");
    measure("a 75 KiB RK3588 boot", boot.as_bytes(), 200);
    let matching =
        "[    1.000000] WARNING: CPU: 2 PID: 1 at drivers/base/dd.c:100 probe+0x10/0x20\r\n"
            .repeat(1000);
    measure("every line a fault", matching.as_bytes(), 50);
    let endless = "x".repeat(256 * 1024);
    measure("one line without end", endless.as_bytes(), 50);
}
