//! Holds the shape docs/ARCHITECTURE.md promises: the file-level import graph of `src/` has
//! no cycle, and no file carries more than 500 lines of production code.
//!
//! The graph is read from the source text, as a newcomer reads it: every `use crate::…`,
//! `use super::…`, `use self::…` and every inline `crate::…` path is an edge from the file
//! that writes it to the file that *defines* the item, with `pub use` re-exports followed (a
//! `mod.rs` that only re-exports its children is a facade, not a dependency). Test code
//! (`#[cfg(test)]` items, `tests.rs` files) is left out: a unit test may reach anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// Largest number of production lines one file may hold.
const MAX_PRODUCTION_LINES: usize = 500;

/// Source text with comments, string and char literals blanked (same length, newlines
/// kept), so braces and `crate::` inside them cannot confuse the readers below.
fn blank_literals(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in out.iter_mut().take(to).skip(from) {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                let end = src[i..].find('\n').map_or(b.len(), |n| i + n);
                blank(&mut out, i, end);
                i = end;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let end = src[i + 2..].find("*/").map_or(b.len(), |n| i + 2 + n + 2);
                blank(&mut out, i, end);
                i = end;
            }
            b'r' if (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#'))
                && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')) =>
            {
                let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
                if b.get(i + 1 + hashes) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let close = format!("\"{}", "#".repeat(hashes));
                let body = i + 2 + hashes;
                let end = src[body..]
                    .find(&close)
                    .map_or(b.len(), |n| body + n + close.len());
                blank(&mut out, i, end);
                i = end;
            }
            b'"' => {
                let mut j = i + 1;
                while j < b.len() && b[j] != b'"' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                blank(&mut out, i, (j + 1).min(b.len()));
                i = j + 1;
            }
            b'\'' => {
                // A char literal ('x', '\n', '{'), not a lifetime ('a).
                let end = if b.get(i + 1) == Some(&b'\\') {
                    src[i + 2..].find('\'').map(|n| i + 2 + n + 1)
                } else if b.get(i + 2) == Some(&b'\'') {
                    Some(i + 3)
                } else {
                    None
                };
                match end {
                    Some(end) => {
                        blank(&mut out, i, end);
                        i = end;
                    }
                    None => i += 1,
                }
            }
            _ => i += 1,
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The end (exclusive) of the item starting at `from`: its matching `}` or its `;`.
fn item_end(code: &[u8], from: usize) -> usize {
    let mut depth = 0usize;
    for (k, &c) in code.iter().enumerate().skip(from) {
        match c {
            b'{' => depth += 1,
            b'}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return k + 1;
                }
            }
            b';' if depth == 0 => return k + 1,
            _ => {}
        }
    }
    code.len()
}

/// Production code: literals blanked and every `#[cfg(test)]` item removed (newlines kept
/// out of the count: the result holds only production lines).
fn production(src: &str) -> String {
    let code = blank_literals(src);
    let bytes = code.as_bytes();
    let mut keep = String::with_capacity(code.len());
    let mut i = 0;
    while let Some(at) = code[i..].find("#[cfg(test)]") {
        let start = i + at;
        keep.push_str(&code[i..start]);
        i = item_end(bytes, start + "#[cfg(test)]".len());
    }
    keep.push_str(&code[i..]);
    keep
}

/// Lines of production code in `src`: lines outside test items.
fn production_lines(src: &str) -> usize {
    let code = blank_literals(src);
    let bytes = code.as_bytes();
    let mut test_lines = 0;
    let mut i = 0;
    while let Some(at) = code[i..].find("#[cfg(test)]") {
        let start = i + at;
        let end = item_end(bytes, start + "#[cfg(test)]".len());
        test_lines += code[start..end].matches('\n').count() + 1;
        i = end;
    }
    src.lines().count().saturating_sub(test_lines)
}

/// One source file as a module: `["locks", "lane"]` for `src/locks/lane.rs`.
#[derive(Debug, Clone)]
struct Module {
    path: Vec<String>,
    file: PathBuf,
    code: String,
}

/// Every production module under `src` (the library crate; `main.rs` is its own crate).
fn modules(src: &Path) -> Vec<Module> {
    let mut out = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let rel = p.strip_prefix(src).unwrap_or(&p);
            let mut path: Vec<String> = rel
                .with_extension("")
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            let last = path.last().cloned().unwrap_or_default();
            if last == "main" && path.len() == 1 || last == "tests" || last.ends_with("_tests") {
                continue; // the binary crate, and test modules kept in their own file
            }
            if last == "mod" || (last == "lib" && path.len() == 1) {
                path.pop();
            }
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            out.push(Module {
                path,
                file: rel.to_path_buf(),
                code: production(&text),
            });
        }
    }
    out.sort_by(|a, b| a.file.cmp(&b.file));
    out
}

/// The paths a `use` tree names: `a::{b, c::{d, self}}` → `a::b`, `a::c::d`, `a::c`.
fn expand_use(tree: &str) -> Vec<String> {
    // Aliases do not change which file defines the item.
    let alias = regex::Regex::new(r"\s+as\s+[A-Za-z_][A-Za-z0-9_]*").expect("alias regex");
    let tree: String = alias.replace_all(tree, "").split_whitespace().collect();
    fn go(prefix: &str, tree: &str, out: &mut Vec<String>) {
        let Some(open) = tree.find('{') else {
            let t = tree.strip_suffix("::self").unwrap_or(tree);
            let full = if prefix.is_empty() {
                t.to_string()
            } else if t == "self" {
                prefix.to_string()
            } else {
                format!("{prefix}::{t}")
            };
            out.push(full);
            return;
        };
        let head = tree[..open].trim_end_matches("::");
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let base = match (prefix.is_empty(), head.is_empty()) {
            (true, _) => head.to_string(),
            (false, true) => prefix.to_string(),
            (false, false) => format!("{prefix}::{head}"),
        };
        let mut depth = 0;
        let mut start = 0;
        for (k, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    if !inner[start..k].is_empty() {
                        go(&base, &inner[start..k], out);
                    }
                    start = k + 1;
                }
                _ => {}
            }
        }
        if !inner[start..].is_empty() {
            go(&base, &inner[start..], out);
        }
    }
    let mut out = Vec::new();
    go("", &tree, &mut out);
    out
}

/// `use` declarations of `code` as (is a re-export, expanded paths).
fn use_decls(code: &str) -> Vec<(bool, Vec<String>)> {
    let re =
        regex::Regex::new(r"(?m)^\s*(pub(?:\([a-z]+\))?\s+)?use\s+([^;]+);").expect("use regex");
    re.captures_iter(code)
        .map(|c| (c.get(1).is_some(), expand_use(&c[2])))
        .collect()
}

/// Whether `code` defines `name` as an item (or a `macro_rules!`).
fn defines(code: &str, name: &str) -> bool {
    let re = regex::Regex::new(&format!(
        r"\b(?:fn|struct|enum|trait|type|const|static|union|mod)\s+{}\b|macro_rules!\s*{}\b",
        regex::escape(name),
        regex::escape(name)
    ))
    .expect("definition regex");
    re.is_match(code)
}

struct Graph {
    modules: Vec<Module>,
    by_path: BTreeMap<Vec<String>, usize>,
}

impl Graph {
    fn new(modules: Vec<Module>) -> Self {
        let by_path = modules
            .iter()
            .enumerate()
            .map(|(i, m)| (m.path.clone(), i))
            .collect();
        Graph { modules, by_path }
    }

    /// The file that defines what `path` names, written in module `from`; `None` for paths
    /// outside the crate.
    fn resolve(&self, from: &[String], path: &str, depth: usize) -> Option<usize> {
        let mut segs = path.split("::").filter(|s| !s.is_empty()).peekable();
        let mut cur: Vec<String> = match segs.peek().copied() {
            Some("crate") => {
                segs.next();
                Vec::new()
            }
            Some("self") => {
                segs.next();
                from.to_vec()
            }
            Some("super") => {
                let mut m = from.to_vec();
                while segs.peek() == Some(&"super") {
                    segs.next();
                    m.pop();
                }
                m
            }
            _ => return None,
        };
        let here = *self.by_path.get(&cur)?;
        let mut at = here;
        for seg in segs {
            let mut next = cur.clone();
            next.push(seg.to_string());
            if let Some(&m) = self.by_path.get(&next) {
                cur = next;
                at = m;
                continue;
            }
            // An item of module `cur`: defined here, or re-exported from elsewhere.
            return Some(self.definer(at, seg, depth).unwrap_or(at));
        }
        Some(at)
    }

    /// Where the item `name` seen in module `m` is defined, following `pub use`.
    fn definer(&self, m: usize, name: &str, depth: usize) -> Option<usize> {
        let module = &self.modules[m];
        if defines(&module.code, name) || depth > 8 {
            return Some(m);
        }
        for (public, paths) in use_decls(&module.code) {
            if !public {
                continue;
            }
            for p in paths {
                let last = p.rsplit("::").next().unwrap_or("");
                if last == name {
                    let p = if p.starts_with("crate")
                        || p.starts_with("super")
                        || p.starts_with("self")
                    {
                        p
                    } else {
                        format!("self::{p}")
                    };
                    return self.resolve(&module.path, &p, depth + 1);
                }
                if last == "*" {
                    let base = p.trim_end_matches("::*");
                    let base = if base.starts_with("crate")
                        || base.starts_with("super")
                        || base.starts_with("self")
                    {
                        base.to_string()
                    } else {
                        format!("self::{base}")
                    };
                    if let Some(inner) = self.resolve(&module.path, &base, depth + 1)
                        && inner != m
                        && defines(&self.modules[inner].code, name)
                    {
                        return Some(inner);
                    }
                }
            }
        }
        None
    }

    /// Edges from each module to the modules it uses, with the path that made each edge.
    fn edges(&self) -> BTreeMap<usize, BTreeMap<usize, String>> {
        let inline = regex::Regex::new(r"\b(?:crate|super|self)(?:::[A-Za-z_][A-Za-z0-9_]*)+")
            .expect("path regex");
        let use_re =
            regex::Regex::new(r"(?m)^\s*(pub(?:\([a-z]+\))?\s+)?use\s+[^;]+;").expect("use regex");
        let mut out: BTreeMap<usize, BTreeMap<usize, String>> = BTreeMap::new();
        for (i, m) in self.modules.iter().enumerate() {
            let mut paths = Vec::new();
            for (public, ps) in use_decls(&m.code) {
                if !public {
                    paths.extend(ps.into_iter().filter(|p| {
                        p.starts_with("crate") || p.starts_with("super") || p.starts_with("self")
                    }));
                }
            }
            let without_uses = use_re.replace_all(&m.code, "");
            paths.extend(
                inline
                    .find_iter(&without_uses)
                    .map(|x| x.as_str().to_string()),
            );
            for p in paths {
                let p = p.trim_end_matches("::*");
                if let Some(t) = self.resolve(&m.path, p, 0)
                    && t != i
                {
                    out.entry(i)
                        .or_default()
                        .entry(t)
                        .or_insert_with(|| p.to_string());
                }
            }
        }
        out
    }

    /// Every cycle's strongly connected set of files (Tarjan), as file names.
    fn cycles(&self) -> Vec<Vec<String>> {
        let edges = self.edges();
        let n = self.modules.len();
        let mut index = vec![usize::MAX; n];
        let mut low = vec![0; n];
        let mut on = vec![false; n];
        let mut stack = Vec::new();
        let mut next = 0;
        let mut out = Vec::new();
        #[allow(clippy::too_many_arguments)]
        fn visit(
            v: usize,
            edges: &BTreeMap<usize, BTreeMap<usize, String>>,
            index: &mut Vec<usize>,
            low: &mut Vec<usize>,
            on: &mut Vec<bool>,
            stack: &mut Vec<usize>,
            next: &mut usize,
            out: &mut Vec<Vec<usize>>,
        ) {
            index[v] = *next;
            low[v] = *next;
            *next += 1;
            stack.push(v);
            on[v] = true;
            for &w in edges
                .get(&v)
                .map(|e| e.keys().collect::<Vec<_>>())
                .unwrap_or_default()
            {
                if index[w] == usize::MAX {
                    visit(w, edges, index, low, on, stack, next, out);
                    low[v] = low[v].min(low[w]);
                } else if on[w] {
                    low[v] = low[v].min(index[w]);
                }
            }
            if low[v] == index[v] {
                let mut scc = Vec::new();
                while let Some(w) = stack.pop() {
                    on[w] = false;
                    scc.push(w);
                    if w == v {
                        break;
                    }
                }
                if scc.len() > 1 {
                    out.push(scc);
                }
            }
        }
        let mut sccs = Vec::new();
        for v in 0..n {
            if index[v] == usize::MAX {
                visit(
                    v, &edges, &mut index, &mut low, &mut on, &mut stack, &mut next, &mut sccs,
                );
            }
        }
        for scc in sccs {
            let set: BTreeSet<usize> = scc.iter().copied().collect();
            let mut lines = Vec::new();
            for &a in &set {
                for (b, why) in edges.get(&a).into_iter().flatten() {
                    if set.contains(b) {
                        lines.push(format!(
                            "src/{} → src/{} (via `{why}`)",
                            self.modules[a].file.display(),
                            self.modules[*b].file.display()
                        ));
                    }
                }
            }
            out.push(lines);
        }
        out
    }
}

fn graph_of(files: &[(&str, &str)]) -> Graph {
    let modules = files
        .iter()
        .map(|(name, text)| {
            let mut path: Vec<String> = name
                .trim_end_matches(".rs")
                .split('/')
                .map(String::from)
                .collect();
            if path.last().is_some_and(|l| l == "mod") || path == ["lib"] {
                path.pop();
            }
            Module {
                path,
                file: PathBuf::from(name),
                code: production(text),
            }
        })
        .collect();
    Graph::new(modules)
}

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
