//! The sanitizer's own tests: a command policy built here (not from a configuration file,
//! which lives above the sanitizer) and real files, symlinks and directories in a tempdir.

use std::collections::BTreeMap;
use std::os::unix::fs::symlink;
use std::path::PathBuf;

use regex::Regex;

use super::*;

/// A command's policy as the configuration would compile it.
struct Command {
    name: String,
    patterns: Vec<(Pattern, FileSlots)>,
    params: BTreeMap<String, Regex>,
}

impl CommandPolicy for Command {
    fn name(&self) -> &str {
        &self.name
    }

    fn patterns(&self) -> impl Iterator<Item = (&Pattern, &FileSlots)> {
        self.patterns.iter().map(|(p, f)| (p, f))
    }

    fn param_regex(&self, slot: &str) -> Option<&Regex> {
        self.params.get(slot)
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
    command: Command,
    file_roots: Vec<PathBuf>,
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
    // Relative, and staying beneath the root: followed. (An absolute one is refused, even
    // when it points inside: `RESOLVE_BENEATH` cannot tell where it would lead later.)
    symlink("loader.bin", root.join("good-link.bin")).expect("symlink");
    symlink(root.join("loader.bin"), root.join("abs-link.bin")).expect("symlink");
    std::fs::create_dir(root.join("dir.bin")).expect("mkdir");
    let pattern = |text: &str, files: &[(&str, FileKind)]| {
        let p: Pattern = text.parse().expect("pattern");
        let slots = files.iter().map(|(s, k)| (s.to_string(), *k)).collect();
        (p, slots)
    };
    let command = Command {
        name: "rk".into(),
        patterns: vec![
            pattern("ld", &[]),
            pattern("db {loader}", &[("loader", FileKind::Input)]),
            pattern("wl {lba} {image}", &[("image", FileKind::Input)]),
            pattern("rl 0 100 {dump}", &[("dump", FileKind::Output)]),
            pattern("say {word}", &[]),
            pattern("flag {opt}", &[]),
        ],
        params: [("lba", "0|0x[0-9a-f]{1,8}"), ("opt", "-[a-z]")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), slot_regex(v).expect("regex")))
            .collect(),
    };
    Fixture {
        _dir: dir,
        file_roots: vec![root.clone()],
        root,
        outside,
        command,
    }
}

fn run(f: &Fixture, args: &[&str]) -> Result<Vec<String>, Refusal> {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    check(&f.command, &args, &f.file_roots).map(|a| a.shown)
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
        "a;b", "a|b", "a&b", "$HOME", "`id`", "a(b", "a)b", "{x}", "a}", "<f", ">f", "a\\b", "'q'",
        "\"q\"", "a\nb", "a\rb", "a\0b", "a\x1bb", "a\tb", "a\x7fb",
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
    refused_with(
        &f,
        &["LD"],
        "rk may not run \"LD\" here: its allowed first words are \"ld\", ",
    );
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
    refused_with(&f, &["db", "abs-link.bin"], "an absolute one");
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

/// A first word no pattern begins with names the first words that exist, not one
/// "closest" pattern that reads like a correction (issue 47: `ul` when only `db` exists).
#[test]
fn an_unknown_first_word_names_the_first_words_that_exist() {
    let f = fixture();
    let e = run(&f, &["ul", "loader.bin"]).expect_err("ul is no first word");
    let text = e.to_string();
    assert!(matches!(e, Refusal::FirstWord { .. }), "{e:?}");
    assert!(
        text.starts_with("rk may not run \"ul\" here: its allowed first words are \"ld\", \"db\""),
        "{text}"
    );
    assert!(!text.contains("Closest"), "{text}");
    assert!(text.contains("Allowed patterns for rk:\n  rk ld"), "{text}");
    // A known first word with wrong arguments still names the closest pattern.
    refused_with(&f, &["db"], "Closest allowed pattern: `db {loader}`");
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
    refused_with(&f, &["ld x"], "may not run \"ld x\" here");
}

#[test]
fn pattern_parsing_rejects_bad_slots() {
    assert!("wl {a-b}".parse::<Pattern>().is_err());
    assert!("wl {a} {a}".parse::<Pattern>().is_err());
    assert!("wl a;b".parse::<Pattern>().is_err());
    assert_eq!("".parse::<Pattern>().map(|p| p.words.len()), Ok(0));
}
