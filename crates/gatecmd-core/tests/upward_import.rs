//! The layers are crates: a lower crate cannot import a higher one, because it does not
//! depend on it (and Cargo refuses the dependency cycle that adding it would make). Shown
//! with the real compiler: `tests/ui/upward.rs` is a file of gatecmd-core's dependants'
//! kind that imports gatecmd-domain's state, and it does not compile (docs/ARCHITECTURE.md,
//! "Crates").

#[test]
fn upward_import() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/upward.rs");
}
