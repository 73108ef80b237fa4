//! Matching a call's arguments against one command's patterns, and the refusal that says
//! what would have been accepted.

use std::collections::BTreeMap;
use std::path::PathBuf;

use regex::Regex;

use super::error::{FileArgError, SlotError};
use super::files::{FileKind, FileRules, OpenedArg, open_file_arg};
use super::pattern::{Pattern, Word, display_regex, is_forbidden};

/// The file slots of one pattern: slot name → what the file is.
pub type FileSlots = BTreeMap<String, FileKind>;

/// One command's compiled argument policy, as the sanitizer reads it.
///
/// The configuration implements it for its command type, so the policy is compiled once at
/// load time and the sanitizer depends on nothing of the configuration file.
pub trait CommandPolicy {
    /// The command's name, as refusals show it.
    fn name(&self) -> &str;
    /// The allowed patterns, each with its file slots, in the order
    /// [`Approved::pattern_index`] counts.
    fn patterns(&self) -> impl Iterator<Item = (&Pattern, &FileSlots)>;
    /// The anchored regex (see [`super::slot_regex`]) a slot's value must match, if the
    /// command gives one.
    fn param_regex(&self, slot: &str) -> Option<&Regex>;
}

/// Arguments as the caller sent them.
#[derive(Debug, Clone, schemars::JsonSchema)]
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

/// By hand rather than `#[serde(untagged)]`: an untagged enum buffers the value first, and
/// a YAML parser that reads `on`/`off`/`yes` as booleans there turned the config's
/// `args: [power, vb1, on]` into a refused "did not match any variant". Asking for each
/// element as a string keeps every scalar as written.
impl<'de> serde::Deserialize<'de> for Args {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Args;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of strings, or one string of words")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Args, E> {
                Ok(Args::Line(v.to_string()))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Args, E> {
                Ok(Args::Line(v))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Args, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
                while let Some(a) = seq.next_element::<String>()? {
                    out.push(a);
                }
                Ok(Args::List(out))
            }
        }
        d.deserialize_any(V)
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
    /// Arguments as the child receives them: a file slot is the open file checked here
    /// (`/proc/self/fd/N`, or `/proc/self/fd/N/NAME` for an output).
    pub args: Vec<String>,
    /// The same arguments for people: a file slot as the path it resolved to.
    pub shown: Vec<String>,
    /// The files behind the file slots, in argument order; the child must inherit them.
    pub files: Vec<OpenedArg>,
}

/// One checked slot value.
enum Slot {
    Plain(String),
    File(OpenedArg),
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
        /// The closest pattern failed on this file argument (its class decides the
        /// refusal's reason: a symbolic link is `symlink`). Boxed: refusals are rare and
        /// `Result`s carrying this one are returned on every call.
        file: Option<Box<FileArgError>>,
    },
    /// The first argument is none of the words the patterns begin with: no pattern is
    /// "closest", so the message names the first words that exist instead of one pattern
    /// that reads like a correction (`ul` when only `db` is allowed).
    #[error(
        "{command} may not run {value:?} here: its allowed first words are {}. Allowed patterns for {command}:\n{allowed}",
        first_words.iter().map(|w| format!("{w:?}")).collect::<Vec<_>>().join(", ")
    )]
    FirstWord {
        command: String,
        value: String,
        first_words: Vec<String>,
        allowed: String,
    },
}

/// Why one pattern did not match, and how close it came (higher is closer).
struct Miss {
    score: (usize, bool),
    reason: String,
    file: Option<Box<FileArgError>>,
}

/// Checks `args` against the command's patterns and file roots (inputs with more than one
/// hard link refused: see [`check_with`]).
pub fn check(
    command: &impl CommandPolicy,
    args: &[String],
    file_roots: &[PathBuf],
) -> Result<Approved, Refusal> {
    let rules = FileRules {
        roots: file_roots,
        allow_hardlinked_inputs: false,
    };
    check_with(command, args, rules)
}

/// Checks `args` against the command's patterns; file slots are opened under `rules`.
pub fn check_with(
    command: &impl CommandPolicy,
    args: &[String],
    rules: FileRules<'_>,
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
    let patterns: Vec<_> = command.patterns().collect();
    let mut best: Option<(usize, Miss)> = None;
    for (i, (pattern, file_slots)) in patterns.iter().enumerate() {
        match match_pattern(command, pattern, file_slots, args, rules) {
            Ok(slots) => return Ok(approved(i, slots)),
            Err(miss) => {
                if best.as_ref().is_none_or(|(_, b)| miss.score > b.score) {
                    best = Some((i, miss));
                }
            }
        }
    }
    let allowed = patterns
        .iter()
        .map(|(p, _)| format!("  {} {}", command.name(), p))
        .collect::<Vec<_>>()
        .join("\n");
    if let Some(refused) = first_word(command, &patterns, args, &allowed) {
        return Err(refused);
    }
    let (closest, reason, file) = match best {
        Some((i, m)) => (patterns[i].0.to_string(), m.reason, m.file),
        None => (
            String::new(),
            "this command has no allowed patterns".into(),
            None,
        ),
    };
    Err(Refusal::NoMatch {
        command: command.name().to_string(),
        closest,
        reason,
        allowed,
        file,
    })
}

/// The refusal of a first argument that no pattern begins with, when every pattern begins
/// with a literal word (a pattern that begins with a slot could take any first word).
fn first_word(
    command: &impl CommandPolicy,
    patterns: &[(&Pattern, &FileSlots)],
    args: &[String],
    allowed: &str,
) -> Option<Refusal> {
    let value = args.first()?;
    let mut first_words: Vec<String> = Vec::new();
    for (pattern, _) in patterns {
        match pattern.words.first() {
            Some(Word::Literal(l)) if l == value => return None,
            Some(Word::Literal(l)) => {
                if !first_words.contains(l) {
                    first_words.push(l.clone());
                }
            }
            _ => return None,
        }
    }
    if first_words.is_empty() {
        return None;
    }
    Some(Refusal::FirstWord {
        command: command.name().to_string(),
        value: value.clone(),
        first_words,
        allowed: allowed.to_string(),
    })
}

fn approved(pattern_index: usize, slots: Vec<Slot>) -> Approved {
    let mut out = Approved {
        pattern_index,
        args: Vec::with_capacity(slots.len()),
        shown: Vec::with_capacity(slots.len()),
        files: Vec::new(),
    };
    for slot in slots {
        match slot {
            Slot::Plain(v) => {
                out.args.push(v.clone());
                out.shown.push(v);
            }
            Slot::File(f) => {
                out.args.push(f.passed.clone());
                out.shown.push(f.real.to_string_lossy().into_owned());
                out.files.push(f);
            }
        }
    }
    out
}

fn match_pattern(
    command: &impl CommandPolicy,
    pattern: &Pattern,
    file_slots: &FileSlots,
    args: &[String],
    rules: FileRules<'_>,
) -> Result<Vec<Slot>, Miss> {
    let same_len = pattern.words.len() == args.len();
    let mut out = Vec::with_capacity(args.len());
    for (pos, word) in pattern.words.iter().enumerate() {
        let miss = |reason: String| Miss {
            score: (pos, same_len),
            reason,
            file: None,
        };
        let Some(value) = args.get(pos) else {
            return Err(miss(format!(
                "too few arguments: {} given, pattern `{}` takes {}",
                args.len(),
                pattern,
                pattern.words.len()
            )));
        };
        match word {
            Word::Literal(l) => {
                if l != value {
                    return Err(miss(format!("argument {pos} is {value:?}, expected {l:?}")));
                }
                out.push(Slot::Plain(value.clone()));
            }
            Word::Slot(slot) => {
                let resolved =
                    check_slot(command, file_slots, slot, value, rules).map_err(|why| Miss {
                        file: match &why {
                            SlotError::File(e) => Some(Box::new(e.clone())),
                            _ => None,
                        },
                        ..miss(format!("argument {pos} ({value:?}) for {{{slot}}}: {why}"))
                    })?;
                out.push(resolved);
            }
        }
    }
    if !same_len {
        return Err(Miss {
            score: (pattern.words.len(), false),
            reason: format!(
                "too many arguments: {} given, pattern `{}` takes {}",
                args.len(),
                pattern,
                pattern.words.len()
            ),
            file: None,
        });
    }
    Ok(out)
}

fn check_slot(
    command: &impl CommandPolicy,
    file_slots: &FileSlots,
    slot: &str,
    value: &str,
    rules: FileRules<'_>,
) -> Result<Slot, SlotError> {
    if value.is_empty() {
        return Err(SlotError::Empty);
    }
    let regex = command.param_regex(slot);
    if let Some(re) = regex {
        if !re.is_match(value) {
            return Err(SlotError::Form {
                regex: display_regex(re.as_str()).to_string(),
            });
        }
    } else if value.starts_with('-') {
        // Without an explicit regex a slot could smuggle in an option (`--output=/etc/x`).
        return Err(SlotError::Dash);
    }
    match file_slots.get(slot) {
        None => Ok(Slot::Plain(value.to_string())),
        Some(kind) => Ok(Slot::File(open_file_arg(value, *kind, rules)?)),
    }
}
