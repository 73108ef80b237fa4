//! The argument policy: which argument lists may reach a child, and in what form.
//!
//! A pattern is a list of literal words and `{slot}`s. Arguments match a pattern when the
//! lengths agree, every literal is equal and every slot value passes its checks. File slots
//! are opened beneath a file root (symlinks followed only while they stay beneath it), and
//! the child receives that open file (`/proc/self/fd/N`), never the caller's text.
//!
//! The sanitizer knows nothing of the configuration file: a command's compiled policy
//! reaches it through [`CommandPolicy`], which the configuration implements.
//!
//! - `pattern`: the pattern grammar (`Pattern`, `Word`), forbidden characters, slot regexes.
//! - `check`: matching a call's arguments against a command's patterns; `Refusal`.
//! - `error`: why a slot value or a file argument was refused (`FileArgError`, `SlotError`).
//! - `files`: file slots opened beneath the file roots and handed over as open files.

mod check;
mod error;
mod files;
mod pattern;

pub use check::{Approved, Args, CommandPolicy, FileSlots, Refusal, check, check_with};
pub use error::{FileArgError, SlotError, SlotRegexError};
pub use files::{FileKind, FileRules, OpenedArg, open_file_arg};
pub use pattern::{Pattern, Word, is_forbidden, slot_regex};

#[cfg(test)]
mod tests;
