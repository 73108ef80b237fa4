//! The import graph inside one crate's `src/`, read from the source text as a newcomer reads
//! it, for `tests/server/structure.rs` (no import cycle inside a crate: between crates, Cargo
//! already refuses one, and a crate cannot import the layers above it).
//!
//! Every `use crate::…`, `use super::…`, `use self::…` and every inline `crate::…` path is an
//! edge from the file that writes it to the file that *defines* the item, with `pub use`
//! re-exports followed (a `mod.rs` that only re-exports its children is a facade, not a
//! dependency). Test code (`#[cfg(test)]` items, `tests.rs` files) is left out: a unit test
//! may reach anywhere. The module-level graph folds files into their top-level module
//! (`src/locks/lane.rs` → `locks`).

#![allow(dead_code)] // each test binary uses its own part

use regex::Regex;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

/// Source text with comments, string and char literals blanked (same length, newlines
/// kept), so braces and `crate::` inside them cannot confuse the readers below.
pub fn blank_literals(src: &str) -> String {
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
pub fn item_end(code: &[u8], from: usize) -> usize {
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
pub fn production(src: &str) -> String {
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
pub fn production_lines(src: &str) -> usize {
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
pub struct Module {
    pub path: Vec<String>,
    pub file: PathBuf,
    pub code: String,
}

/// Every production module under `src` (the library crate; `main.rs` is its own crate).
pub fn modules(src: &Path) -> Vec<Module> {
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
pub fn expand_use(tree: &str) -> Vec<String> {
    // Aliases do not change which file defines the item.
    static ALIAS: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"\s+as\s+[A-Za-z_][A-Za-z0-9_]*").expect("alias regex"));
    let tree: String = ALIAS.replace_all(tree, "").split_whitespace().collect();
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
pub fn use_decls(code: &str) -> Vec<(bool, Vec<String>)> {
    static USE: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"(?m)^\s*(pub(?:\([a-z]+\))?\s+)?use\s+([^;]+);").expect("use regex")
    });
    USE.captures_iter(code)
        .map(|c| (c.get(1).is_some(), expand_use(&c[2])))
        .collect()
}

/// The names `code` defines as items (or as `macro_rules!`).
pub fn definitions(code: &str) -> BTreeSet<String> {
    static DEF: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(
            r"\b(?:fn|struct|enum|trait|type|const|static|union|mod)\s+([A-Za-z_][A-Za-z0-9_]*)|macro_rules!\s*([A-Za-z_][A-Za-z0-9_]*)",
        )
        .expect("definition regex")
    });
    DEF.captures_iter(code)
        .filter_map(|c| c.get(1).or(c.get(2)))
        .map(|m| m.as_str().to_string())
        .collect()
}

pub struct Graph {
    pub modules: Vec<Module>,
    by_path: BTreeMap<Vec<String>, usize>,
    /// Per module: the names it defines, and its `use` declarations (read once: the
    /// resolver asks for them for every path it follows).
    defs: Vec<BTreeSet<String>>,
    uses: Vec<Vec<(bool, Vec<String>)>>,
}

impl Graph {
    pub fn new(modules: Vec<Module>) -> Self {
        let by_path = modules
            .iter()
            .enumerate()
            .map(|(i, m)| (m.path.clone(), i))
            .collect();
        let defs = modules.iter().map(|m| definitions(&m.code)).collect();
        let uses = modules.iter().map(|m| use_decls(&m.code)).collect();
        Graph {
            modules,
            by_path,
            defs,
            uses,
        }
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
        if self.defs[m].contains(name) || depth > 8 {
            return Some(m);
        }
        for (public, paths) in &self.uses[m] {
            let public = *public;
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
                        p.clone()
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
                        && self.defs[inner].contains(name)
                    {
                        return Some(inner);
                    }
                }
            }
        }
        None
    }

    /// Edges from each module to the modules it uses, with the path that made each edge.
    pub fn edges(&self) -> BTreeMap<usize, BTreeMap<usize, String>> {
        let inline =
            Regex::new(r"\b(?:crate|super|self)(?:::[A-Za-z_][A-Za-z0-9_]*)+").expect("path regex");
        let use_re =
            Regex::new(r"(?m)^\s*(pub(?:\([a-z]+\))?\s+)?use\s+[^;]+;").expect("use regex");
        let mut out: BTreeMap<usize, BTreeMap<usize, String>> = BTreeMap::new();
        for (i, m) in self.modules.iter().enumerate() {
            let mut paths = Vec::new();
            for (public, ps) in self.uses[i].clone() {
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

    /// Every cycle's strongly connected set of files (Tarjan), as file-to-file edges.
    pub fn cycles(&self) -> Vec<Vec<String>> {
        let edges = self.edges();
        let adj: BTreeMap<usize, BTreeSet<usize>> = edges
            .iter()
            .map(|(a, e)| (*a, e.keys().copied().collect()))
            .collect();
        let mut out = Vec::new();
        for scc in strongly_connected(self.modules.len(), &adj) {
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

    /// The top-level module a file belongs to: `locks` for `src/locks/lane.rs`, `http` for
    /// `src/transport/http.rs`; `None` for `src/lib.rs`, which only declares the modules.
    pub fn top(&self, m: usize) -> Option<&str> {
        self.modules[m].path.first().map(String::as_str)
    }

    /// Every top-level module (a file or a directory directly under `src/`).
    pub fn tops(&self) -> BTreeSet<String> {
        (0..self.modules.len())
            .filter_map(|m| self.top(m).map(String::from))
            .collect()
    }

    /// The module-level graph: top-level module → the top-level modules it imports, each
    /// edge with one file-level edge that makes it (`src/a/x.rs → src/b.rs (via `…`)`).
    pub fn module_edges(&self) -> BTreeMap<String, BTreeMap<String, String>> {
        let mut out: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for (a, targets) in self.edges() {
            let Some(ta) = self.top(a) else { continue };
            for (b, why) in targets {
                let Some(tb) = self.top(b) else { continue };
                if ta != tb {
                    out.entry(ta.to_string())
                        .or_default()
                        .entry(tb.to_string())
                        .or_insert_with(|| {
                            format!(
                                "src/{} → src/{} (via `{why}`)",
                                self.modules[a].file.display(),
                                self.modules[b].file.display()
                            )
                        });
                }
            }
        }
        out
    }

    /// Module-level cycles: each strongly connected set of top-level modules, with the
    /// edges that hold it together.
    pub fn module_cycles(&self) -> Vec<Vec<String>> {
        module_cycles_of(&self.module_edges())
    }
}

/// Module-level cycles of a module graph, each as its edges (`a → b: src/… → src/…`).
pub fn module_cycles_of(edges: &BTreeMap<String, BTreeMap<String, String>>) -> Vec<Vec<String>> {
    let names: Vec<&String> = edges
        .keys()
        .chain(edges.values().flat_map(|e| e.keys()))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let index: BTreeMap<&String, usize> = names.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let adj: BTreeMap<usize, BTreeSet<usize>> = edges
        .iter()
        .map(|(a, e)| (index[a], e.keys().map(|b| index[b]).collect()))
        .collect();
    strongly_connected(names.len(), &adj)
        .into_iter()
        .map(|scc| {
            let set: BTreeSet<usize> = scc.into_iter().collect();
            let mut lines = Vec::new();
            for &a in &set {
                for (b, why) in edges.get(names[a]).into_iter().flatten() {
                    if set.contains(&index[b]) {
                        lines.push(format!("{} → {b}: {why}", names[a]));
                    }
                }
            }
            lines
        })
        .collect()
}

fn strongly_connected(n: usize, adj: &BTreeMap<usize, BTreeSet<usize>>) -> Vec<Vec<usize>> {
    struct Tarjan<'a> {
        adj: &'a BTreeMap<usize, BTreeSet<usize>>,
        index: Vec<usize>,
        low: Vec<usize>,
        on: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    impl Tarjan<'_> {
        fn visit(&mut self, v: usize) {
            self.index[v] = self.next;
            self.low[v] = self.next;
            self.next += 1;
            self.stack.push(v);
            self.on[v] = true;
            let adj = self.adj;
            for &w in adj.get(&v).into_iter().flatten() {
                if self.index[w] == usize::MAX {
                    self.visit(w);
                    self.low[v] = self.low[v].min(self.low[w]);
                } else if self.on[w] {
                    self.low[v] = self.low[v].min(self.index[w]);
                }
            }
            if self.low[v] == self.index[v] {
                let mut scc = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on[w] = false;
                    scc.push(w);
                    if w == v {
                        break;
                    }
                }
                if scc.len() > 1 {
                    self.out.push(scc);
                }
            }
        }
    }
    let mut t = Tarjan {
        adj,
        index: vec![usize::MAX; n],
        low: vec![0; n],
        on: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if t.index[v] == usize::MAX {
            t.visit(v);
        }
    }
    t.out
}

pub fn graph_of(files: &[(&str, &str)]) -> Graph {
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

/// The source folders of the server's crates: the binary's `src/` and each library under
/// `crates/` (gatecmd-vboard is a separate program and not read).
pub fn crate_sources(repo: &Path) -> Vec<PathBuf> {
    let mut out = vec![repo.join("src")];
    let mut crates: Vec<PathBuf> = std::fs::read_dir(repo.join("crates"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("src"))
        .filter(|p| p.is_dir())
        .collect();
    crates.sort();
    out.extend(crates);
    out
}
