//! `approvals:`: which actions wait for a named person's yes (issue 33), as written and
//! as validated, and the lookup every gated call makes.
//!
//! A rule selects an action by what it is (`command` with an optional `args_match`, or a
//! built-in `tool` with its `action`/`force`) and by where it acts (`board`, `board_tag`);
//! the selectors given must all hold. The first rule that holds applies. With no rule
//! configured the lookup is one `is_empty` test: calls no rule can reach pay nothing more.

use std::collections::BTreeMap;
use std::time::Duration;

use regex::Regex;
use serde::Deserialize;

use super::boards::BoardConfig;

/// `approve.timeout_secs` when absent: how long a request waits before it expires.
pub const DEFAULT_APPROVAL_TIMEOUT_SECS: u64 = 900;
/// The longest `approve.timeout_secs`: a day.
pub const MAX_APPROVAL_TIMEOUT_SECS: u64 = 86_400;

/// One rule as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawApprovalRule {
    pub(crate) command: Option<String>,
    pub(crate) args_match: Option<String>,
    pub(crate) tool: Option<String>,
    pub(crate) action: Option<String>,
    pub(crate) force: Option<bool>,
    pub(crate) board: Option<String>,
    #[serde(default)]
    pub(crate) board_tag: BTreeMap<String, String>,
    pub(crate) approve: RawApprove,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawApprove {
    pub(crate) by: RawApprovers,
    pub(crate) timeout_secs: Option<u64>,
}

/// `by:` as written: a list of client names, or the word `requester`.
#[derive(Deserialize)]
#[serde(untagged)]
pub(crate) enum RawApprovers {
    Word(String),
    Names(Vec<String>),
}

gatecmd_core::named_enum! {
    /// A built-in tool whose calls a rule may hold for approval, with its name as a rule
    /// writes it. Only tools whose call is gated are accepted by the validator, so a rule
    /// is never silently ignored.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum GatedTool {
        PowerBoard => "power_board",
        BootBoard => "boot_board",
        FlashBoard => "flash_board",
        /// Text typed into a board's console.
        ConsoleWrite => "console_write",
        /// A command line at a board's shell.
        BoardRun => "board_run",
        /// A command at a board's U-Boot prompt.
        UbootRun => "uboot_run",
    }
}

impl GatedTool {
    /// The actions a rule's `action` may name for this tool (none: the tool does one
    /// thing, and a rule on it takes no `action`).
    pub fn actions(self) -> &'static [&'static str] {
        match self {
            GatedTool::PowerBoard => &["on", "off", "cycle"],
            GatedTool::BootBoard => &["recovery", "maskrom", "uboot", "shell", "off"],
            GatedTool::FlashBoard
            | GatedTool::ConsoleWrite
            | GatedTool::BoardRun
            | GatedTool::UbootRun => &[],
        }
    }
}

/// Who may say yes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Approvers {
    /// These configured clients (never the requester itself).
    Clients(Vec<String>),
    /// As written in a rule (`by: requester`): the person who answers for the requesting
    /// client (`clients[].person`). A request never carries it: it is resolved to
    /// [`Approvers::Person`] when the request is made.
    Requester,
    /// A `by: requester` request resolved: the configured client `person` (a sign-in only
    /// that person holds) answers for the requesting client `client`. Nothing the agent's
    /// own process can answer (its elicitation answer included) decides it.
    Person { client: String, person: String },
}

impl Approvers {
    /// The client names that may decide (`["alice"]` for a person), or `["requester"]`
    /// for an unresolved rule.
    pub fn names(&self) -> Vec<String> {
        match self {
            Approvers::Clients(names) => names.clone(),
            Approvers::Requester => vec!["requester".to_string()],
            Approvers::Person { person, .. } => vec![person.clone()],
        }
    }
}

impl std::fmt::Display for Approvers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Approvers::Clients(names) => f.write_str(&names.join(", ")),
            Approvers::Requester => f.write_str(
                "the person who answers for the requesting client (by: requester, \
                 clients[].person)",
            ),
            Approvers::Person { client, person } => {
                write!(f, "{person} (who answers for {client}, by: requester)")
            }
        }
    }
}

/// Who answers `by: requester` approvals for which client: `clients[].person`, by client
/// name. The person is a configured client whose token only that person holds.
pub type Persons = BTreeMap<String, String>;

/// A validated rule.
#[derive(Debug, Clone)]
pub struct ApprovalRule {
    /// Its position in `approvals:` (`approvals[N]`), for people and the audit log.
    pub index: usize,
    pub command: Option<String>,
    /// Matched against the arguments that will run, joined by one space.
    pub args_match: Option<Regex>,
    pub tool: Option<GatedTool>,
    /// `power_board`'s `on`, `off` or `cycle`, `boot_board`'s `to`; any when absent
    /// (always absent for `flash_board`).
    pub action: Option<String>,
    pub board: Option<String>,
    pub board_tag: BTreeMap<String, String>,
    pub by: Approvers,
    pub timeout: Duration,
}

/// What a gated call is about to do, as the lookup sees it.
#[derive(Debug, Clone, Copy)]
pub enum Gated<'a> {
    /// `execute_command`: the command's name, its arguments as they will run, and
    /// whether it is marked `read_only` (a board-only rule leaves those alone).
    Command {
        name: &'a str,
        args: &'a [String],
        read_only: bool,
    },
    /// A built-in tool's action (`power_board` `off`).
    Tool { tool: GatedTool, action: &'a str },
}

impl ApprovalRule {
    /// The rule in one line: `approvals[0] (command rkdeveloptool, args ^ef$)`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(c) = &self.command {
            parts.push(format!("command {c}"));
        }
        if let Some(a) = &self.args_match {
            parts.push(format!("args {}", a.as_str()));
        }
        if let Some(t) = self.tool {
            parts.push(format!("tool {}", t.as_str()));
        }
        if let Some(a) = &self.action {
            parts.push(format!("action {a}"));
        }
        if let Some(b) = &self.board {
            parts.push(format!("board {b}"));
        }
        for (k, v) in &self.board_tag {
            parts.push(format!("board tag {k}={v}"));
        }
        format!("approvals[{}] ({})", self.index, parts.join(", "))
    }

    /// Whether this rule holds for `what` acting on `boards` (every board the call
    /// touches: a command that names no device may reach several).
    pub fn holds(&self, what: Gated<'_>, boards: &[&BoardConfig]) -> bool {
        let what_matches = match what {
            Gated::Command {
                name,
                args,
                read_only,
            } => {
                if self.tool.is_some() {
                    return false;
                }
                match &self.command {
                    Some(c) => {
                        c == name
                            && self
                                .args_match
                                .as_ref()
                                .is_none_or(|re| re.is_match(&args.join(" ")))
                    }
                    // A rule on a board alone holds for what may change the board.
                    None => !read_only,
                }
            }
            Gated::Tool { tool, action } => {
                if self.command.is_some() {
                    return false;
                }
                self.tool.is_none_or(|t| t == tool)
                    && self.action.as_deref().is_none_or(|a| a == action)
            }
        };
        if !what_matches {
            return false;
        }
        if self.board.is_none() && self.board_tag.is_empty() {
            return true;
        }
        boards.iter().any(|b| {
            self.board.as_ref().is_none_or(|name| &b.name == name)
                && (self.board_tag.iter()).all(|(k, v)| b.tags.get(k) == Some(v))
        })
    }
}

/// The first rule of `rules` that holds for `what` acting on `boards`.
pub fn approval_rule<'r>(
    rules: &'r [ApprovalRule],
    what: Gated<'_>,
    boards: &[&BoardConfig],
) -> Option<&'r ApprovalRule> {
    // The common case, no rule at all, costs this one test.
    if rules.is_empty() {
        return None;
    }
    rules.iter().find(|r| r.holds(what, boards))
}
