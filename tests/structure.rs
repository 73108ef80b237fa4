//! Holds the shape docs/ARCHITECTURE.md promises: the file-level import graph of `src/` has
//! no cycle, and no file carries more than 500 lines of production code. The graph reader
//! (which paths make an edge, how re-exports are followed, what counts as test code) is
//! `tests/modgraph/mod.rs`, shared with `tests/docs_truth.rs`; the module-level checker
//! there (cycles between top-level modules, a layer table) is tested below on made-up
//! crates.

mod modgraph;

use modgraph::*;
use std::path::Path;

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// Largest number of production lines one file may hold.
const MAX_PRODUCTION_LINES: usize = 500;

#[test]
fn src_has_no_import_cycle() {
    let graph = Graph::new(modules(&Path::new(REPO).join("src")));
    assert!(graph.modules.len() > 20, "src/ was not read");
    let cycles = graph.cycles();
    assert!(
        cycles.is_empty(),
        "import cycles in src/ (docs/ARCHITECTURE.md: data flows one way):\n{}",
        cycles
            .iter()
            .map(|c| c.join("\n"))
            .collect::<Vec<_>>()
            .join("\n---\n")
    );
}

#[test]
fn no_file_holds_more_than_500_production_lines() {
    let src = Path::new(REPO).join("src");
    let mut over = Vec::new();
    let mut stack = vec![src.clone()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs")
                && !p
                    .file_stem()
                    .is_some_and(|s| s == "tests" || s.to_string_lossy().ends_with("_tests"))
            {
                let n = production_lines(&std::fs::read_to_string(&p).unwrap_or_default());
                if n > MAX_PRODUCTION_LINES {
                    over.push(format!(
                        "{} ({n} lines)",
                        p.strip_prefix(REPO).unwrap_or(&p).display()
                    ));
                }
            }
        }
    }
    over.sort();
    assert!(
        over.is_empty(),
        "files over {MAX_PRODUCTION_LINES} lines of production code (split them by responsibility): {over:?}"
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

#[test]
fn a_layer_violation_and_an_unassigned_module_are_found() {
    let g = graph_of(&[
        ("lib.rs", "pub mod core;\npub mod top;\npub mod stray;\n"),
        ("top.rs", "use crate::core::Base;\npub struct Tool;\n"),
        (
            "core.rs",
            "pub struct Base;\nfn f() { let _ = crate::top::Tool; }\n",
        ),
        ("stray.rs", "pub struct S;\n"),
    ]);
    let layers: &[(&str, &[&str])] = &[("surface", &["top"]), ("core", &["core"])];
    let v = layer_violations(&g.tops(), &g.module_edges(), layers);
    assert_eq!(v.len(), 2, "{v:?}");
    assert!(
        v.iter().any(
            |l| l.starts_with("`core` (core layer) imports `top` (surface layer")
                && l.contains("src/core.rs → src/top.rs")
        ),
        "{v:?}"
    );
    assert!(
        v.iter().any(|l| l.contains("`stray` is in no layer")),
        "{v:?}"
    );
    // Downward and same-layer imports are fine.
    let layers: &[(&str, &[&str])] = &[("surface", &["top", "core"]), ("rest", &["stray"])];
    assert!(layer_violations(&g.tops(), &g.module_edges(), layers).is_empty());
    // A layer table naming a module that does not exist is stale.
    let layers: &[(&str, &[&str])] = &[("surface", &["top", "core", "stray", "gone"])];
    let v = layer_violations(&g.tops(), &g.module_edges(), layers);
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].contains("`gone`"), "{v:?}");
}

#[test]
fn src_modules_form_no_cycle() {
    let graph = src_graph(Path::new(REPO));
    let cycles = graph.module_cycles();
    assert!(
        cycles.is_empty(),
        "top-level modules of src/ that import each other (docs/ARCHITECTURE.md, Layers):\n{}",
        cycles
            .iter()
            .map(|c| c.join("\n"))
            .collect::<Vec<_>>()
            .join("\n---\n")
    );
}

#[test]
fn src_modules_import_only_their_own_layer_or_below() {
    let graph = src_graph(Path::new(REPO));
    let v = layer_violations(&graph.tops(), &graph.module_edges(), LAYERS);
    assert!(
        v.is_empty(),
        "layer rule broken (docs/ARCHITECTURE.md, Layers; the table is LAYERS in tests/modgraph/mod.rs):\n{}",
        v.join("\n")
    );
}
