//! The release binary's code laid out hot first: the functions a serving server runs when
//! idle and on the common requests (link/hot-code.order, written by scripts/hot-code.sh)
//! go to the front of its text, in a few hundred KiB instead of scattered over 13 MiB. The
//! kernel maps a binary's code 64 KiB around each page a process touches, so scattered
//! hot functions kept ~4 MiB of code resident at idle; together they keep well under one
//! (docs/PERFORMANCE.md, "Idle RSS beside the peer").
//!
//! Only the layout changes, never what runs: a name the file holds that the build does not
//! have (a toolchain or dependency update renames generic instances) is skipped, and costs
//! idle memory, not correctness. The option is LLD's, the linker Rust uses on
//! x86_64-unknown-linux-gnu since 1.90; with any other linker the file is not passed.

use std::env;
use std::path::Path;
use std::process::Command;

const ORDER: &str = "link/hot-code.order";

fn main() {
    println!("cargo:rerun-if-changed={ORDER}");
    println!("cargo:rerun-if-changed=build.rs");
    let release = env::var("PROFILE").is_ok_and(|p| p == "release");
    if !release || !links_with_rust_lld() {
        return;
    }
    let Ok(dir) = env::var("CARGO_MANIFEST_DIR") else {
        return;
    };
    let order = Path::new(&dir).join(ORDER);
    if !order.is_file() {
        return;
    }
    println!(
        "cargo:rustc-link-arg-bin=gatecmd=-Wl,--symbol-ordering-file={}",
        order.display()
    );
    // Names the build lacks are expected after an update (see above): no warning per name.
    println!("cargo:rustc-link-arg-bin=gatecmd=-Wl,--no-warn-symbol-ordering");
}

/// Whether this build links with the LLD that rustc ships and uses by default on this
/// target (1.90 and later): no other linker is asked to read the file.
fn links_with_rust_lld() -> bool {
    if env::var("TARGET").ok().as_deref() != Some("x86_64-unknown-linux-gnu") {
        return false;
    }
    // A linker configured for the target (`target.<triple>.linker`), which Cargo passes on.
    if env::var_os("RUSTC_LINKER").is_some() {
        return false;
    }
    // -C linker=…, -C link-self-contained=…, -C linker-flavor=… or -Z linker-features=…:
    // somebody chose the linker; leave it alone.
    let flags = env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    if flags
        .split('\x1f')
        .any(|f| f.contains("linker") || f.contains("link-self-contained"))
    {
        return false;
    }
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    let Ok(out) = Command::new(rustc).arg("--version").output() else {
        return false;
    };
    // "rustc 1.95.0 (59807616e 2026-04-14)"
    let version = String::from_utf8_lossy(&out.stdout);
    let minor = version
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.split('.').nth(1))
        .and_then(|m| m.parse::<u32>().ok());
    minor.is_some_and(|m| m >= 90)
}
