//! The pattern grammar: literal words and `{slot}`s, the characters no argument may hold,
//! and the anchored regex a slot's value must match.

use std::fmt;
use std::str::FromStr;

use regex::Regex;

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

/// A slot's regex as the operator wrote it, compiled to match the whole value: a regex
/// that matched only part of an argument would let the rest through unchecked.
pub fn slot_regex(s: &str) -> Result<Regex, super::error::SlotRegexError> {
    Regex::new(&format!("^(?:{s})$")).map_err(|error| super::error::SlotRegexError {
        pattern: s.to_string(),
        error,
    })
}

/// The regex as the operator wrote it (without the anchors [`slot_regex`] adds).
pub(super) fn display_regex(anchored: &str) -> &str {
    anchored
        .strip_prefix("^(?:")
        .and_then(|s| s.strip_suffix(")$"))
        .unwrap_or(anchored)
}
