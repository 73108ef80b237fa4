//! One allowlisted command as validated: its patterns, slots, timeouts, cancel policy and
//! isolation, and the sanitizer's view of it ([`CommandPolicy`]). Built by
//! `validate/commands.rs`; read by `execute_command`, the power backends and `gatecmd check`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use regex::Regex;
use serde::Deserialize;

use gatecmd_core::sanitizer::{CommandPolicy, FileKind, FileSlots, Pattern};

/// What a client's give-up (`notifications/cancelled`, a dropped connection) does to a
/// running command (docs/CONFIG.md). Default: `detach` for a `destructive` command (a
/// half-written board is worse than a finished write nobody waited for), else `kill`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CancelPolicy {
    /// The process group is stopped (SIGTERM, then SIGKILL). `allow` is its old name.
    #[serde(alias = "allow")]
    Kill,
    /// The command keeps running as a job of the client (`wait_job`, `cancel_job`).
    Detach,
    /// Finish what was started (e.g. a bootloader write): a cancel, and `cancel_job`, are
    /// refused.
    Never,
}

impl CancelPolicy {
    /// The policy of a command that sets none.
    pub fn default_for(destructive: bool) -> CancelPolicy {
        if destructive {
            CancelPolicy::Detach
        } else {
            CancelPolicy::Kill
        }
    }
}

/// One allowed argument pattern of a command.
#[derive(Debug, Clone)]
pub struct PatternConfig {
    pub pattern: Pattern,
    pub file_slots: BTreeMap<String, FileKind>,
    pub timeout: Option<Duration>,
    pub progress: Option<Regex>,
    pub cancel: Option<CancelPolicy>,
    /// Overrides the command's `isolate` for this pattern.
    pub isolate: Option<bool>,
    /// The device modes the pattern works in (`modes:`); empty: any. A run that fails on a
    /// device in another mode is told the step that gets there.
    pub modes: Vec<String>,
    /// File slots that are loaders (`loader_args:`): held to `flash.loaders`.
    pub loader_slots: std::collections::BTreeSet<String>,
}

impl PatternConfig {
    /// Whether the pattern works on a device in `mode` (a pattern without `modes`, or a
    /// device whose mode is unknown, always does).
    pub fn works_in(&self, mode: Option<&str>) -> bool {
        self.modes.is_empty() || mode.is_none_or(|m| self.modes.iter().any(|w| w == m))
    }
}

/// One allowlisted command.
#[derive(Debug, Clone)]
pub struct CommandConfig {
    pub name: String,
    pub binary: PathBuf,
    pub description: String,
    pub patterns: Vec<PatternConfig>,
    pub params: BTreeMap<String, Regex>,
    pub timeout: Duration,
    pub env: BTreeMap<String, String>,
    pub device: Option<String>,
    pub progress: Option<Regex>,
    pub cancel: CancelPolicy,
    pub read_only: bool,
    pub destructive: bool,
    /// Runs in a view of the system holding only the chosen board (docs/ISOLATION.md);
    /// a pattern may override it.
    pub isolate: bool,
    /// Why the command cannot run on this host (binary missing), if so.
    pub unavailable: Option<String>,
}

impl CommandConfig {
    /// Whether a call matching pattern `index` runs isolated.
    pub fn isolates(&self, index: usize) -> bool {
        self.patterns
            .get(index)
            .and_then(|p| p.isolate)
            .unwrap_or(self.isolate)
    }

    /// Whether any pattern of the command runs isolated.
    pub fn may_isolate(&self) -> bool {
        (0..self.patterns.len()).any(|i| self.isolates(i))
    }

    /// Every allowed command line, as a person would type it.
    pub fn command_lines(&self) -> Vec<String> {
        self.patterns
            .iter()
            .map(|p| {
                if p.pattern.words.is_empty() {
                    self.binary.display().to_string()
                } else {
                    format!("{} {}", self.binary.display(), p.pattern)
                }
            })
            .collect()
    }
}

/// The sanitizer reads a command's compiled patterns and slot regexes through this.
impl CommandPolicy for CommandConfig {
    fn name(&self) -> &str {
        &self.name
    }

    fn patterns(&self) -> impl Iterator<Item = (&Pattern, &FileSlots)> {
        self.patterns.iter().map(|p| (&p.pattern, &p.file_slots))
    }

    fn param_regex(&self, slot: &str) -> Option<&Regex> {
        self.params.get(slot)
    }
}
