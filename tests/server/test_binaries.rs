//! The root crate's integration tests are one binary per lane of scripts/cargo-tests.sh:
//! `tests/<lane>/main.rs` declaring a module per topic file beside it (ripgrep's one
//! integration binary, in cargo's `tests/NAME/main.rs` form). Each binary links the whole
//! server, so a top-level `tests/*.rs` (a binary of its own) costs a link; a topic file that
//! its `main.rs` does not declare is never built, so its tests would silently never run; a
//! binary the lanes do not name would not run in `make test`. `layout_errors` finds all
//! three, and is tried below on a made-up tree.

use std::path::Path;

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// The `mod NAME;` lines of an entry (not inline `mod NAME {`), and whether each has a
/// `#[path]` of its own (a shared module elsewhere under tests/).
fn declared(main: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut pathed = false;
    for line in main.lines().map(str::trim) {
        if line.starts_with("#[path") {
            pathed = true;
            continue;
        }
        if let Some(name) = line
            .strip_prefix("mod ")
            .or_else(|| line.strip_prefix("pub mod "))
            .and_then(|rest| rest.strip_suffix(';'))
        {
            out.push((name.to_string(), pathed));
        }
        pathed = false;
    }
    out
}

/// What is wrong with the test binaries under `tests`, given the lanes script's text.
fn layout_errors(tests: &Path, lanes_script: &str) -> Vec<String> {
    let mut errors = Vec::new();
    let mut entries = std::fs::read_dir(tests)
        .expect("tests/")
        .flatten()
        .map(|e| e.path())
        .collect::<Vec<_>>();
    entries.sort();
    for path in entries {
        let name = path
            .file_name()
            .map_or(String::new(), |n| n.to_string_lossy().into_owned());
        if path.is_file() && name.ends_with(".rs") {
            errors.push(format!(
                "tests/{name} is a test binary of its own (a link of the whole server): \
                 move it into tests/server/ or tests/hardware/ and declare it in that main.rs"
            ));
            continue;
        }
        let main = path.join("main.rs");
        let Ok(text) = std::fs::read_to_string(&main) else {
            continue;
        };
        if !lanes_script.contains(&format!("--test {name}")) {
            errors.push(format!(
                "tests/{name}/main.rs is a test binary no lane of scripts/cargo-tests.sh runs"
            ));
        }
        let mods = declared(&text);
        let mut topics = std::fs::read_dir(&path)
            .expect("the binary's folder")
            .flatten()
            .filter_map(|e| {
                let file = e.file_name().to_string_lossy().into_owned();
                let topic = file.strip_suffix(".rs")?.to_string();
                (topic != "main" && e.path().is_file()).then_some(topic)
            })
            .collect::<Vec<_>>();
        topics.sort();
        for topic in &topics {
            if !mods.iter().any(|(m, pathed)| m == topic && !pathed) {
                errors.push(format!(
                    "tests/{name}/{topic}.rs is not declared in tests/{name}/main.rs \
                     (`mod {topic};`): it is never built, its tests never run"
                ));
            }
        }
    }
    errors
}

#[test]
fn integration_tests_are_one_binary_per_lane() {
    let repo = Path::new(REPO);
    let lanes = std::fs::read_to_string(repo.join("scripts/cargo-tests.sh")).expect("lanes");
    let errors = layout_errors(&repo.join("tests"), &lanes);
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn a_stray_file_an_undeclared_topic_and_an_unrun_binary_are_found() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tests = dir.path();
    let write = |path: &str, text: &str| {
        let path = tests.join(path);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    };
    write(
        "server/main.rs",
        "#[path = \"../harness/mod.rs\"]\nmod harness;\nmod a;\n",
    );
    write("server/a.rs", "");
    write("server/b.rs", "");
    write("harness/mod.rs", "");
    write("other/main.rs", "mod c;\n");
    write("other/c.rs", "");
    write("stray.rs", "");
    let errors = layout_errors(tests, "lanes=(\"--lib --test server\")");
    assert_eq!(errors.len(), 3, "{errors:#?}");
    assert!(errors[0].contains("tests/other/main.rs is a test binary no lane"));
    assert!(errors[1].contains("tests/server/b.rs is not declared"));
    assert!(errors[2].contains("tests/stray.rs is a test binary of its own"));
    // Declared, and the lane names both: nothing to say.
    write("server/main.rs", "mod a;\nmod b;\n");
    std::fs::remove_file(tests.join("stray.rs")).expect("rm");
    let errors = layout_errors(tests, "--test server --test other");
    assert!(errors.is_empty(), "{errors:#?}");
}
