//! The tool list's router, summed from the list (docs/ARCHITECTURE.md, "A new tool").
//!
//! The list is the `pub mod NAME;` lines of `src/tools/mod.rs`: one tool each, whose file
//! registers its `#[tool]` method in a `#[tool_router(router = NAME_router)]` impl. They
//! stay plain declarations because rustfmt and rust-analyzer follow only those (neither
//! expands a macro, so a macro declaring the modules would leave every tool file out of
//! `cargo fmt`). This script reads them and writes, for `tools/mod.rs` to include, each
//! name with its router (`tools::TOOLS`): the list is written once, and a line whose file
//! registers no router of that name does not build.

use std::path::PathBuf;

fn main() {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let list = dir.join("src/tools/mod.rs");
    println!("cargo::rerun-if-changed=src/tools/mod.rs");
    let text = std::fs::read_to_string(&list).unwrap_or_else(|e| panic!("{}: {e}", list.display()));
    let names: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("pub mod ")?.strip_suffix(';'))
        .collect();
    for n in &names {
        assert!(
            !n.is_empty()
                && n.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
            "{}: `pub mod {n};` is not a tool module name",
            list.display()
        );
    }
    assert!(!names.is_empty(), "{}: no `pub mod` line", list.display());
    let entries: String = names
        .iter()
        .map(|n| format!("    ({n:?}, GatecmdServer::{n}_router),\n"))
        .collect();
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("set by cargo")).join("tools.rs");
    std::fs::write(&out, format!("&[\n{entries}]\n"))
        .unwrap_or_else(|e| panic!("{}: {e}", out.display()));
}
