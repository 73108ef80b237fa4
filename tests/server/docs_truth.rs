//! Keeps the prose honest: every `` `symbol` in `path/file.rs` `` reference in
//! docs/REQUEST-PATH.md, docs/ARCHITECTURE.md and docs/SECURITY.md must name something
//! defined in that file (a Rust item, or a Python test), and the invariants
//! docs/ARCHITECTURE.md states (who spawns, who writes the device registry) must hold in
//! the source. A rename or move that the docs miss fails CI. The crate table of
//! docs/ARCHITECTURE.md is held to the manifests and `lib.rs` files, and every crate's
//! `lib.rs` `# Layout` to its modules. In the prose of docs/*.md, README.md and the crates'
//! READMEs, every repository path named in backticks (`crates/x/src/y.rs`, `tests/z.py`)
//! must exist, and every `gatecmd_crate::module::Item` must name a module that exists and
//! an item defined in it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use regex::Regex;

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// Documents whose references are checked.
const CHECKED_DOCS: [&str; 3] = [
    "docs/REQUEST-PATH.md",
    "docs/ARCHITECTURE.md",
    // Its listener inventory names the test of each row (issue 29).
    "docs/SECURITY.md",
];

/// One `` `symbol` in `path` `` found in a document.
#[derive(Debug, PartialEq, Eq)]
struct Reference {
    line: usize,
    /// `name` or a path such as `Type::method`.
    symbol: String,
    /// A file or directory, relative to the repository.
    path: String,
}

/// Every reference in `doc`, in order. A reference may wrap: `x` in, newline, `path`.
fn references(doc: &str) -> Vec<Reference> {
    let re = Regex::new(
        r"`([A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*)`\s+in\s+`([A-Za-z0-9_./-]+)`",
    )
    .expect("reference regex");
    re.captures_iter(doc)
        .map(|c| Reference {
            line: doc[..c.get(0).map_or(0, |m| m.start())]
                .matches('\n')
                .count()
                + 1,
            symbol: c[1].to_string(),
            path: c[2].to_string(),
        })
        .collect()
}

/// Source text without `//` comments (doc comments included), so a name that is only
/// mentioned in a comment does not count as defined. (A `//` inside a string literal also
/// cuts the line; that can only hide a definition, never invent one.)
fn strip_comments(source: &str) -> String {
    source
        .lines()
        .map(|l| l.split_once("//").map_or(l, |(code, _)| code))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Production code only: a file's `#[cfg(test)] mod tests` (at its end, by convention) is
/// cut off. Unit tests stand in for the device layer or a child process on purpose.
fn production_code(source: &str) -> &str {
    source
        .find("#[cfg(test)]\nmod tests")
        .map_or(source, |at| &source[..at])
}

/// Whether `name` is defined in `source` as a whole word: `fn`, `struct`, `enum`, `trait`,
/// `type`, `const`, `static`, `mod`, `union`, `macro_rules!`, or named in an `impl … name`
/// header. With `variant_ok`, an enum variant (`Name,` `Name(` `Name {` at a line start)
/// counts too: used for the segments after the first in `Type::Variant`.
fn defines(source: &str, name: &str, variant_ok: bool) -> bool {
    let n = regex::escape(name);
    let mut patterns = vec![
        format!(r"\b(?:fn|struct|enum|trait|type|const|static|mod|union)\s+{n}\b"),
        format!(r"\bmacro_rules!\s*{n}\b"),
        format!(r"\bimpl\b[^{{;]*\b{n}\b"),
        // A Python test (tests/python) named by a document.
        format!(r"(?m)^\s*(?:async\s+)?def\s+{n}\s*\("),
    ];
    if variant_ok {
        patterns.push(format!(r"(?m)^\s*{n}\s*(?:,|\(|\{{|=|$)"));
    }
    let code = strip_comments(source);
    patterns
        .iter()
        .any(|p| Regex::new(p).is_ok_and(|re| re.is_match(&code)))
}

/// The Rust source at `path` (a file, or every `.rs` file under a directory).
fn source_at(repo: &Path, path: &str) -> Option<String> {
    let full = repo.join(path);
    if full.is_file() {
        return std::fs::read_to_string(full).ok();
    }
    if full.is_dir() {
        let mut text = String::new();
        for f in rust_files(&full) {
            text.push_str(&std::fs::read_to_string(f).ok()?);
            text.push('\n');
        }
        return Some(text);
    }
    None
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

/// Every broken reference in `doc` (named `doc_name` in messages); empty when all hold.
fn check_document(repo: &Path, doc_name: &str, doc: &str) -> Vec<String> {
    let mut errors = Vec::new();
    for r in references(doc) {
        let Some(source) = source_at(repo, &r.path) else {
            errors.push(format!(
                "{doc_name}:{}: `{}` in `{}`: no such file or directory",
                r.line, r.symbol, r.path
            ));
            continue;
        };
        for (i, segment) in r.symbol.split("::").enumerate() {
            if !defines(&source, segment, i > 0) {
                errors.push(format!(
                    "{doc_name}:{}: `{}` in `{}`: no definition of `{segment}` there \
                     (renamed or moved? update the document)",
                    r.line, r.symbol, r.path
                ));
                break;
            }
        }
    }
    errors
}

fn read_doc(name: &str) -> String {
    std::fs::read_to_string(Path::new(REPO).join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn documents_name_only_symbols_that_exist() {
    let mut errors = Vec::new();
    for name in CHECKED_DOCS {
        let doc = read_doc(name);
        assert!(
            references(&doc).len() >= 10,
            "{name} has almost no checked references; write them as `symbol` in `src/file.rs`"
        );
        errors.extend(check_document(Path::new(REPO), name, &doc));
    }
    assert!(
        errors.is_empty(),
        "stale references:\n{}",
        errors.join("\n")
    );
}

/// The documents whose prose paths and items are checked: docs/*.md, README.md and every
/// crate's README.md (a crate README's paths may be relative to its crate).
fn prose_documents(repo: &Path) -> Vec<String> {
    let mut docs = vec!["README.md".to_string()];
    for (dir, file) in [("docs", None), ("crates", Some("README.md"))] {
        let Ok(entries) = std::fs::read_dir(repo.join(dir)) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            match file {
                None if name.ends_with(".md") => docs.push(format!("{dir}/{name}")),
                Some(f) if repo.join(dir).join(&name).join(f).is_file() => {
                    docs.push(format!("{dir}/{name}/{f}"))
                }
                _ => {}
            }
        }
    }
    docs.sort();
    docs
}

/// A backticked repository path in a document: (line, the path as written, what it
/// resolves to). Only spans that start with one of the repository's top-level entries
/// (or, in a crate README, one of the crate's) count; a template (`<tool>`, `*`, `{…}`) or
/// an absolute path does not. A trailing `:line` or `#anchor` is left off.
fn prose_paths(repo: &Path, doc_name: &str, doc: &str) -> Vec<(usize, String, Vec<PathBuf>)> {
    let top = |dir: &Path| -> BTreeSet<String> {
        std::fs::read_dir(dir)
            .map(|es| {
                es.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| !n.starts_with('.') && n != "target")
                    .collect()
            })
            .unwrap_or_default()
    };
    let repo_top = top(repo);
    let crate_dir = doc_name
        .strip_suffix("/README.md")
        .filter(|d| d.starts_with("crates/"))
        .map(|d| repo.join(d));
    let crate_top = crate_dir.as_deref().map(top).unwrap_or_default();
    let span = Regex::new(r"`([^`\s]+)`").expect("span regex");
    let suffix = Regex::new(r"(:\d+)+$").expect("suffix regex");
    let mut out = Vec::new();
    for (i, line) in doc.lines().enumerate() {
        for c in span.captures_iter(line) {
            let text = &c[1];
            if text.contains(['<', '>', '*', '{', '}', '…', '$', '|']) || text.starts_with('/') {
                continue;
            }
            let path = suffix.replace(text.split('#').next().unwrap_or(""), "");
            let Some((first, _)) = path.split_once('/') else {
                continue;
            };
            let mut candidates = Vec::new();
            if let Some(d) = &crate_dir
                && crate_top.contains(first)
            {
                candidates.push(d.join(path.as_ref()));
            }
            if repo_top.contains(first) {
                candidates.push(repo.join(path.as_ref()));
            }
            if !candidates.is_empty() {
                out.push((i + 1, text.to_string(), candidates));
            }
        }
    }
    out
}

/// Every backticked repository path in `doc` that does not exist.
fn missing_paths(repo: &Path, doc_name: &str, doc: &str) -> Vec<String> {
    prose_paths(repo, doc_name, doc)
        .into_iter()
        .filter(|(_, _, candidates)| !candidates.iter().any(|c| c.exists()))
        .map(|(line, text, _)| format!("{doc_name}:{line}: `{text}`: no such file or directory"))
        .collect()
}

/// Every backticked `gatecmd_x::module::…::Item` in `doc` whose module is not in that
/// crate or whose item (the segments after the last module, at most two: `Type`,
/// `Type::method` or `Enum::Variant`) is not defined in the module.
fn missing_items(repo: &Path, doc_name: &str, doc: &str) -> Vec<String> {
    let item = Regex::new(r"`(gatecmd(?:_[a-z]+)?)((?:::[A-Za-z_][A-Za-z0-9_]*)+)(?:\(\))?`")
        .expect("item regex");
    let mut errors = Vec::new();
    for (i, line) in doc.lines().enumerate() {
        for c in item.captures_iter(line) {
            // A tracing target (`gatecmd::audit`) is a name, not an item.
            let (start, end) = c.get(0).map_or((0, 0), |m| (m.start(), m.end()));
            let near = |t: &str| t.contains("target");
            let before: Vec<char> = line[..start].chars().rev().take(16).collect();
            let before: String = before.into_iter().rev().collect();
            let after: String = line[end..].chars().take(8).collect();
            if near(&before) || near(&after) {
                continue;
            }
            let root = match &c[1] {
                "gatecmd" => repo.join("src"),
                k => repo.join("crates").join(k.replace('_', "-")).join("src"),
            };
            let segments: Vec<&str> = c[2].trim_start_matches("::").split("::").collect();
            // Walk the modules as far as files or folders exist.
            let mut module = root.join("lib.rs");
            let mut dir = root.clone();
            let mut used = 0;
            for seg in &segments {
                let (file, folder) = (dir.join(format!("{seg}.rs")), dir.join(seg));
                if file.is_file() {
                    module = file;
                } else if folder.join("mod.rs").is_file() {
                    module = folder.join("mod.rs");
                } else {
                    break;
                }
                dir = folder;
                used += 1;
            }
            let rest = &segments[used..];
            let source = std::fs::read_to_string(&module).unwrap_or_default();
            // A module's own file, with its folder's files for items defined further in
            // and re-exported.
            let mut text = strip_comments(&source);
            if dir.is_dir() && used > 0 {
                for f in rust_files(&dir) {
                    text.push_str(&strip_comments(
                        &std::fs::read_to_string(f).unwrap_or_default(),
                    ));
                }
            }
            let ok = match rest {
                [] => used > 0,
                [a] => defines(&text, a, false),
                [a, b] => defines(&text, a, false) && defines(&text, b, true),
                _ => false,
            };
            if !ok {
                errors.push(format!(
                    "{doc_name}:{}: `{}{}`: {} (renamed or moved? update the document)",
                    i + 1,
                    &c[1],
                    &c[2],
                    if rest.len() > 2 || (used == 0 && rest.is_empty()) {
                        "no such module".to_string()
                    } else {
                        format!(
                            "no definition of `{}` in {}",
                            rest.join("::"),
                            module.display()
                        )
                    }
                ));
            }
        }
    }
    errors
}

/// Docs true in prose (issue 39): every repository path and every `gatecmd_x::…` item the
/// documents name in backticks exists.
#[test]
fn prose_names_only_paths_and_items_that_exist() {
    let repo = Path::new(REPO);
    let docs = prose_documents(repo);
    assert!(
        docs.len() >= 20 && docs.iter().any(|d| d.starts_with("crates/")),
        "the documents were not found: {docs:?}"
    );
    let mut checked = 0;
    let mut errors = Vec::new();
    for name in &docs {
        let doc = read_doc(name);
        checked += prose_paths(repo, name, &doc).len();
        errors.extend(missing_paths(repo, name, &doc));
        errors.extend(missing_items(repo, name, &doc));
    }
    assert!(checked >= 200, "only {checked} paths were checked");
    assert!(
        errors.is_empty(),
        "{} stale names in the prose:\n{}",
        errors.len(),
        errors.join("\n")
    );
}

#[test]
fn a_stale_prose_path_or_item_fails() {
    let repo = Path::new(REPO);
    let doc = "Lives in `src/audit/boards.rs` and `crates/gatecmd-domain/src/audit/boards.rs`;\n\
               templates `tools/<tool>.rs`, `/etc/gatecmd` and `docs/AUDIT.md#records` pass;\n\
               `gatecmd_domain::audit::PowerRecord`, `gatecmd_domain::config::power`,\n\
               `gatecmd_domain::audit::NoSuchRecord`, `gatecmd_domain::nothing::Here`,\n\
               logged on the tracing target `gatecmd::audit`.\n";
    let paths = missing_paths(repo, "docs/X.md", doc);
    assert_eq!(
        paths,
        ["docs/X.md:1: `src/audit/boards.rs`: no such file or directory"]
    );
    let items = missing_items(repo, "docs/X.md", doc);
    assert_eq!(items.len(), 2, "{items:?}");
    assert!(items[0].contains("NoSuchRecord") && items[1].contains("nothing::Here"));
    // In a crate README a path may be relative to the crate.
    let readme = "`src/chunk_hash.rs` and `src/no_such.rs`";
    assert_eq!(
        missing_paths(repo, "crates/gatecmd-flash/README.md", readme),
        ["crates/gatecmd-flash/README.md:1: `src/no_such.rs`: no such file or directory"]
    );
}

#[test]
fn request_path_covers_every_stage() {
    let doc = read_doc("docs/REQUEST-PATH.md");
    let refs = references(&doc);
    for (symbol, path) in [
        ("serve", "src/transport/http.rs"),
        ("guard", "src/transport/http.rs"),
        ("authenticate", "src/transport/auth.rs"),
        (
            "execute_command",
            "crates/gatecmd-mcp/src/tools/execute_command/mod.rs",
        ),
        ("run", "crates/gatecmd-mcp/src/tools/execute_command/run.rs"),
        (
            "prepare",
            "crates/gatecmd-domain/src/usecases/command/prepare.rs",
        ),
        ("check", "crates/gatecmd-core/src/sanitizer/check.rs"),
        (
            "open_file_arg",
            "crates/gatecmd-core/src/sanitizer/files.rs",
        ),
        ("run", "crates/gatecmd-domain/src/exec.rs"),
        ("GroupGuard", "crates/gatecmd-domain/src/exec.rs"),
        ("clean", "crates/gatecmd-core/src/output.rs"),
        ("spawn_reporter", "crates/gatecmd-mcp/src/calls/progress.rs"),
    ] {
        assert!(
            refs.iter()
                .any(|r| r.symbol.rsplit("::").next() == Some(symbol) && r.path == path),
            "REQUEST-PATH.md does not mention `{symbol}` in `{path}`"
        );
    }
    assert!(
        doc.contains("## Rough edges"),
        "the Rough edges section is missing"
    );
}

#[test]
fn a_broken_reference_fails_and_names_its_line() {
    let doc = "intro\nthe executor is `run` in `crates/gatecmd-domain/src/exec.rs`, then `no_such_fn` in \
               `crates/gatecmd-domain/src/exec.rs`\n`run` in `src/no_such_file.rs`\n\
               `GroupGuard::no_such_method` in `crates/gatecmd-domain/src/exec.rs`\n";
    let errors = check_document(Path::new(REPO), "test.md", doc);
    assert_eq!(errors.len(), 3, "{errors:#?}");
    assert!(
        errors[0].starts_with("test.md:2: `no_such_fn`"),
        "{}",
        errors[0]
    );
    assert!(errors[1].contains("no such file"), "{}", errors[1]);
    assert!(errors[2].starts_with("test.md:4:"), "{}", errors[2]);
}

#[test]
fn references_are_parsed_in_their_fixed_form() {
    let refs =
        references("a `x` in `src/a.rs` and `A::b` in\n`src/locks/` but not `y` or `z` in plain");
    assert_eq!(
        refs,
        [
            Reference {
                line: 1,
                symbol: "x".into(),
                path: "src/a.rs".into()
            },
            Reference {
                line: 1,
                symbol: "A::b".into(),
                path: "src/locks/".into()
            },
        ]
    );
}

#[test]
fn definitions_are_whole_words_outside_comments() {
    let src = "pub(crate) async fn run_all() {}\n// fn run() is gone\nimpl Drop for GroupGuard {}\n\
               pub enum StopReason {\n    Timeout,\n    Other(u8),\n}\nconst LIMIT: u8 = 1;\n";
    assert!(defines(src, "run_all", false));
    assert!(
        !defines(src, "run", false),
        "a prefix or a comment is not a definition"
    );
    assert!(defines(src, "GroupGuard", false), "impl … name counts");
    assert!(defines(src, "StopReason", false));
    assert!(defines(src, "LIMIT", false));
    assert!(!defines(src, "Timeout", false));
    assert!(defines(src, "Timeout", true), "a variant, after `Type::`");
    assert!(defines(src, "Other", true));
}

#[test]
fn the_rules_read_production_code_only() {
    let src = "fn f(r: &Registry) { r.snapshot(); }\n#[cfg(test)]\nmod tests {\n    fn t(r: &Registry) { r.upsert(d()); }\n}\n";
    assert!(!production_code(src).contains("upsert"));
    assert!(production_code(src).contains("snapshot"));
    let plain = "fn f(r: &Registry) { r.upsert(d()); }\n";
    assert_eq!(production_code(plain), plain);
}

#[test]
fn a_directory_reference_searches_its_files() {
    let errors = check_document(
        Path::new(REPO),
        "t.md",
        "`LockManager::subscribe` in `crates/gatecmd-domain/src/locks/`\n",
    );
    assert!(errors.is_empty(), "{errors:?}");
}

/// The Rust files of the server: the binary's `src/` and every crate under `crates/`.
fn server_files() -> Vec<PathBuf> {
    let repo = Path::new(REPO);
    let mut files = rust_files(&repo.join("src"));
    files.extend(rust_files(&repo.join("crates")));
    files
}

/// ARCHITECTURE.md: only the executor spawns processes.
#[test]
fn only_the_executor_spawns_processes() {
    let exec = Path::new(REPO).join("crates/gatecmd-domain/src/exec.rs");
    let spawn = Regex::new(r"\b(?:Command::new|process::Command|fork\(|execv)").expect("regex");
    let offenders: Vec<String> = server_files()
        .into_iter()
        .filter(|f| {
            *f != exec
                && !f
                    .components()
                    .any(|c| c.as_os_str() == "tests" || c.as_os_str() == "examples")
        })
        .filter(|f| {
            std::fs::read_to_string(f)
                .is_ok_and(|t| spawn.is_match(&strip_comments(production_code(&t))))
        })
        .map(|f| f.display().to_string())
        .collect();
    assert!(
        offenders.is_empty(),
        "only crates/gatecmd-domain/src/exec.rs may spawn processes (docs/ARCHITECTURE.md); found in {offenders:?}"
    );
}

/// ARCHITECTURE.md: only the device crate writes the registry.
#[test]
fn only_the_device_layer_writes_the_registry() {
    let devices = Path::new(REPO).join("crates/gatecmd-devices");
    let write = Regex::new(r"\.(?:upsert|reconcile|set_source)\(").expect("regex");
    let offenders: Vec<String> = server_files()
        .into_iter()
        .filter(|f| !f.starts_with(&devices))
        .filter(|f| {
            std::fs::read_to_string(f)
                .is_ok_and(|t| write.is_match(&strip_comments(production_code(&t))))
        })
        .map(|f| f.display().to_string())
        .collect();
    assert!(
        offenders.is_empty(),
        "only crates/gatecmd-devices may write the registry (docs/ARCHITECTURE.md); found in {offenders:?}"
    );
}

/// The rows of the table under `## Crates`: (crate, modules, gatecmd crates it depends on).
fn crate_table(doc: &str) -> Vec<(String, BTreeSet<String>, BTreeSet<String>)> {
    let Some(start) = doc.find("\n## Crates\n") else {
        return Vec::new();
    };
    let section = &doc[start + 1..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |n| n + 3)];
    let tick = Regex::new(r"`([a-z_]+)`").expect("tick regex");
    let krate = Regex::new(r"`(gatecmd[a-z-]*)`").expect("crate regex");
    section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .filter_map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            let [name, _layer, modules, deps] = cells[..] else {
                return None;
            };
            Some((
                krate.captures(name)?[1].to_string(),
                tick.captures_iter(modules)
                    .map(|c| c[1].to_string())
                    .collect(),
                deps.split(',')
                    .map(|x| x.trim().to_string())
                    .filter(|x| !x.is_empty())
                    .collect(),
            ))
        })
        .collect()
}

/// A crate as its files say it is: its top-level modules (every `mod` of `lib.rs`, test
/// modules left out) and the gatecmd crates among its `[dependencies]`.
struct CrateFacts {
    modules: BTreeSet<String>,
    deps: BTreeSet<String>,
}

fn crate_facts(manifest: &str, lib_rs: &str) -> CrateFacts {
    let module = Regex::new(r"(?m)^(?:pub(?:\([a-z]+\))? )?mod ([a-z_]+);").expect("mod regex");
    let code = production_code(lib_rs);
    let deps_section = manifest
        .split("\n[")
        .find(|s| s.starts_with("dependencies]"))
        .unwrap_or("");
    let dep = Regex::new(r"(?m)^(gatecmd[a-z-]*)\s*=").expect("dep regex");
    CrateFacts {
        modules: module
            .captures_iter(code)
            .map(|c| c[1].to_string())
            .collect(),
        deps: dep
            .captures_iter(deps_section)
            .map(|c| c[1].to_string())
            .collect(),
    }
}

/// What is wrong with a document's crate table, against `facts` (by crate name).
fn crate_table_errors(doc: &str, facts: &BTreeMap<String, CrateFacts>) -> Vec<String> {
    let table = crate_table(doc);
    if table.is_empty() {
        return vec!["no `## Crates` table (| crate | layer | modules | depends on |)".into()];
    }
    let mut errors = Vec::new();
    let listed: BTreeSet<&str> = table.iter().map(|r| r.0.as_str()).collect();
    let real: BTreeSet<&str> = facts.keys().map(String::as_str).collect();
    if listed != real {
        errors.push(format!(
            "the table lists {listed:?}, the workspace has {real:?}"
        ));
    }
    for (name, modules, deps) in &table {
        let Some(f) = facts.get(name) else { continue };
        if *modules != f.modules {
            errors.push(format!(
                "{name}: the table lists modules {modules:?}, its lib.rs declares {:?}",
                f.modules
            ));
        }
        if *deps != f.deps {
            errors.push(format!(
                "{name}: the table says it depends on {deps:?}, its Cargo.toml on {:?}",
                f.deps
            ));
        }
    }
    errors
}

/// The server's crates: the root package and every crate under `crates/`.
fn workspace_facts() -> BTreeMap<String, CrateFacts> {
    let repo = Path::new(REPO);
    let mut dirs = vec![repo.to_path_buf()];
    dirs.extend(
        std::fs::read_dir(repo.join("crates"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path()),
    );
    let name = Regex::new(r#"(?m)^name = "([a-z-]+)""#).expect("name regex");
    dirs.into_iter()
        .filter_map(|d| {
            let manifest = std::fs::read_to_string(d.join("Cargo.toml")).ok()?;
            let lib = std::fs::read_to_string(d.join("src/lib.rs")).ok()?;
            let n = name.captures(&manifest)?[1].to_string();
            Some((n, crate_facts(&manifest, &lib)))
        })
        .collect()
}

/// The modules a `lib.rs`'s `# Layout` section leaves out: each of its `mod`s must open a
/// bullet there (`` //! - `name`: … ``). Empty for a `lib.rs` without the section.
fn layout_gaps(lib_rs: &str) -> Vec<String> {
    let Some(at) = lib_rs.find("//! # Layout") else {
        return Vec::new();
    };
    let layout: String = lib_rs[at..]
        .lines()
        .take_while(|l| l.starts_with("//!"))
        .collect::<Vec<_>>()
        .join("\n");
    let bullet = Regex::new(r"(?m)^//! - \[?`([a-z_]+)`").expect("bullet regex");
    let named: BTreeSet<String> = bullet
        .captures_iter(&layout)
        .map(|c| c[1].to_string())
        .collect();
    crate_facts("", lib_rs)
        .modules
        .into_iter()
        .filter(|m| !named.contains(m))
        .collect()
}

/// ARCHITECTURE.md: each crate's `lib.rs` (the root package's too) says in `# Layout`
/// what each of its modules holds.
#[test]
fn each_layout_names_every_module() {
    let mcp = std::fs::read_to_string(Path::new(REPO).join("crates/gatecmd-mcp/src/lib.rs"))
        .expect("gatecmd-mcp's lib.rs");
    assert!(
        mcp.contains("//! # Layout"),
        "gatecmd-mcp's lib.rs has no # Layout"
    );
    let crates = std::fs::read_dir(Path::new(REPO).join("crates"))
        .expect("crates/")
        .flatten()
        .map(|d| d.path())
        .chain([PathBuf::from(REPO)]);
    for dir in crates {
        let Ok(lib) = std::fs::read_to_string(dir.join("src/lib.rs")) else {
            continue;
        };
        assert!(
            lib.contains("//! # Layout"),
            "{}/src/lib.rs has no # Layout section saying what each module holds",
            dir.display()
        );
        let gaps = layout_gaps(&lib);
        assert!(
            gaps.is_empty(),
            "{}/src/lib.rs: # Layout does not say what {gaps:?} hold",
            dir.display()
        );
    }
    let lib = "//! X.\n//!\n//! # Layout\n//!\n//! - `a`: one.\n//! - [`b`]: two.\n\npub mod a;\npub mod b;\nmod c;\n";
    assert_eq!(layout_gaps(lib), ["c"], "a module left out is found");
}

/// ARCHITECTURE.md: the crate table says what each crate holds and depends on.
#[test]
fn the_crate_table_is_the_workspace() {
    let facts = workspace_facts();
    assert!(
        facts.len() >= 6,
        "the crates were not read: {:?}",
        facts.keys()
    );
    let errors = crate_table_errors(&read_doc("docs/ARCHITECTURE.md"), &facts);
    assert!(
        errors.is_empty(),
        "docs/ARCHITECTURE.md, Crates:\n{}",
        errors.join("\n")
    );
}

#[test]
fn a_wrong_crate_table_fails() {
    let facts = BTreeMap::from([
        (
            "gatecmd-a".to_string(),
            crate_facts(
                "[package]\nname = \"gatecmd-a\"\n[dependencies]\ngatecmd-b = { path = \"../b\" }\nregex = \"1\"\n[dev-dependencies]\ngatecmd-c = { path = \"../c\" }\n",
                "pub mod x;\nmod y;\n#[cfg(test)]\nmod tests;\n",
            ),
        ),
        (
            "gatecmd-b".to_string(),
            crate_facts("[package]\nname = \"gatecmd-b\"\n", "pub mod z;\n"),
        ),
    ]);
    let good = "x\n## Crates\n\n| crate | layer | modules | depends on |\n|---|---|---|---|\n| `gatecmd-a` | top | `x`, `y` | gatecmd-b |\n| `gatecmd-b` | low | `z` | |\n\n## Next\n";
    assert!(
        crate_table_errors(good, &facts).is_empty(),
        "{:?}",
        crate_table_errors(good, &facts)
    );
    let e = crate_table_errors(
        &good.replace("| gatecmd-b |\n", "| gatecmd-b, gatecmd-c |\n"),
        &facts,
    );
    assert!(e.len() == 1 && e[0].contains("depends on"), "{e:?}");
    let e = crate_table_errors(&good.replace("`x`, `y`", "`x`"), &facts);
    assert!(e.len() == 1 && e[0].contains("modules"), "{e:?}");
    let e = crate_table_errors(&good.replace("| `gatecmd-b` | low | `z` | |\n", ""), &facts);
    assert!(e.len() == 1 && e[0].contains("workspace has"), "{e:?}");
    assert_eq!(crate_table_errors("no table", &facts).len(), 1);
}

/// The reasons named in the first column of docs/TOOLS.md's refusal table (the table
/// under `## Refusals` whose header starts `| reason |`), with their line numbers.
fn refusal_table(doc: &str) -> Vec<(usize, String)> {
    let row = Regex::new(r"^\|\s*`([a-z_]+)`\s*\|").expect("regex");
    let mut out = Vec::new();
    let mut in_section = false;
    let mut in_table = false;
    for (n, line) in doc.lines().enumerate() {
        if line.starts_with("## ") {
            in_section = line.trim() == "## Refusals";
            in_table = false;
            continue;
        }
        if !in_section {
            continue;
        }
        if line.starts_with("| reason |") {
            in_table = true;
            continue;
        }
        if in_table && !line.starts_with('|') {
            in_table = false;
        }
        if in_table && let Some(c) = row.captures(line) {
            out.push((n + 1, c[1].to_string()));
        }
    }
    out
}

/// What is wrong with a refusal table against the reasons the type defines: a reason
/// missing from it, one it names that does not exist, one it names twice.
fn refusal_table_errors(table: &[(usize, String)], reasons: &[&str]) -> Vec<String> {
    let mut errors = Vec::new();
    let named: BTreeSet<&str> = table.iter().map(|(_, r)| r.as_str()).collect();
    for r in reasons {
        if !named.contains(r) {
            errors.push(format!("reason `{r}` is missing from the refusal table"));
        }
    }
    let mut seen = BTreeSet::new();
    for (line, r) in table {
        if !reasons.contains(&r.as_str()) {
            errors.push(format!("line {line}: `{r}` is not a RefusalReason"));
        }
        if !seen.insert(r.as_str()) {
            errors.push(format!("line {line}: `{r}` is listed twice"));
        }
    }
    errors
}

/// docs/TOOLS.md's refusal table lists every `RefusalReason` (the list is
/// `RefusalReason::ALL`, generated from the enum's one declaration) and nothing else.
#[test]
fn the_refusal_table_lists_every_reason_and_only_those() {
    let reasons: Vec<&str> = gatecmd_core::refusal::RefusalReason::ALL
        .iter()
        .map(|r| r.as_str())
        .collect();
    let table = refusal_table(&read_doc("docs/TOOLS.md"));
    assert!(!table.is_empty(), "no refusal table found in docs/TOOLS.md");
    let errors = refusal_table_errors(&table, &reasons);
    assert!(errors.is_empty(), "docs/TOOLS.md:\n{}", errors.join("\n"));
}

#[test]
fn a_wrong_refusal_table_fails() {
    let doc = "# Tools\n\n## Refusals\n\n| reason | when | what to do |\n|---|---|---|\n\
               | `limit` | a maximum | lower it |\n| `device_gone` | made up | - |\n\
               | `limit` | again | - |\n\n## Next\n\n| reason | x |\n| `cancelled` | not this table |\n";
    let table = refusal_table(doc);
    assert_eq!(
        table,
        vec![
            (7, "limit".to_string()),
            (8, "device_gone".to_string()),
            (9, "limit".to_string())
        ]
    );
    let errors = refusal_table_errors(&table, &["limit", "cancelled"]);
    assert_eq!(
        errors,
        vec![
            "reason `cancelled` is missing from the refusal table".to_string(),
            "line 8: `device_gone` is not a RefusalReason".to_string(),
            "line 9: `limit` is listed twice".to_string(),
        ]
    );
}

/// A refusal is a typed error rendered once (`Refusal::of`, docs/DECISIONS.md): production
/// code outside src/refusal.rs builds none from a reason and a string of its own.
#[test]
fn refusals_are_built_from_typed_errors() {
    let src = Path::new(REPO).join("src");
    let offenders: Vec<String> = rust_files(&src)
        .into_iter()
        .filter(|f| !f.ends_with("src/refusal.rs"))
        .filter(|f| {
            std::fs::read_to_string(f)
                .is_ok_and(|t| strip_comments(production_code(&t)).contains("Refusal::new("))
        })
        .map(|f| f.display().to_string())
        .collect();
    assert!(
        offenders.is_empty(),
        "build refusals from a typed error that implements Classified; Refusal::new in {offenders:?}"
    );
}
