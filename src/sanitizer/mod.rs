//! The argument policy: which argument lists may reach a child, and in what form.
//!
//! A pattern is a list of literal words and `{slot}`s. Arguments match a pattern when the
//! lengths agree, every literal is equal and every slot value passes its checks. File slots
//! are resolved (symlinks included) and must lie inside a file root; the child receives the
//! resolved path, never the caller's text.
//!
//! The sanitizer knows nothing of the configuration file: a command's compiled policy
//! reaches it through [`CommandPolicy`], which the configuration implements.
//!
//! - `pattern`: the pattern grammar (`Pattern`, `Word`), forbidden characters, slot regexes.
//! - `check`: matching a call's arguments against a command's patterns; `Refusal`.
//! - `files`: file slots resolved and confined to the file roots.

mod check;
mod files;
mod pattern;

pub use check::{Approved, Args, CommandPolicy, FileSlots, Refusal, check};
pub use files::{FileKind, resolve_file};
pub use pattern::{Pattern, Word, is_forbidden, slot_regex};

#[cfg(test)]
mod tests;
