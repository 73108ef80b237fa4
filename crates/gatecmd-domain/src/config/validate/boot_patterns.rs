//! `boards[].console.boot_patterns`: each names one stage or one fault word (the fixed
//! words of docs/BOARDS.md "Boot reports") and a regex that compiles within the bound.

use super::super::raw::RawBootPattern;
use super::validator::Validator;
use crate::config::boot_patterns::{
    BootPattern, ConfigWord, FaultKind, MAX_PATTERN_CHARS, Stage, compile,
};

/// Most patterns one board may add.
pub const MAX_BOOT_PATTERNS: usize = 64;

impl Validator {
    /// The board's boot patterns, or `None` after recording every error (each at its own
    /// line, with its field).
    pub(super) fn boot_patterns(
        &mut self,
        i: usize,
        raw: &[RawBootPattern],
    ) -> Option<Vec<BootPattern>> {
        let list = format!("boards[{i}].console.boot_patterns");
        let at_of = |v: &Validator, f: &str| {
            v.at(f)
                .or_else(|| v.at(&list))
                .or_else(|| v.at(&format!("boards[{i}].console")))
        };
        if raw.len() > MAX_BOOT_PATTERNS {
            let at = at_of(self, &list);
            self.err(
                at,
                list.clone(),
                format!(
                    "{} patterns; a board may add at most {MAX_BOOT_PATTERNS}",
                    raw.len()
                ),
            );
            return None;
        }
        let mut out = Vec::new();
        let mut ok = true;
        for (j, p) in raw.iter().enumerate() {
            let field = |f: &str| format!("{list}[{j}].{f}");
            let word = match (&p.stage, &p.fault) {
                (Some(s), None) => match Stage::named(s) {
                    Some(s) => Some(ConfigWord::Stage(s)),
                    None => {
                        let at = at_of(self, &field("stage"));
                        let words: Vec<&str> = Stage::ALL.iter().map(|s| s.as_str()).collect();
                        self.err(
                            at,
                            field("stage"),
                            format!("{s:?} is not a stage; stages: {}", words.join(", ")),
                        );
                        None
                    }
                },
                (None, Some(f)) => match FaultKind::named(f) {
                    Some(f) => Some(ConfigWord::Fault(f)),
                    None => {
                        let at = at_of(self, &field("fault"));
                        let words: Vec<&str> =
                            FaultKind::MATCHED.iter().map(|f| f.as_str()).collect();
                        self.err(
                            at,
                            field("fault"),
                            format!(
                                "{f:?} is not a fault a pattern may name; faults: {} (reset is \
                                 seen, not matched: a second firmware banner before login)",
                                words.join(", ")
                            ),
                        );
                        None
                    }
                },
                _ => {
                    let at = at_of(self, &format!("{list}[{j}]"));
                    self.err(
                        at,
                        format!("{list}[{j}]"),
                        "give exactly one of stage and fault, e.g. {stage: uboot, regex: \"^U-Boot 20\"}"
                            .into(),
                    );
                    None
                }
            };
            let regex_ok = match compile(&p.regex) {
                Ok(_) if p.regex.is_empty() => {
                    let at = at_of(self, &field("regex"));
                    self.err(
                        at,
                        field("regex"),
                        "regex is empty: it would match every line".into(),
                    );
                    false
                }
                Ok(_) => true,
                Err(e) => {
                    let at = at_of(self, &field("regex"));
                    self.err(
                        at,
                        field("regex"),
                        format!(
                            "not a usable regex: {e} (the regex crate's syntax, at most \
                             {MAX_PATTERN_CHARS} characters, matched against one console line)"
                        ),
                    );
                    false
                }
            };
            match word {
                Some(word) if regex_ok => out.push(BootPattern {
                    word,
                    regex: p.regex.clone(),
                    replace: p.replace,
                }),
                _ => ok = false,
            }
        }
        ok.then_some(out)
    }
}
