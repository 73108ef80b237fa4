//! Property tests of the two parsers an untrusted or careless hand reaches: the argument
//! matcher (an agent's argv against the operator's patterns) and the config loader (an
//! operator's YAML).
//!
//! Matcher: random patterns and random argv never panic, and an accepted argv matches the
//! pattern it was accepted by word for word (literals equal, slots pass their checks, no
//! forbidden character anywhere). Loader: random text and random edits of the bundled
//! allowed_commands.yaml never panic, and every error names the file and a line.
//!
//! Case counts stay at 256 so the file runs in seconds.

use std::collections::BTreeMap;
use std::path::PathBuf;

use gatecmd_core::sanitizer::{
    self, CommandPolicy, FileKind, FileSlots, Pattern, Word, is_forbidden, slot_regex,
};
use gatecmd_domain::config::{Config, EMBEDDED_DEFAULT};
use proptest::prelude::*;
use regex::Regex;

/// A command's policy built from generated patterns, as the configuration would compile it.
#[derive(Debug, Clone)]
struct Policy {
    patterns: Vec<(Pattern, FileSlots)>,
    params: BTreeMap<String, Regex>,
}

impl CommandPolicy for Policy {
    fn name(&self) -> &str {
        "tool"
    }

    fn patterns(&self) -> impl Iterator<Item = (&Pattern, &FileSlots)> {
        self.patterns.iter().map(|(p, f)| (p, f))
    }

    fn param_regex(&self, slot: &str) -> Option<&Regex> {
        self.params.get(slot)
    }
}

/// Literals shared by patterns and argv, so that generated calls often match.
const LITERALS: [&str; 6] = ["ld", "wl", "db", "0", "-t", "x.bin"];
const SLOTS: [&str; 4] = ["a", "b", "image", "lba"];
/// Slot regexes as an operator writes them (anchored by `slot_regex`).
const REGEXES: [&str; 4] = ["[a-z]+", "-[a-z]", "0|0x[0-9a-f]{1,8}", ".*"];

/// One pattern's text: literals and slots (a slot at most once, or parsing refuses it),
/// sometimes with a word the grammar refuses.
fn pattern_text() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            4 => prop::sample::select(LITERALS.to_vec()).prop_map(str::to_string),
            3 => prop::sample::select(SLOTS.to_vec()).prop_map(|s| format!("{{{s}}}")),
            1 => "[ -~]{1,4}",
        ],
        0..5,
    )
    .prop_map(|words| words.join(" "))
}

/// A policy of up to four parsable patterns, with random slot regexes and file slots
/// (files resolve against roots that do not exist: refused, never a panic).
fn policy() -> impl Strategy<Value = Policy> {
    (
        prop::collection::vec(
            (
                pattern_text(),
                prop::collection::btree_map(
                    prop::sample::select(SLOTS.to_vec()),
                    prop::bool::ANY,
                    0..2,
                ),
            ),
            0..4,
        ),
        prop::collection::btree_map(
            prop::sample::select(SLOTS.to_vec()),
            prop::sample::select(REGEXES.to_vec()),
            0..3,
        ),
    )
        .prop_map(|(patterns, params)| Policy {
            patterns: patterns
                .into_iter()
                .filter_map(|(text, files)| {
                    let pattern: Pattern = text.parse().ok()?;
                    let slots: Vec<&str> = pattern.slot_names().collect();
                    let files = files
                        .into_iter()
                        .filter(|(s, _)| slots.contains(s))
                        .map(|(s, input)| {
                            let kind = if input {
                                FileKind::Input
                            } else {
                                FileKind::Output
                            };
                            (s.to_string(), kind)
                        })
                        .collect();
                    Some((pattern, files))
                })
                .collect(),
            params: params
                .into_iter()
                .map(|(s, re)| (s.to_string(), slot_regex(re).expect("fixed regex")))
                .collect(),
        })
}

/// One argument: a pattern literal, a plausible word, or anything at all.
fn argument() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(LITERALS.to_vec()).prop_map(str::to_string),
        3 => "[a-z0-9x_.-]{0,6}",
        1 => any::<String>(),
    ]
}

/// A slot value: words the fixed regexes accept or refuse, options, or anything.
fn slot_value() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => "[a-z]{1,6}",
        2 => prop::sample::select(vec!["-v", "-t", "0", "0x1f", "0xZZ", "", "a;b", "x.bin"])
            .prop_map(str::to_string),
        1 => argument(),
    ]
}

/// A policy and an argv: mostly shaped after one of its patterns (literals kept, slots
/// filled), so that acceptance is common, otherwise random.
fn policy_and_argv() -> impl Strategy<Value = (Policy, Vec<String>)> {
    policy().prop_flat_map(|policy| {
        let shapes: Vec<Vec<Word>> = policy
            .patterns
            .iter()
            .map(|(p, _)| p.words.clone())
            .collect();
        let random = prop::collection::vec(argument(), 0..6).boxed();
        let argv = if shapes.is_empty() {
            random
        } else {
            let shaped = prop::sample::select(shapes)
                .prop_flat_map(|words| {
                    words
                        .into_iter()
                        .map(|w| match w {
                            Word::Literal(l) => prop_oneof![9 => Just(l), 1 => argument()].boxed(),
                            Word::Slot(_) => slot_value().boxed(),
                        })
                        .collect::<Vec<_>>()
                })
                .boxed();
            prop_oneof![1 => random, 3 => shaped].boxed()
        };
        (Just(policy), argv)
    })
}

fn roots() -> Vec<PathBuf> {
    vec![PathBuf::from("/nonexistent/gatecmd-proptest-root")]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn pattern_text_parses_or_is_refused_and_round_trips(text in "[ -~]{0,24}") {
        if let Ok(p) = text.parse::<Pattern>() {
            let again: Pattern = p.to_string().parse().expect("a displayed pattern parses");
            prop_assert_eq!(again, p);
        }
    }

    #[test]
    fn an_accepted_argv_matches_its_pattern_word_by_word((policy, argv) in policy_and_argv()) {
        let Ok(approved) = sanitizer::check(&policy, &argv, &roots()) else {
            return Ok(());
        };
        let (pattern, files) = &policy.patterns[approved.pattern_index];
        prop_assert_eq!(pattern.words.len(), argv.len());
        prop_assert_eq!(approved.args.len(), argv.len());
        for ((word, value), passed) in pattern.words.iter().zip(&argv).zip(&approved.args) {
            prop_assert!(!value.chars().any(is_forbidden), "{value:?} has a forbidden character");
            match word {
                Word::Literal(l) => prop_assert_eq!(l, value),
                Word::Slot(s) => {
                    prop_assert!(!value.is_empty());
                    match policy.params.get(s) {
                        Some(re) => prop_assert!(re.is_match(value), "{value:?} !~ {re}"),
                        None => prop_assert!(!value.starts_with('-'), "{value:?} is an option"),
                    }
                    // The roots do not exist, so no file slot can have been accepted.
                    prop_assert!(!files.contains_key(s.as_str()));
                    prop_assert_eq!(passed, value);
                }
            }
        }
    }

    #[test]
    fn a_refused_argv_says_why((policy, argv) in policy_and_argv()) {
        if let Err(refusal) = sanitizer::check(&policy, &argv, &roots()) {
            prop_assert!(!refusal.to_string().is_empty());
        }
    }
}

/// An edit of the bundled configuration: the kinds of slip a hand makes.
#[derive(Debug, Clone)]
enum Edit {
    DeleteLine(usize),
    DuplicateLine(usize),
    SwapLines(usize, usize),
    Insert { at: usize, text: String },
    DeleteChars { at: usize, len: usize },
}

fn edit() -> impl Strategy<Value = Edit> {
    let token = prop_oneof![
        prop::sample::select(vec![
            ":",
            " ",
            "-",
            "\n",
            "  ",
            "\t",
            "{",
            "}",
            "[",
            "]",
            "\"",
            "'",
            "#",
            "0",
            "~",
            "name: x",
            "- pattern: {a}",
            "binary: ls",
            "file_args: [a]",
            "isolate: true",
            "device: nope",
            "timeout_secs: 0",
            "&a",
            "*a",
            "!!str",
            "? ",
        ])
        .prop_map(str::to_string),
        any::<String>(),
    ];
    prop_oneof![
        (0..80usize).prop_map(Edit::DeleteLine),
        (0..80usize).prop_map(Edit::DuplicateLine),
        (0..80usize, 0..80usize).prop_map(|(a, b)| Edit::SwapLines(a, b)),
        (0..4000usize, token).prop_map(|(at, text)| Edit::Insert { at, text }),
        (0..4000usize, 1..8usize).prop_map(|(at, len)| Edit::DeleteChars { at, len }),
    ]
}

fn apply(text: &str, edit: &Edit) -> String {
    let mut lines: Vec<&str> = text.lines().collect();
    let n = lines.len();
    match edit {
        Edit::DeleteLine(i) => {
            lines.remove(i % n);
        }
        Edit::DuplicateLine(i) => lines.insert(i % n, lines[i % n]),
        Edit::SwapLines(a, b) => lines.swap(a % n, b % n),
        Edit::Insert { at, text: t } => {
            let at = char_boundary(text, at % (text.len() + 1));
            return format!("{}{t}{}", &text[..at], &text[at..]);
        }
        Edit::DeleteChars { at, len } => {
            let start = char_boundary(text, at % (text.len() + 1));
            let end = char_boundary(text, (start + len).min(text.len()));
            return format!("{}{}", &text[..start], &text[end..]);
        }
    }
    lines.join("\n") + "\n"
}

fn char_boundary(text: &str, mut at: usize) -> usize {
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// Whatever the text, loading either succeeds or every error names the file and a line.
fn assert_located(text: &str) -> Result<(), TestCaseError> {
    if let Err(errors) = Config::parse(text, "p.yaml") {
        prop_assert!(!errors.0.is_empty(), "an error list without errors");
        for e in &errors.0 {
            prop_assert_eq!(e.file.as_str(), "p.yaml");
            prop_assert!(e.line >= 1, "no line in {e} for:\n{text}");
            prop_assert!(!e.message.is_empty());
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_text_never_panics_and_errors_are_located(text in any::<String>()) {
        assert_located(&text)?;
    }

    #[test]
    fn yaml_like_text_never_panics_and_errors_are_located(
        lines in prop::collection::vec(
            (
                0..3usize,
                prop::sample::select(vec![
                    "bind", "commands", "- name", "binary", "allowed_args", "- pattern",
                    "file_roots", "devices", "match", "clients", "token", "params", "limits",
                    "audit", "staging", "isolate", "device", "max_bytes", "keep",
                ]),
                "[ -~]{0,12}",
            ),
            0..12,
        ),
    ) {
        let text: String = lines
            .iter()
            .map(|(indent, key, value)| format!("{}{key}: {value}\n", "  ".repeat(*indent)))
            .collect();
        assert_located(&text)?;
    }

    #[test]
    fn edits_of_the_bundled_config_never_panic_and_errors_are_located(
        edits in prop::collection::vec(edit(), 1..4),
    ) {
        let text = edits.iter().fold(EMBEDDED_DEFAULT.to_string(), |t, e| apply(&t, e));
        assert_located(&text)?;
    }
}
