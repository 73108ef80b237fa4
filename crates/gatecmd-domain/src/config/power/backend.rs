//! The [`Backend`] trait every power switch implements, and what a backend is given: a
//! [`Check`] to record what is wrong with what was written (the validator locates each
//! field in the file), and a [`Context`] of the configuration in force to build its command
//! from.

use std::fmt;
use std::path::PathBuf;

use super::super::command::CommandConfig;
use crate::exec::Spec;
use gatecmd_core::sanitizer;

/// One kind of power switch (uhubctl, named commands, pdudaemon, …): how it is written
/// under a board's `power:`, how that is checked, the command that switches the board, and
/// how `gatecmd check` shows it. Each backend is one file beside this one; the list in
/// `mod.rs` names them all.
pub trait Backend: Sized {
    /// Its name, as `list_boards` shows it (`power.backend`).
    const NAME: &'static str;
    /// How it is written, for the error that lists every form (`uhubctl: {hub, port,
    /// binary?}`).
    const FORM: &'static str;
    /// What its keys under `power:` hold as written: the value of its one key, or a tuple
    /// with one value per key in the list's order.
    type Raw;

    /// Checks what was written, recording every problem with its field through `c`;
    /// `None` when anything was wrong.
    fn check(raw: Self::Raw, c: &mut Check<'_>) -> Option<Self>;

    /// The command that switches the board on (`on`) or off, run through the executor like
    /// any command (own process group, cleared environment, timeout).
    fn spec(&self, ctx: &Context<'_>, on: bool) -> Result<Spec, SpecError>;

    /// What `gatecmd check` prints after `power `: the command lines, in full.
    fn describe(&self) -> String;

    /// The `commands:` entries it runs. Such a command belongs to its board: only
    /// `power_board` runs it, under the board's lease.
    fn commands(&self) -> Vec<&str> {
        Vec::new()
    }
}

/// Where a backend's problems go: the validator, which turns a field path into file, line
/// and column.
pub(crate) trait Report {
    /// Records `message` against `field` (a full path such as `boards[2].power.uhubctl.hub`).
    fn error(&mut self, field: &str, message: String);
}

/// What a backend's [`Backend::check`] gets: where to record problems, under which field,
/// and the commands and file roots a power action is checked against.
pub struct Check<'a> {
    report: &'a mut dyn Report,
    /// The `power:` section's path (`boards[2].power`).
    prefix: String,
    /// The configured commands (a power action must be one of them).
    pub commands: &'a [CommandConfig],
    /// The file roots its file arguments must resolve beneath.
    pub file_roots: &'a [PathBuf],
}

impl<'a> Check<'a> {
    pub(crate) fn new(
        report: &'a mut dyn Report,
        prefix: String,
        commands: &'a [CommandConfig],
        file_roots: &'a [PathBuf],
    ) -> Self {
        Check {
            report,
            prefix,
            commands,
            file_roots,
        }
    }

    /// The full path of `key` below `power:` (`uhubctl.hub`; empty: `power:` itself).
    pub fn field(&self, key: &str) -> String {
        if key.is_empty() {
            self.prefix.clone()
        } else {
            format!("{}.{key}", self.prefix)
        }
    }

    /// Records `message` against `key` below `power:`.
    pub fn error(&mut self, key: &str, message: impl Into<String>) {
        let field = self.field(key);
        self.report.error(&field, message.into());
    }

    /// A value check's result; a failure is recorded against `key` and yields `None`.
    pub fn value<T, E: fmt::Display>(&mut self, r: Result<T, E>, key: &str) -> Option<T> {
        r.map_err(|e| self.error(key, e.to_string())).ok()
    }
}

/// What building a power command needs of the configuration in force.
pub struct Context<'a> {
    /// The configured commands, looked up by name.
    pub commands: &'a [CommandConfig],
    /// The file roots, for the sanitizer's second look at a command's arguments.
    pub file_roots: &'a [PathBuf],
    /// `allow_hardlinked_inputs`, for the same.
    pub allow_hardlinked_inputs: bool,
}

/// Why a power command cannot be built now (the configuration or the host changed since
/// load, or the board has no switch).
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("board {board:?} has no power switch configured (boards[].power: {switches})")]
    NoSwitch {
        board: String,
        /// The backends one could configure, for the message.
        switches: String,
    },
    #[error("power command {command:?} is no longer configured")]
    CommandGone { command: String },
    #[error("power command {command:?} cannot run: {why}")]
    CommandUnavailable { command: String, why: String },
    #[error("{0}")]
    Args(#[from] sanitizer::Refusal),
}
