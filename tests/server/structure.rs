//! Holds what the compiler cannot: inside each crate of the server (the binary's `src/`
//! and every library under `crates/`), the file-level import graph has no cycle and no two
//! top-level modules import each other. Between crates Cargo refuses a cycle and an upward
//! import does not compile (crates/gatecmd-core/tests/upward_import.rs shows it), so the
//! layers need no reading of imports here. In gatecmd-mcp, no tool imports another tool
//! and nothing but the tool list imports a tool (`tool_files_import_no_other_tool`). The
//! graph reader (which paths make an edge, how re-exports are followed, what counts as
//! test code) is `tests/modgraph/mod.rs`; both checks are tested below on made-up crates.
//! Across every crate's production code, no function is longer than 150 lines and none
//! allows `clippy::too_many_arguments` (`no_production_function_is_over_150_lines`,
//! `no_too_many_arguments_allowance`): a long function is split along its ideas, and many
//! arguments become the type that holds them. gatecmd-domain declares at most 15
//! top-level modules, rooms a newcomer can name (`the_domain_has_at_most_15_rooms`).

use crate::modgraph;

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

// One tool, one file, and no tool leans on another (issue 30): in gatecmd-mcp, a file of a
// tool (`crates/gatecmd-mcp/src/tools/<tool>.rs`, or any file of the folder `tools/<tool>/`)
// imports no other tool's file, and nothing outside `tools/` imports a tool (the list,
// `tools/mod.rs`, is neither: it only names them); the binary (`src/`) imports no tool
// of gatecmd-mcp either. What several tools share lives below them (views, board_talk,
// answer, … or gatecmd-domain), so a tool can be read, changed or removed on its own.

/// Imports that break the rule and are known, each to go with a move already under way:
/// (importing tool or binary file, tool imported, why). Each must still occur; when its move
/// lands the check fails until the line goes.
const PENDING_TOOL_IMPORTS: &[(&str, &str, &str)] = &[];

/// The tool a file belongs to: `lock_board` for `tools/lock_board.rs`, `execute_command`
/// for `tools/execute_command/run.rs`; `None` outside `tools/` and for the list itself.
fn tool_of(file: &Path) -> Option<String> {
    let mut parts = file.components().map(|c| c.as_os_str().to_string_lossy());
    if parts.next()? != "tools" {
        return None;
    }
    let first = parts.next()?;
    if first == "mod.rs" {
        return None;
    }
    Some(first.trim_end_matches(".rs").to_string())
}

/// Every import in `graph` (one crate) that reaches a tool's file from another tool or
/// from outside `tools/`: (importing file, tool, the path that makes the edge).
fn tool_imports(graph: &Graph) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for (from, targets) in graph.edges() {
        let file = &graph.modules[from].file;
        let in_list = file == Path::new("tools/mod.rs");
        let own = tool_of(file);
        for (to, why) in targets {
            let Some(tool) = tool_of(&graph.modules[to].file) else {
                continue;
            };
            if !in_list && own.as_deref() != Some(tool.as_str()) {
                out.push((file.display().to_string(), tool, why));
            }
        }
    }
    out
}

/// Every `gatecmd_mcp::tools::<tool>` path in the production code of `files` (path relative
/// to the binary's `src/`, text): (file, tool, path).
fn binary_tool_imports(files: &[(String, String)]) -> Vec<(String, String, String)> {
    let inline = regex::Regex::new(r"\bgatecmd_mcp(?:::[A-Za-z_][A-Za-z0-9_]*)+").expect("regex");
    let mut out = Vec::new();
    for (name, text) in files {
        let code = production(text);
        let mut paths: Vec<String> = use_decls(&code).into_iter().flat_map(|(_, p)| p).collect();
        paths.extend(inline.find_iter(&code).map(|m| m.as_str().to_string()));
        for p in paths {
            if let Some(rest) = p.strip_prefix("gatecmd_mcp::tools::") {
                let tool = rest.split("::").next().unwrap_or(rest).to_string();
                out.push((name.clone(), tool, p.clone()));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// What is wrong: each import not in `pending`, and each pending entry that no longer occurs.
fn tool_import_errors(
    found: &[(String, String, String)],
    pending: &[(&str, &str, &str)],
) -> Vec<String> {
    let mut errors: Vec<String> = found
        .iter()
        .filter(|(file, tool, _)| !pending.iter().any(|(f, t, _)| f == file && t == tool))
        .map(|(file, tool, why)| format!("{file} imports the tool `{tool}` (via `{why}`)"))
        .collect();
    for (file, tool, why) in pending {
        if !found.iter().any(|(f, t, _)| f == file && t == tool) {
            errors.push(format!(
                "{file} no longer imports `{tool}` ({why}): remove it from PENDING_TOOL_IMPORTS"
            ));
        }
    }
    errors
}

/// The binary's source files, relative to `src/`, with their text.
fn binary_files() -> Vec<(String, String)> {
    let src = Path::new(REPO).join("src");
    modules(&src)
        .into_iter()
        .map(|m| {
            let text = std::fs::read_to_string(src.join(&m.file)).unwrap_or_default();
            (m.file.display().to_string(), text)
        })
        .collect()
}

#[test]
fn tool_files_import_no_other_tool() {
    let mcp = Graph::new(modules(&Path::new(REPO).join("crates/gatecmd-mcp/src")));
    assert!(
        mcp.modules
            .iter()
            .filter(|m| tool_of(&m.file).is_some())
            .count()
            >= 20,
        "the tool files of gatecmd-mcp were not read"
    );
    let mut found = tool_imports(&mcp);
    found.extend(binary_tool_imports(&binary_files()));
    let errors = tool_import_errors(&found, PENDING_TOOL_IMPORTS);
    assert!(
        errors.is_empty(),
        "a tool is imported by another tool or from outside tools/ (move what they share \
         below them: a view, a module beside tools/, or gatecmd-domain):\n{}",
        errors.join("\n")
    );
}

// The tool check on made-up crates.

#[test]
fn a_tool_importing_another_tool_is_found() {
    let g = graph_of(&[
        ("lib.rs", "pub mod shared;\npub mod tools;\n"),
        (
            "tools/mod.rs",
            "pub mod a;\npub mod b;\nfn list() { crate::tools::a::x(); }\n",
        ),
        ("tools/a.rs", "use crate::shared::Common;\npub fn x() {}\n"),
        (
            "tools/b.rs",
            "use crate::tools::a::x;\nuse crate::shared::Common;\n",
        ),
        ("shared.rs", "pub struct Common;\n"),
    ]);
    let found = tool_imports(&g);
    assert_eq!(
        found,
        [(
            "tools/b.rs".to_string(),
            "a".to_string(),
            "crate::tools::a::x".to_string()
        )],
        "b → a is found; the list naming a and both tools using shared.rs are not"
    );
}

#[test]
fn a_tool_reached_from_outside_tools_or_through_a_re_export_is_found() {
    let g = graph_of(&[
        (
            "lib.rs",
            "pub mod resources;\npub mod shared;\npub mod tools;\n",
        ),
        ("tools/mod.rs", "pub mod a;\npub mod big;\n"),
        ("tools/a.rs", "pub fn view() {}\npub struct Thing;\n"),
        // A folder is one tool: its files import each other freely.
        ("tools/big/mod.rs", "mod run;\nuse self::run::go;\n"),
        ("tools/big/run.rs", "pub fn go() {}\n"),
        ("resources.rs", "fn read() { crate::tools::a::view(); }\n"),
        // A re-export does not launder a tool's item: the edge goes to the defining file.
        ("shared.rs", "pub use crate::tools::a::Thing;\n"),
        ("tools/big/use_it.rs", "use crate::shared::Thing;\n"),
    ]);
    let mut found: Vec<String> = tool_imports(&g)
        .into_iter()
        .map(|(f, t, _)| format!("{f} → {t}"))
        .collect();
    found.sort();
    assert_eq!(found, ["resources.rs → a", "tools/big/use_it.rs → a"]);
}

#[test]
fn the_binary_importing_a_tool_is_found_and_a_stale_exception_fails() {
    let files = [
        (
            "lab/holds.rs".to_string(),
            "use gatecmd_mcp::views::device_at;\nuse gatecmd_mcp::{server::GatecmdServer, tools::lock_board::LockBoardRequest};\n".to_string(),
        ),
        (
            "cli/x.rs".to_string(),
            "fn f() { gatecmd_mcp::tools::list_devices::list(); }\n#[cfg(test)]\nmod tests {\n    use gatecmd_mcp::tools::wait_job::wait;\n}\n".to_string(),
        ),
    ];
    let found = binary_tool_imports(&files);
    let tools: Vec<(&str, &str)> = found
        .iter()
        .map(|(f, t, _)| (f.as_str(), t.as_str()))
        .collect();
    assert_eq!(
        tools,
        [("cli/x.rs", "list_devices"), ("lab/holds.rs", "lock_board")]
    );
    let pending = [
        ("cli/x.rs", "list_devices", "moving"),
        ("lab/gone.rs", "power", "moved"),
    ];
    let errors = tool_import_errors(&found, &pending);
    assert_eq!(errors.len(), 2, "{errors:#?}");
    assert!(
        errors[0].starts_with("lab/holds.rs imports the tool `lock_board`"),
        "{errors:#?}"
    );
    assert!(
        errors[1].contains("lab/gone.rs no longer imports `power`"),
        "{errors:#?}"
    );
}

// No production function over 150 lines, and no `too_many_arguments` allowance: a long
// function is split along its ideas, and a function with many arguments takes the type
// that holds them (as the flash's phases take `flash::run::context::Run`).

/// The longest a production function may be, from its `fn` line to its closing brace.
const MAX_FN_LINES: usize = 150;

/// `code` (literals already blanked) with every `#[cfg(test)]` item blanked, newlines
/// kept, so that line numbers still match the file.
fn blank_test_items(code: &str) -> String {
    let mut out = code.as_bytes().to_vec();
    let mut i = 0;
    while let Some(at) = code[i..].find("#[cfg(test)]") {
        let start = i + at;
        let end = item_end(code.as_bytes(), start + "#[cfg(test)]".len());
        for c in &mut out[start..end] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
        i = end;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Every function with a body in `src` longer than `max` lines: (name, first line, lines).
/// Comments, literals and test items do not count.
fn long_functions(src: &str, max: usize) -> Vec<(String, usize, usize)> {
    static FN: std::sync::LazyLock<regex::Regex> =
        std::sync::LazyLock::new(|| regex::Regex::new(r"\bfn\s+([A-Za-z_][A-Za-z0-9_]*)").unwrap());
    let code = blank_test_items(&blank_literals(src));
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    for m in FN.captures_iter(&code) {
        let (whole, name) = (m.get(0).unwrap(), &m[1]);
        // The body's `{` after the signature; a `;` first is a declaration without one.
        let mut depth = 0i32;
        let mut body = None;
        for (k, &c) in bytes.iter().enumerate().skip(whole.end()) {
            match c {
                b'(' | b'[' => depth += 1,
                b')' | b']' => depth -= 1,
                b'{' if depth == 0 => {
                    body = Some(k);
                    break;
                }
                b';' if depth == 0 => break,
                _ => {}
            }
        }
        let Some(body) = body else { continue };
        let end = item_end(bytes, body);
        let lines = code[whole.start()..end].matches('\n').count() + 1;
        if lines > max {
            let line = code[..whole.start()].matches('\n').count() + 1;
            out.push((name.to_string(), line, lines));
        }
    }
    out
}

/// Every production source file of the server (`src/` and `crates/*/src`), relative to
/// the repository, with its text; unit-test files (`tests.rs`, `*_tests.rs`) left out.
fn production_files() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for src in crate_sources(Path::new(REPO)) {
        let mut stack = vec![src];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let p = e.path();
                let name = p
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned();
                if p.is_dir() {
                    stack.push(p);
                } else if name.ends_with(".rs")
                    && name != "tests.rs"
                    && !name.ends_with("_tests.rs")
                {
                    let rel = p.strip_prefix(REPO).unwrap_or(&p).display().to_string();
                    out.push((rel, std::fs::read_to_string(&p).unwrap_or_default()));
                }
            }
        }
    }
    out.sort();
    out
}

#[test]
fn no_production_function_is_over_150_lines() {
    let files = production_files();
    assert!(
        files.len() > 300,
        "the sources were not read: {}",
        files.len()
    );
    let mut long = Vec::new();
    for (file, text) in &files {
        for (name, line, lines) in long_functions(text, MAX_FN_LINES) {
            long.push(format!("{file}:{line}: fn {name} is {lines} lines"));
        }
    }
    assert!(
        long.is_empty(),
        "production functions over {MAX_FN_LINES} lines (split them along their ideas):\n{}",
        long.join("\n")
    );
}

#[test]
fn no_too_many_arguments_allowance() {
    let found: Vec<String> = production_files()
        .iter()
        .filter(|(_, text)| blank_literals(text).contains("too_many_arguments"))
        .map(|(file, _)| file.clone())
        .collect();
    assert!(
        found.is_empty(),
        "`clippy::too_many_arguments` allowed in {found:?}: give the function the type \
         that holds its arguments instead"
    );
}

#[test]
fn a_long_function_is_found_and_test_code_and_comments_are_not() {
    let body = |n: usize| "    let x = 1;\n".repeat(n);
    let src = format!(
        "/// fn in a comment {{\nfn short() {{\n{}}}\n\npub(crate) async fn long<T: Fn()>(a: [u8; 4]) -> u8 {{\n    let s = \"}}\";\n{}    0\n}}\n\ntrait T {{\n    fn declared(&self);\n}}\n\n#[cfg(test)]\nmod tests {{\n    fn long_test() {{\n{}    }}\n}}\n",
        body(148),
        body(150),
        body(200),
    );
    let found = long_functions(&src, MAX_FN_LINES);
    assert_eq!(found, [("long".to_string(), 153, 154)], "{found:?}");
    // Exactly at the limit is allowed: `short` is 150 lines.
    assert!(
        long_functions(&src, 149)
            .iter()
            .any(|(n, _, l)| n == "short" && *l == 150)
    );
}

// The domain's rooms: few enough top-level modules that a newcomer can name them all.

/// The most top-level modules gatecmd-domain may declare.
const MAX_DOMAIN_ROOMS: usize = 15;

/// The modules a `lib.rs` declares (`mod x;`, `pub mod x;`, `pub(crate) mod x;`), test
/// modules left out.
fn declared_modules(lib: &str) -> Vec<String> {
    let re =
        regex::Regex::new(r"(?m)^\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*;")
            .unwrap();
    let code = blank_test_items(&blank_literals(lib));
    re.captures_iter(&code).map(|c| c[1].to_string()).collect()
}

#[test]
fn the_domain_has_at_most_15_rooms() {
    let lib = std::fs::read_to_string(Path::new(REPO).join("crates/gatecmd-domain/src/lib.rs"))
        .unwrap_or_default();
    let rooms = declared_modules(&lib);
    assert!(
        rooms.len() >= 5,
        "gatecmd-domain's lib.rs was not read: {rooms:?}"
    );
    assert!(
        rooms.len() <= MAX_DOMAIN_ROOMS,
        "gatecmd-domain declares {} top-level modules (at most {MAX_DOMAIN_ROOMS}: group them \
         into rooms a newcomer can name):\n{}",
        rooms.len(),
        rooms.join("\n")
    );
}

#[test]
fn declared_modules_are_read_and_test_modules_are_not() {
    let lib = "//! mod in_doc;\npub mod a;\nmod b;\npub(crate) mod c;\n#[cfg(test)]\nmod tests;\n";
    assert_eq!(declared_modules(lib), ["a", "b", "c"]);
}
