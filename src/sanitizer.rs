//! The argument policy: which argument lists may reach a child, and in what form.
//!
//! A pattern is a list of literal words and `{slot}`s. Arguments match a pattern when the
//! lengths agree, every literal is equal and every slot value passes its checks. File slots
//! are resolved (symlinks included) and must lie inside a file root; the child receives the
//! resolved path, never the caller's text.

use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::str::FromStr;

use crate::config::{CommandConfig, FileKind, PatternConfig};

/// One word of a pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Word {
    Literal(String),
    Slot(String),
}

/// A parsed argument pattern such as `wl 0 {image}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    pub words: Vec<Word>,
}

impl Pattern {
    /// Names of the pattern's slots, in order.
    pub fn slot_names(&self) -> impl Iterator<Item = &str> {
        self.words.iter().filter_map(|w| match w {
            Word::Slot(s) => Some(s.as_str()),
            Word::Literal(_) => None,
        })
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, w) in self.words.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            match w {
                Word::Literal(l) => f.write_str(l)?,
                Word::Slot(s) => write!(f, "{{{s}}}")?,
            }
        }
        Ok(())
    }
}

impl FromStr for Pattern {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut words = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for w in s.split_ascii_whitespace() {
            if let Some(inner) = w.strip_prefix('{').and_then(|r| r.strip_suffix('}')) {
                let ok = !inner.is_empty()
                    && inner.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                if !ok {
                    return Err(format!(
                        "invalid slot {w:?} in pattern {s:?}: a slot is {{name}} with letters, digits or '_'"
                    ));
                }
                if !seen.insert(inner.to_string()) {
                    return Err(format!("slot {{{inner}}} appears twice in pattern {s:?}"));
                }
                words.push(Word::Slot(inner.to_string()));
            } else {
                if let Some(c) = w.chars().find(|c| is_forbidden(*c)) {
                    return Err(format!(
                        "literal {w:?} in pattern {s:?} contains the forbidden character {c:?}"
                    ));
                }
                words.push(Word::Literal(w.to_string()));
            }
        }
        Ok(Pattern { words })
    }
}

/// Characters refused in every argument: shell metacharacters, quotes, backslash, controls.
pub fn is_forbidden(c: char) -> bool {
    matches!(
        c,
        ';' | '|' | '&' | '$' | '`' | '(' | ')' | '{' | '}' | '<' | '>' | '\\' | '\'' | '"'
    ) || c.is_control()
}

/// Arguments as the caller sent them.
#[derive(Debug, Clone, serde::Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum Args {
    /// Preferred: one string per argument.
    List(Vec<String>),
    /// One string, split on ASCII whitespace.
    Line(String),
}

impl Default for Args {
    fn default() -> Self {
        Args::List(Vec::new())
    }
}

impl Args {
    /// The argument list.
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Args::List(v) => v,
            Args::Line(s) => s.split_ascii_whitespace().map(str::to_string).collect(),
        }
    }
}

/// Arguments that passed the policy: what the child will receive.
#[derive(Debug, Clone)]
pub struct Approved {
    /// Index of the pattern that matched.
    pub pattern_index: usize,
    /// Arguments as they will be passed (file slots resolved).
    pub args: Vec<String>,
}

/// Why arguments were refused. The message is read by an agent: it names the rule and
/// what would be accepted.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum Refusal {
    #[error(
        "argument {index} ({value:?}) contains the forbidden character {ch:?}; \
         arguments may not contain shell metacharacters, quotes, backslashes or control characters"
    )]
    ForbiddenChar {
        index: usize,
        value: String,
        ch: char,
    },
    #[error(
        "{reason}. Closest allowed pattern: `{closest}`. Allowed patterns for {command}:\n{allowed}"
    )]
    NoMatch {
        command: String,
        closest: String,
        reason: String,
        allowed: String,
    },
}

/// Why one pattern did not match, and how close it came (higher is closer).
struct Miss {
    score: (usize, bool),
    reason: String,
}

/// Checks `args` against the command's patterns and file roots.
pub fn check(
    command: &CommandConfig,
    args: &[String],
    file_roots: &[PathBuf],
) -> Result<Approved, Refusal> {
    for (index, value) in args.iter().enumerate() {
        if let Some(ch) = value.chars().find(|c| is_forbidden(*c)) {
            return Err(Refusal::ForbiddenChar {
                index,
                value: value.clone(),
                ch,
            });
        }
    }
    let mut best: Option<(usize, Miss)> = None;
    for (i, p) in command.patterns.iter().enumerate() {
        match match_pattern(command, p, args, file_roots) {
            Ok(args) => {
                return Ok(Approved {
                    pattern_index: i,
                    args,
                });
            }
            Err(miss) => {
                if best.as_ref().is_none_or(|(_, b)| miss.score > b.score) {
                    best = Some((i, miss));
                }
            }
        }
    }
    let allowed = command
        .patterns
        .iter()
        .map(|p| format!("  {} {}", command.name, p.pattern))
        .collect::<Vec<_>>()
        .join("\n");
    let (closest, reason) = match best {
        Some((i, m)) => (command.patterns[i].pattern.to_string(), m.reason),
        None => (String::new(), "this command has no allowed patterns".into()),
    };
    Err(Refusal::NoMatch {
        command: command.name.clone(),
        closest,
        reason,
        allowed,
    })
}

fn match_pattern(
    command: &CommandConfig,
    p: &PatternConfig,
    args: &[String],
    file_roots: &[PathBuf],
) -> Result<Vec<String>, Miss> {
    let same_len = p.pattern.words.len() == args.len();
    let mut out = Vec::with_capacity(args.len());
    for (pos, word) in p.pattern.words.iter().enumerate() {
        let miss = |reason: String| Miss {
            score: (pos, same_len),
            reason,
        };
        let Some(value) = args.get(pos) else {
            return Err(miss(format!(
                "too few arguments: {} given, pattern `{}` takes {}",
                args.len(),
                p.pattern,
                p.pattern.words.len()
            )));
        };
        match word {
            Word::Literal(l) => {
                if l != value {
                    return Err(miss(format!("argument {pos} is {value:?}, expected {l:?}")));
                }
                out.push(value.clone());
            }
            Word::Slot(slot) => {
                let resolved = check_slot(command, p, slot, value, file_roots).map_err(|why| {
                    miss(format!("argument {pos} ({value:?}) for {{{slot}}}: {why}"))
                })?;
                out.push(resolved);
            }
        }
    }
    if !same_len {
        return Err(Miss {
            score: (p.pattern.words.len(), false),
            reason: format!(
                "too many arguments: {} given, pattern `{}` takes {}",
                args.len(),
                p.pattern,
                p.pattern.words.len()
            ),
        });
    }
    Ok(out)
}

fn check_slot(
    command: &CommandConfig,
    p: &PatternConfig,
    slot: &str,
    value: &str,
    file_roots: &[PathBuf],
) -> Result<String, String> {
    if value.is_empty() {
        return Err("empty value".into());
    }
    let regex = command.params.get(slot);
    if let Some(re) = regex {
        if !re.is_match(value) {
            return Err(format!(
                "does not match the allowed form /{}/",
                display_regex(re.as_str())
            ));
        }
    } else if value.starts_with('-') {
        // Without an explicit regex a slot could smuggle in an option (`--output=/etc/x`).
        return Err("starts with '-' (options cannot be passed through a slot)".into());
    }
    match p.file_slots.get(slot) {
        None => Ok(value.to_string()),
        Some(kind) => {
            resolve_file(value, *kind, file_roots).map(|p| p.to_string_lossy().into_owned())
        }
    }
}

/// The regex as the operator wrote it (without the anchors added at load time).
fn display_regex(anchored: &str) -> &str {
    anchored
        .strip_prefix("^(?:")
        .and_then(|s| s.strip_suffix(")$"))
        .unwrap_or(anchored)
}

/// Resolves a file argument inside the file roots, following symlinks.
///
/// Relative paths are taken relative to the first file root.
pub fn resolve_file(value: &str, kind: FileKind, roots: &[PathBuf]) -> Result<PathBuf, String> {
    let path = Path::new(value);
    if path.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err("'..' is not allowed in file arguments".into());
    }
    let Some(first_root) = roots.first() else {
        return Err("no file_roots are configured".into());
    };
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        first_root.join(path)
    };
    let roots_list = || {
        roots
            .iter()
            .map(|r| r.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let canonical_roots: Vec<PathBuf> =
        roots.iter().filter_map(|r| r.canonicalize().ok()).collect();
    let inside = |p: &Path| canonical_roots.iter().any(|r| p.starts_with(r));
    match kind {
        FileKind::Input => {
            let real = joined
                .canonicalize()
                .map_err(|e| format!("cannot resolve {}: {}", joined.display(), io_reason(&e)))?;
            if !inside(&real) {
                return Err(format!(
                    "resolves to {} which is outside the file roots ({})",
                    real.display(),
                    roots_list()
                ));
            }
            let meta = std::fs::metadata(&real).map_err(|e| io_reason(&e))?;
            if !meta.is_file() {
                return Err(format!("{} is not a regular file", real.display()));
            }
            Ok(real)
        }
        FileKind::Output => {
            let name = joined.file_name().ok_or("an output needs a file name")?;
            let parent = joined
                .parent()
                .ok_or("an output needs a parent directory")?;
            let real_parent = parent.canonicalize().map_err(|e| {
                format!(
                    "cannot resolve the directory {}: {}",
                    parent.display(),
                    io_reason(&e)
                )
            })?;
            if !inside(&real_parent) {
                return Err(format!(
                    "its directory resolves to {} which is outside the file roots ({})",
                    real_parent.display(),
                    roots_list()
                ));
            }
            let target = real_parent.join(name);
            match std::fs::symlink_metadata(&target) {
                Err(_) => Ok(target),
                Ok(m) if m.is_file() => Ok(target),
                Ok(m) if m.file_type().is_symlink() => Err(format!(
                    "{} is a symbolic link; outputs must be plain files",
                    target.display()
                )),
                Ok(_) => Err(format!(
                    "{} exists and is not a regular file",
                    target.display()
                )),
            }
        }
    }
}

fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file or directory".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use std::os::unix::fs::symlink;

    struct Fixture {
        _dir: tempfile::TempDir,
        root: PathBuf,
        outside: PathBuf,
        config: Config,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("images");
        let outside = dir.path().join("secret");
        std::fs::create_dir_all(root.join("sub")).expect("mkdir");
        std::fs::create_dir_all(&outside).expect("mkdir");
        std::fs::write(root.join("loader.bin"), b"x").expect("write");
        std::fs::write(root.join("sub/image.img"), b"x").expect("write");
        std::fs::write(outside.join("passwd"), b"x").expect("write");
        symlink(outside.join("passwd"), root.join("evil.bin")).expect("symlink");
        symlink(&outside, root.join("evildir")).expect("symlink");
        symlink(root.join("loader.bin"), root.join("good-link.bin")).expect("symlink");
        std::fs::create_dir(root.join("dir.bin")).expect("mkdir");
        let yaml = format!(
            "file_roots: [{root}]\ncommands:\n  - name: rk\n    binary: /bin/true\n    params:\n      lba: \"0|0x[0-9a-f]{{1,8}}\"\n      opt: \"-[a-z]\"\n    allowed_args:\n      - pattern: ld\n      - pattern: db {{loader}}\n        file_args: [loader]\n      - pattern: wl {{lba}} {{image}}\n        file_args: [image]\n      - pattern: rl 0 100 {{dump}}\n        output_args: [dump]\n      - pattern: say {{word}}\n      - pattern: flag {{opt}}\n",
            root = root.display()
        );
        let config = Config::parse(&yaml, "t.yaml").expect("config");
        Fixture {
            _dir: dir,
            root,
            outside,
            config,
        }
    }

    fn run(f: &Fixture, args: &[&str]) -> Result<Vec<String>, Refusal> {
        let cmd = f.config.command("rk").expect("rk");
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        check(cmd, &args, &f.config.file_roots).map(|a| a.args)
    }

    fn refused_with(f: &Fixture, args: &[&str], needle: &str) {
        match run(f, args) {
            Ok(a) => panic!("{args:?} was allowed as {a:?}"),
            Err(e) => assert!(e.to_string().contains(needle), "{args:?}: {e}"),
        }
    }

    #[test]
    fn forbidden_characters_are_refused_everywhere() {
        let f = fixture();
        for bad in [
            "a;b", "a|b", "a&b", "$HOME", "`id`", "a(b", "a)b", "{x}", "a}", "<f", ">f", "a\\b",
            "'q'", "\"q\"", "a\nb", "a\rb", "a\0b", "a\x1bb", "a\tb", "a\x7fb",
        ] {
            refused_with(&f, &["say", bad], "forbidden character");
        }
    }

    #[test]
    fn forbidden_character_in_a_literal_position_is_still_refused() {
        let f = fixture();
        refused_with(&f, &["ld;reboot"], "forbidden character");
    }

    #[test]
    fn exact_literal_match() {
        let f = fixture();
        assert_eq!(run(&f, &["ld"]).expect("ok"), vec!["ld"]);
        refused_with(&f, &["LD"], "expected \"ld\"");
        refused_with(&f, &["ld", "extra"], "too many arguments");
        refused_with(&f, &["wl"], "too few arguments");
        refused_with(&f, &[], "Closest allowed pattern");
    }

    #[test]
    fn slot_takes_one_plain_word() {
        let f = fixture();
        assert_eq!(
            run(&f, &["say", "hello"]).expect("ok"),
            vec!["say", "hello"]
        );
        refused_with(&f, &["say", ""], "empty value");
    }

    #[test]
    fn option_injection_through_a_slot_is_refused() {
        let f = fixture();
        refused_with(&f, &["say", "-rf"], "starts with '-'");
        refused_with(&f, &["say", "--output=/etc/passwd"], "starts with '-'");
        // Unless the slot's regex allows it explicitly.
        assert!(run(&f, &["flag", "-v"]).is_ok());
        refused_with(
            &f,
            &["flag", "--verbose"],
            "does not match the allowed form /-[a-z]/",
        );
    }

    #[test]
    fn params_regex_must_match_whole_value() {
        let f = fixture();
        let img = f.root.join("sub/image.img");
        let img = img.to_str().expect("utf8");
        assert!(run(&f, &["wl", "0x2000", img]).is_ok());
        refused_with(
            &f,
            &["wl", "0x2000zz", img],
            "does not match the allowed form",
        );
        refused_with(&f, &["wl", "10", img], "does not match");
    }

    #[test]
    fn file_input_resolves_inside_root() {
        let f = fixture();
        let out = run(&f, &["db", "loader.bin"]).expect("relative path");
        let expect = f.root.canonicalize().expect("c").join("loader.bin");
        assert_eq!(out[1], expect.to_str().expect("utf8"));
        let abs = f.root.join("sub/image.img");
        assert!(run(&f, &["wl", "0", abs.to_str().expect("utf8")]).is_ok());
    }

    #[test]
    fn symlink_inside_root_is_followed_and_resolved_path_passed() {
        let f = fixture();
        let out = run(&f, &["db", "good-link.bin"]).expect("ok");
        assert!(out[1].ends_with("/loader.bin"), "{out:?}");
    }

    #[test]
    fn file_escapes_are_refused() {
        let f = fixture();
        refused_with(&f, &["db", "../secret/passwd"], "'..' is not allowed");
        refused_with(
            &f,
            &["db", "sub/../../secret/passwd"],
            "'..' is not allowed",
        );
        refused_with(
            &f,
            &["db", f.outside.join("passwd").to_str().expect("u")],
            "outside the file roots",
        );
        refused_with(&f, &["db", "/etc/passwd"], "outside the file roots");
        refused_with(&f, &["db", "evil.bin"], "outside the file roots");
        refused_with(&f, &["db", "evildir/passwd"], "outside the file roots");
        refused_with(&f, &["db", "missing.bin"], "no such file");
        refused_with(&f, &["db", "dir.bin"], "not a regular file");
        refused_with(&f, &["db", "/dev/null"], "outside the file roots");
    }

    #[test]
    fn root_prefix_trick_is_refused() {
        let f = fixture();
        // /x/images-evil starts with the text "/x/images" but is another directory.
        let sibling = f.root.with_file_name("images-evil");
        std::fs::create_dir(&sibling).expect("mkdir");
        std::fs::write(sibling.join("a.bin"), b"x").expect("write");
        refused_with(
            &f,
            &["db", sibling.join("a.bin").to_str().expect("u")],
            "outside the file roots",
        );
    }

    #[test]
    fn output_file_rules() {
        let f = fixture();
        let out = run(&f, &["rl", "0", "100", "dump.bin"]).expect("new output");
        assert!(out[3].ends_with("/images/dump.bin"));
        refused_with(&f, &["rl", "0", "100", "evil.bin"], "symbolic link");
        refused_with(
            &f,
            &["rl", "0", "100", "evildir/x"],
            "outside the file roots",
        );
        refused_with(
            &f,
            &["rl", "0", "100", "nodir/x"],
            "cannot resolve the directory",
        );
        refused_with(&f, &["rl", "0", "100", "dir.bin"], "not a regular file");
        refused_with(&f, &["rl", "0", "100", "/tmp/x"], "outside the file roots");
    }

    #[test]
    fn refusal_lists_closest_and_all_patterns() {
        let f = fixture();
        let e = run(&f, &["wl", "5"]).expect_err("refused").to_string();
        assert!(
            e.contains("Closest allowed pattern: `wl {lba} {image}`"),
            "{e}"
        );
        assert!(e.contains("  rk ld\n"), "{e}");
        assert!(e.contains("  rk flag {opt}"), "{e}");
    }

    #[test]
    fn string_args_split_on_whitespace() {
        let a = Args::Line("  wl  0\tx ".into()).into_vec();
        assert_eq!(a, vec!["wl", "0", "x"]);
        let parsed: Args = serde_json::from_value(serde_json::json!(["a b"])).expect("list");
        assert_eq!(parsed.into_vec(), vec!["a b"]);
    }

    #[test]
    fn spaces_inside_a_list_element_stay_one_argument() {
        let f = fixture();
        // "ld x" as one element is one argument, which is not the literal "ld".
        refused_with(&f, &["ld x"], "expected \"ld\"");
    }

    #[test]
    fn pattern_parsing_rejects_bad_slots() {
        assert!("wl {a-b}".parse::<Pattern>().is_err());
        assert!("wl {a} {a}".parse::<Pattern>().is_err());
        assert!("wl a;b".parse::<Pattern>().is_err());
        assert_eq!("".parse::<Pattern>().map(|p| p.words.len()), Ok(0));
    }
}
