//! Holds what the compiler cannot: inside each crate of the server (the binary's `src/`
//! and every library under `crates/`), the file-level import graph has no cycle and no two
//! top-level modules import each other. Between crates Cargo refuses a cycle and an upward
//! import does not compile (crates/gatecmd-core/tests/upward_import.rs shows it), so the
//! layers need no reading of imports here. The graph reader (which paths make an edge,
//! how re-exports are followed, what counts as test code) is `tests/modgraph/mod.rs`,
//! tested below on made-up crates.

mod modgraph;

use modgraph::*;
use std::path::Path;

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// Each crate's cycles, file-level and module-level, in a message; empty when none.
fn cycles_in_every_crate() -> Vec<String> {
    let mut out = Vec::new();
    for src in crate_sources(Path::new(REPO)) {
        let graph = Graph::new(modules(&src));
        assert!(!graph.modules.is_empty(), "{} was not read", src.display());
        let name = src.strip_prefix(REPO).unwrap_or(&src).display().to_string();
        for c in graph.cycles().into_iter().chain(graph.module_cycles()) {
            out.push(format!("{name}:\n{}", c.join("\n")));
        }
    }
    out
}

#[test]
fn no_crate_has_an_import_cycle() {
    let sources = crate_sources(Path::new(REPO));
    assert!(sources.len() >= 5, "the crates were not found: {sources:?}");
    let cycles = cycles_in_every_crate();
    assert!(
        cycles.is_empty(),
        "import cycles (docs/ARCHITECTURE.md: data flows one way):\n{}",
        cycles.join("\n---\n")
    );
}

// The checker itself, on small made-up crates: it must see what it claims to see.

#[test]
fn a_cycle_through_a_parent_module_is_found() {
    let g = graph_of(&[
        ("lib.rs", "pub mod a;\npub mod b;\n"),
        ("a.rs", "use crate::b::Thing;\npub struct Other;\n"),
        (
            "b.rs",
            "pub struct Thing;\nfn f() { let _ = crate::a::Other; }\n",
        ),
    ]);
    let cycles = g.cycles();
    assert_eq!(cycles.len(), 1, "{cycles:?}");
    assert!(
        cycles[0].iter().any(|l| l.contains("src/a.rs → src/b.rs")),
        "{cycles:?}"
    );
}

#[test]
fn re_exports_are_followed_to_the_defining_file() {
    // a uses locks::Manager, which locks/mod.rs only re-exports from locks/lane.rs; lane uses
    // a: no cycle, because a depends on lane, not on the facade.
    let g = graph_of(&[
        ("lib.rs", "pub mod a;\npub mod locks;\n"),
        ("locks/mod.rs", "mod lane;\npub use lane::Manager;\n"),
        (
            "locks/lane.rs",
            "use crate::a::Helper;\npub struct Manager;\n",
        ),
        ("a.rs", "pub struct Helper;\n"),
    ]);
    assert!(g.cycles().is_empty(), "{:?}", g.cycles());
    let g = graph_of(&[
        ("lib.rs", "pub mod a;\npub mod locks;\n"),
        ("locks/mod.rs", "mod lane;\npub use lane::Manager;\n"),
        (
            "locks/lane.rs",
            "use crate::a::Helper;\npub struct Manager;\n",
        ),
        ("a.rs", "use crate::locks::Manager;\npub struct Helper;\n"),
    ]);
    assert_eq!(
        g.cycles().len(),
        1,
        "a ↔ locks/lane.rs through the re-export"
    );
}

#[test]
fn test_code_comments_and_strings_do_not_count() {
    let g = graph_of(&[
        ("lib.rs", "pub mod a;\npub mod b;\n"),
        ("a.rs", "use crate::b::Thing;\n"),
        (
            "b.rs",
            "pub struct Thing;\n// crate::a::x\nconst S: &str = \"crate::a::y {\";\n#[cfg(test)]\nmod tests {\n    use crate::a::*;\n}\n",
        ),
    ]);
    assert!(g.cycles().is_empty(), "{:?}", g.cycles());
    assert_eq!(
        production_lines("fn a() {}\n#[cfg(test)]\nmod tests {\n    fn t() {}\n}\n"),
        1
    );
}

#[test]
fn use_trees_expand_to_every_path() {
    let mut got = expand_use("crate::locks::{self, LockKey, view::{LocksView, KeyState as K}}");
    got.sort();
    assert_eq!(
        got,
        [
            "crate::locks",
            "crate::locks::LockKey",
            "crate::locks::view::KeyState",
            "crate::locks::view::LocksView"
        ]
    );
}

#[test]
fn a_module_level_cycle_is_found_though_no_file_cycle_exists() {
    // a/x.rs → b.rs and b.rs → a/y.rs: no file-level cycle, but the modules a and b lean on
    // each other, which is what a newcomer navigating the tree sees.
    let g = graph_of(&[
        ("lib.rs", "pub mod a;\npub mod b;\n"),
        ("a/mod.rs", "pub mod x;\npub mod y;\n"),
        ("a/x.rs", "use crate::b::Thing;\n"),
        ("a/y.rs", "pub struct Leaf;\n"),
        ("b.rs", "use crate::a::y::Leaf;\npub struct Thing;\n"),
    ]);
    assert!(g.cycles().is_empty(), "{:?}", g.cycles());
    let cycles = g.module_cycles();
    assert_eq!(cycles.len(), 1, "{cycles:?}");
    assert!(
        cycles[0]
            .iter()
            .any(|l| l.starts_with("a → b: src/a/x.rs → src/b.rs")),
        "{cycles:?}"
    );
}
