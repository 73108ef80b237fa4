//! What issue 39 ("thin tools over use cases") settled, held by reading the tree:
//! every audit line is one of the audit module's record types (no caller builds one with
//! `json!`), a board's power action runs in one place
//! (`crates/gatecmd-domain/src/power_run.rs`), and the flashing engine depends on no
//! gatecmd crate; the MCP tools are thin (at most 300 production lines a file, 600 a
//! tool folder) and the MCP crate has at most 15 top-level modules. What issue 48 added:
//! every surface calls the use cases (none builds a lease request, takes a board's key or
//! runs the power runner itself) and none decides through another surface's crate.

use std::path::{Path, PathBuf};

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// The Rust files of the server: the binary's `src/` and every crate's `src/`.
fn server_files() -> Vec<PathBuf> {
    let mut out = rust_files(&Path::new(REPO).join("src"));
    if let Ok(crates) = std::fs::read_dir(Path::new(REPO).join("crates")) {
        for c in crates.flatten() {
            out.extend(rust_files(&c.path().join("src")));
        }
    }
    out
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(rust_files(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// Production code: a file's `#[cfg(test)]` module (at its end, by convention) is cut off,
/// and files that are only tests are skipped.
fn production(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_string_lossy();
    if name == "tests.rs" || name.ends_with("_tests.rs") {
        return None;
    }
    let text = std::fs::read_to_string(path).ok()?;
    Some(match text.find("#[cfg(test)]\nmod ") {
        Some(at) => text[..at].to_string(),
        None => text,
    })
}

/// The calls in `source` that hand the audit log a `json!` object: (line, the call).
fn hand_built_records(source: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for call in [".record(", ".refusal(", ".audit("] {
        let mut from = 0;
        while let Some(at) = source[from..].find(call) {
            let start = from + at;
            let window = &source[start..source.len().min(start + 160)];
            // The call's own arguments, up to its closing parenthesis at depth 0.
            let mut depth = 0i32;
            let mut end = window.len();
            for (i, ch) in window.char_indices().skip(call.len() - 1) {
                match ch {
                    '(' | '{' | '[' => depth += 1,
                    ')' | '}' | ']' => {
                        depth -= 1;
                        if depth == 0 {
                            end = i;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            if window[..end].contains("json!") {
                let line = source[..start].matches('\n').count() + 1;
                out.push((line, window[..end.min(80)].to_string()));
            }
            from = start + call.len();
        }
    }
    out
}

#[test]
fn no_audit_record_is_built_by_hand() {
    let files = server_files();
    assert!(files.len() > 100, "the sources were not found");
    let mut found = Vec::new();
    for f in &files {
        let Some(code) = production(f) else { continue };
        for (line, call) in hand_built_records(&code) {
            found.push(format!("{}:{line}: {call}", f.display()));
        }
    }
    assert!(
        found.is_empty(),
        "audit lines built with json! (give them a record type in \
         crates/gatecmd-domain/src/audit/):\n{}",
        found.join("\n")
    );
}

#[test]
fn a_hand_built_record_is_found() {
    let code = "fn f() {\n    state.audit.record(&serde_json::json!({\"event\": \"x\"}));\n    \
                audit.record(&PowerRecord { a: 1 });\n    lab.audit(\n        \"e\",\n        \
                serde_json::json!({\"b\": 1}),\n    );\n}\n";
    let found = hand_built_records(code);
    assert_eq!(
        found.iter().map(|(l, _)| *l).collect::<Vec<_>>(),
        [2, 4],
        "{found:?}"
    );
}

/// Running a power action means the executor and the board's power state together; only
/// the power runner does both.
#[test]
fn one_power_runner() {
    let runner = Path::new(REPO).join("crates/gatecmd-domain/src/power_run.rs");
    let mut copies = Vec::new();
    for f in server_files() {
        let Some(code) = production(&f) else { continue };
        if code.contains("set_power_state(") && code.contains("run_with(") && f != runner {
            copies.push(f.display().to_string());
        }
    }
    assert!(
        copies.is_empty(),
        "a power action run outside power_run::run_power: {copies:?}"
    );
    let code = production(&runner).expect("the power runner");
    assert!(code.contains("set_power_state(") && code.contains("run_with("));
}

/// `gatecmd-flash` can be used by another project: its dependencies name no gatecmd crate.
#[test]
fn the_flash_engine_depends_on_no_gatecmd_crate() {
    let manifest = std::fs::read_to_string(Path::new(REPO).join("crates/gatecmd-flash/Cargo.toml"))
        .expect("gatecmd-flash's Cargo.toml");
    let deps: Vec<&str> = manifest
        .lines()
        .skip_while(|l| l.trim() != "[dependencies]")
        .skip(1)
        .take_while(|l| !l.starts_with('['))
        .filter(|l| l.trim_start().starts_with("gatecmd"))
        .collect();
    assert!(deps.is_empty(), "gatecmd-flash depends on {deps:?}");
}

/// Lines of production code in a file, as the tool-size rule counts them: everything before
/// its `#[cfg(test)]` module, comments and blank lines included (a file's why is part of
/// its weight); a file that is only tests counts nothing.
fn production_lines(path: &Path) -> usize {
    production(path).map_or(0, |code| code.lines().count())
}

/// A tool holds its request, its answer and its rendering; the work is in the domain's use
/// cases. So a tool file stays under 300 production lines, and a tool kept in a folder
/// (`execute_command/`) under 600 for the whole folder.
#[test]
fn tools_are_thin() {
    let tools = Path::new(REPO).join("crates/gatecmd-mcp/src/tools");
    let mut heavy = Vec::new();
    let mut seen = 0;
    for e in std::fs::read_dir(&tools)
        .expect("the tools folder")
        .flatten()
    {
        let p = e.path();
        if p.is_dir() {
            let files = rust_files(&p);
            let total: usize = files.iter().map(|f| production_lines(f)).sum();
            for f in &files {
                let n = production_lines(f);
                if n > 300 {
                    heavy.push(format!("{}: {n} lines (at most 300 per file)", f.display()));
                }
            }
            if total > 600 {
                heavy.push(format!(
                    "{}/: {total} lines (at most 600 per tool folder)",
                    p.display()
                ));
            }
            seen += 1;
        } else if p.extension().is_some_and(|x| x == "rs")
            && p.file_name() != Some("mod.rs".as_ref())
        {
            let n = production_lines(&p);
            if n > 300 {
                heavy.push(format!("{}: {n} lines (at most 300 per tool)", p.display()));
            }
            seen += 1;
        }
    }
    assert!(seen > 20, "the tool files were not read ({seen})");
    assert!(
        heavy.is_empty(),
        "tools that hold work that belongs in crates/gatecmd-domain/src/usecases/:\n{}",
        heavy.join("\n")
    );
}

/// The counting rule itself: the test module is cut off, a tests-only file counts nothing.
#[test]
fn production_lines_leave_tests_out() {
    let dir = std::env::temp_dir().join(format!("gatecmd-use-cases-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let tool = dir.join("tool.rs");
    std::fs::write(
        &tool,
        "//! A tool.\n\nfn f() {}\n\n#[cfg(test)]\nmod tests {\n    fn t() {}\n}\n",
    )
    .expect("write");
    let only_tests = dir.join("prepare_tests.rs");
    std::fs::write(&only_tests, "fn t() {}\n").expect("write");
    assert_eq!(production_lines(&tool), 4);
    assert_eq!(production_lines(&only_tests), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A newcomer reads the MCP crate from its top level: a few rooms, not a flat list
/// (ARCHITECTURE.md, "Crates").
#[test]
fn the_mcp_crate_has_few_rooms() {
    let lib = std::fs::read_to_string(Path::new(REPO).join("crates/gatecmd-mcp/src/lib.rs"))
        .expect("gatecmd-mcp's lib.rs");
    let modules: Vec<&str> = lib
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            l.strip_prefix("pub mod ")
                .or_else(|| l.strip_prefix("mod "))
                .or_else(|| l.strip_prefix("pub(crate) mod "))
        })
        .collect();
    assert!(!modules.is_empty(), "no module read from lib.rs");
    assert!(
        modules.len() <= 15,
        "gatecmd-mcp declares {} top-level modules (at most 15): {modules:?}",
        modules.len()
    );
}

/// The surfaces: the MCP crate and the binary's `src/` (the CLI, the transport, the bench
/// page, the labgrid bridge).
fn surface_files() -> Vec<PathBuf> {
    let mut out = rust_files(&Path::new(REPO).join("src"));
    out.extend(rust_files(&Path::new(REPO).join("crates/gatecmd-mcp/src")));
    out
}

/// What no surface does itself, and the use case that does it
/// (`crates/gatecmd-domain/src/usecases/`).
const SURFACE_MUST_NOT: &[(&str, &str)] = &[
    (
        "LeaseRequest {",
        "builds a lease request (the lease use case does: usecases/lease/)",
    ),
    (
        ".locks.lock(",
        "takes a lease from the lock manager (usecases/lease/)",
    ),
    (
        "run_power(",
        "runs the power runner (the power use case does: usecases/power/)",
    ),
    (
        "CommandLockRequest {",
        "takes a board's key itself (usecases/take.rs, usecases/power/switch.rs)",
    ),
    (".locks.unlock(", "ends a lease itself (usecases/unlock.rs)"),
    (
        ".force_unlock(",
        "ends another client's lease itself (usecases/unlock.rs)",
    ),
    (
        ".boots.power_on(",
        "starts a boot record itself (usecases/power/switch.rs)",
    ),
];

/// What `code` does that a use case should: the rule each breach breaks.
fn surface_breaches(code: &str) -> Vec<&'static str> {
    SURFACE_MUST_NOT
        .iter()
        .filter(|(pattern, _)| code.contains(pattern))
        .map(|(_, why)| *why)
        .collect()
}

/// Every surface calls the use cases: none builds a lease request, takes a lease or a
/// board's key, or runs the power runner itself (issue 48). The labgrid bridge's power
/// port and holds, and the bench page's approval decision, name the use cases they call.
#[test]
fn surfaces_call_the_use_cases() {
    let files = surface_files();
    assert!(files.len() > 50, "the surfaces were not found");
    let mut found = Vec::new();
    for f in &files {
        let Some(code) = production(f) else { continue };
        for why in surface_breaches(&code) {
            found.push(format!("{}: {why}", f.display()));
        }
    }
    assert!(
        found.is_empty(),
        "surfaces doing a use case's work:\n{}",
        found.join("\n")
    );
    for (file, use_case) in [
        ("src/lab/power.rs", "usecases::power::switch"),
        ("src/lab/holds.rs", "usecases::lease"),
        ("src/page/approval.rs", "usecases::approval"),
        ("src/page/release.rs", "usecases::unlock"),
        (
            "crates/gatecmd-mcp/src/tools/lock_device.rs",
            "usecases::lease",
        ),
        (
            "crates/gatecmd-mcp/src/tools/lock_board.rs",
            "usecases::lease",
        ),
        (
            "crates/gatecmd-mcp/src/tools/power_board.rs",
            "usecases::power::switch",
        ),
    ] {
        let code = production(&Path::new(REPO).join(file)).unwrap_or_default();
        assert!(code.contains(use_case), "{file} does not call {use_case}");
    }
}

/// What the non-MCP surfaces may not reach into the MCP crate for: its calls and its tools
/// (a decision, a refusal's wording) — the domain's use cases hold what they share. Its
/// views (a board's or a device's row), its server (served by the transport) and its lab
/// peer link (the labgrid bridge asks peers over MCP) are not decisions.
const OTHER_SURFACE: &[&str] = &[
    "gatecmd_mcp::calls",
    "gatecmd_mcp::tools",
    "gatecmd_mcp::{",
    "gatecmd_mcp as ",
];

/// The bench page, the command line and the labgrid bridge take no decision through
/// another surface's crate (issue 48: the page's approval decision was the MCP crate's).
#[test]
fn no_surface_decides_through_another() {
    let mut found = Vec::new();
    let mut seen = 0;
    for dir in ["src/page", "src/cli", "src/lab"] {
        for f in rust_files(&Path::new(REPO).join(dir)) {
            seen += 1;
            let Some(code) = production(&f) else { continue };
            for p in OTHER_SURFACE.iter().filter(|p| code.contains(*p)) {
                found.push(format!("{}: {p}", f.display()));
            }
        }
    }
    assert!(seen > 20, "the surfaces were not read ({seen})");
    assert!(
        found.is_empty(),
        "a surface deciding through the MCP crate (call the domain's use case):\n{}",
        found.join("\n")
    );
}

/// The reading itself: each thing a surface may not do is found, a call of a use case is not.
#[test]
fn a_surface_doing_the_work_itself_is_found() {
    let by_hand = "let lease = LeaseRequest {\n    key,\n};\nstate.locks.lock(lease).await;\n\
                   let run = run_power(&state, b, &spec, after, cancel, via).await;\n\
                   let lock = CommandLockRequest {\n};\nlab.state.boots.power_on(board, t);\n\
                   p.state.locks.force_unlock(&lease.lease_id, &operator);\n\
                   let _ = state.locks.unlock(&h.lease, &holder_of(&h.place));\n";
    assert_eq!(surface_breaches(by_hand).len(), SURFACE_MUST_NOT.len());
    let through = "let held = switch::take(&state, &config, &plan, caller).await?;\n\
                   lease_board(state, &ask, which, &cancel).await\n";
    assert!(surface_breaches(through).is_empty());
}
