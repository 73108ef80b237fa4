//! `approvals:`: each rule selects something, names configured commands, boards and
//! clients, and a sound regex and timeout.

use std::time::Duration;

use regex::Regex;

use super::super::approvals::{
    ApprovalRule, Approvers, DEFAULT_APPROVAL_TIMEOUT_SECS, GatedTool, MAX_APPROVAL_TIMEOUT_SECS,
    Persons, RawApprovalRule, RawApprovers,
};
use super::super::boards::BoardConfig;
use super::super::command::CommandConfig;
use super::super::page::PageSettings;
use super::super::raw::RawPerson;
use super::super::schema::ClientConfig;
use super::validator::Validator;

impl Validator {
    /// `clients[].person`: each names another configured client (the sign-in only that
    /// person holds), never the client itself (the agent cannot answer for itself).
    pub(super) fn persons(
        &mut self,
        raw: Vec<RawPerson>,
        clients: &[ClientConfig],
        page: &PageSettings,
    ) -> Persons {
        let mut out = Persons::new();
        for RawPerson {
            index,
            client,
            person,
        } in raw
        {
            let field = format!("clients[{index}].person");
            let at = self.at(&field);
            if person == client {
                self.err(
                    at,
                    field,
                    format!(
                        "client {client:?} cannot answer for itself: its process holds its token, \
                         so its yes proves no person saw the request. Name the client whose token \
                         only that person holds (add one for them under clients:)"
                    ),
                );
            } else if !clients.iter().any(|c| c.name == person) {
                let names: Vec<_> = clients.iter().map(|c| c.name.as_str()).collect();
                self.err(
                    at,
                    field,
                    format!(
                        "unknown client {person:?}; the person who answers for {client:?} must be \
                         a configured client whose token only that person holds (configured \
                         clients: {})",
                        names.join(", ")
                    ),
                );
            } else if page.enabled && !page.may_view(&person) {
                // The link a URL elicitation carries leads to the page: she must be able
                // to sign in there.
                self.err(
                    at,
                    field,
                    format!(
                        "{person:?} answers for {client:?} on the bench page, and page.viewers \
                         does not list {person:?}: add {person:?} to page.viewers"
                    ),
                );
            } else {
                out.insert(client, person);
            }
        }
        out
    }

    pub(super) fn approvals(
        &mut self,
        raw: Vec<RawApprovalRule>,
        commands: &[CommandConfig],
        boards: &[BoardConfig],
        clients: &[ClientConfig],
        persons: &Persons,
    ) -> Vec<ApprovalRule> {
        let mut out = Vec::new();
        for (i, r) in raw.into_iter().enumerate() {
            let errors_before = self.error_count();
            let args_match = self.rule_subject(i, &r, commands);
            let tool = self.rule_tool(i, &r);
            self.rule_board(i, &r, boards);
            let by = self.rule_approvers(i, &r, clients, persons);
            let secs = self.rule_timeout(i, &r);
            if let Some(by) = by
                && self.error_count() == errors_before
            {
                out.push(ApprovalRule {
                    index: i,
                    command: r.command,
                    args_match,
                    tool,
                    action: r.action,
                    board: r.board,
                    board_tag: r.board_tag,
                    by,
                    timeout: Duration::from_secs(secs),
                });
            }
        }
        out
    }

    /// What rule `i` holds: a command (with its `args_match`), a tool, a board or a tag.
    fn rule_subject(
        &mut self,
        i: usize,
        r: &RawApprovalRule,
        commands: &[CommandConfig],
    ) -> Option<Regex> {
        let fail = |v: &mut Validator, k: &str, m: String| rule_fail(v, i, k, m);
        let has_subject =
            r.command.is_some() || r.tool.is_some() || r.board.is_some() || !r.board_tag.is_empty();
        if !has_subject {
            fail(
                self,
                "approve",
                "a rule must select what it holds: command, tool, board or board_tag".into(),
            );
        }
        if r.command.is_some() && r.tool.is_some() {
            fail(
                self,
                "tool",
                "a rule names a command or a tool, not both".into(),
            );
        }
        if let Some(c) = &r.command
            && !commands.iter().any(|k| &k.name == c)
        {
            let known: Vec<_> = commands.iter().map(|k| k.name.as_str()).collect();
            fail(
                self,
                "command",
                format!(
                    "unknown command {c:?}; defined commands: {}",
                    known.join(", ")
                ),
            );
        }
        match (&r.args_match, &r.command) {
            (None, _) => None,
            (Some(_), None) => {
                fail(self, "args_match", "args_match needs a command".into());
                None
            }
            (Some(a), Some(_)) => match Regex::new(a) {
                Ok(re) => Some(re),
                Err(e) => {
                    fail(self, "args_match", format!("not a valid regex: {e}"));
                    None
                }
            },
        }
    }

    /// Rule `i`'s tool and its action (and `force`, which no held tool takes yet).
    fn rule_tool(&mut self, i: usize, r: &RawApprovalRule) -> Option<GatedTool> {
        let fail = |v: &mut Validator, k: &str, m: String| rule_fail(v, i, k, m);
        let tool = match &r.tool {
            None => None,
            Some(t) => {
                let t = GatedTool::named(t);
                if t.is_none() {
                    let gated: Vec<_> = GatedTool::ALL.iter().map(|t| t.as_str()).collect();
                    fail(
                        self,
                        "tool",
                        format!(
                            "tool {:?} cannot be held for approval; tools that can: {} \
                         (execute_command is ruled by `command`)",
                            r.tool.as_deref().unwrap_or_default(),
                            gated.join(", ")
                        ),
                    );
                }
                t
            }
        };
        if let Some(a) = &r.action {
            match tool {
                None => fail(
                    self,
                    "action",
                    "action goes with tool: power_board or boot_board".into(),
                ),
                Some(t) if t.actions().is_empty() => fail(
                    self,
                    "action",
                    format!(
                        "{} has no actions to choose from: leave action out (the rule holds \
                     for every {} call it matches)",
                        t.as_str(),
                        t.as_str()
                    ),
                ),
                Some(t) if !t.actions().contains(&a.as_str()) => fail(
                    self,
                    "action",
                    format!(
                        "unknown action {a:?} of {}; one of: {}",
                        t.as_str(),
                        t.actions().join(", ")
                    ),
                ),
                Some(_) => {}
            }
        }
        if r.force.is_some() {
            fail(
                self,
                "force",
                "force goes with tool: unlock_device, which cannot be held for approval yet".into(),
            );
        }
        tool
    }

    /// Rule `i`'s board, a configured one.
    fn rule_board(&mut self, i: usize, r: &RawApprovalRule, boards: &[BoardConfig]) {
        let fail = |v: &mut Validator, k: &str, m: String| rule_fail(v, i, k, m);
        if let Some(b) = &r.board
            && !boards.iter().any(|x| &x.name == b)
        {
            let known: Vec<_> = boards.iter().map(|x| x.name.as_str()).collect();
            fail(
                self,
                "board",
                format!(
                    "unknown board {b:?}; configured boards: {}",
                    known.join(", ")
                ),
            );
        }
    }

    /// Who answers rule `i`: `requester` (when some client it can hold has a person) or
    /// configured clients.
    fn rule_approvers(
        &mut self,
        i: usize,
        r: &RawApprovalRule,
        clients: &[ClientConfig],
        persons: &Persons,
    ) -> Option<Approvers> {
        let fail = |v: &mut Validator, k: &str, m: String| rule_fail(v, i, k, m);
        match &r.approve.by {
            RawApprovers::Word(w) if w == "requester" => {
                // Who could make a request under this rule: a command's are the clients
                // that may run it; a tool's or a board's, every client.
                let reach = |c: &&ClientConfig| match (&r.command, &c.commands) {
                    (Some(cmd), Some(allowed)) => allowed.contains(cmd),
                    _ => true,
                };
                let answered = clients
                    .iter()
                    .filter(reach)
                    .any(|c| persons.contains_key(&c.name));
                if !answered {
                    fail(
                        self,
                        "approve.by",
                        "`by: requester` is answered by the person who answers for the \
                     requesting client (`clients[].person`: a client whose token only \
                     that person holds), and no client this rule can hold has one: set \
                     `person` on the agents' clients, or name approvers (`by: [ops]`)"
                            .into(),
                    );
                }
                Some(Approvers::Requester)
            }
            RawApprovers::Word(w) => {
                fail(
                    self,
                    "approve.by",
                    format!(
                        "{w:?} is neither `requester` nor a list of client names \
                     (write `by: [{w}]` for one client)"
                    ),
                );
                None
            }
            RawApprovers::Names(names) if names.is_empty() => {
                fail(
                    self,
                    "approve.by",
                    "name at least one approver (a configured client), or `requester`".into(),
                );
                None
            }
            RawApprovers::Names(names) => {
                for (k, n) in names.iter().enumerate() {
                    let known = clients.iter().any(|c| &c.name == n)
                        || (clients.is_empty() && n == "default");
                    if !known {
                        let f = format!("approvals[{i}].approve.by[{k}]");
                        let at = self.at(&f);
                        let names: Vec<_> = clients.iter().map(|c| c.name.as_str()).collect();
                        self.err(
                            at,
                            f,
                            format!(
                                "unknown client {n:?}; configured clients: {}",
                                names.join(", ")
                            ),
                        );
                    }
                }
                Some(Approvers::Clients(names.clone()))
            }
        }
    }

    /// Rule `i`'s time limit, in seconds, within bounds.
    fn rule_timeout(&mut self, i: usize, r: &RawApprovalRule) -> u64 {
        let fail = |v: &mut Validator, k: &str, m: String| rule_fail(v, i, k, m);
        let secs = r
            .approve
            .timeout_secs
            .unwrap_or(DEFAULT_APPROVAL_TIMEOUT_SECS);
        if secs == 0 || secs > MAX_APPROVAL_TIMEOUT_SECS {
            fail(
                self,
                "approve.timeout_secs",
                format!(
                    "{secs} is out of range: 1 to {MAX_APPROVAL_TIMEOUT_SECS} seconds \
                 (default {DEFAULT_APPROVAL_TIMEOUT_SECS})"
                ),
            );
        }
        secs
    }
}

/// An error on field `k` of rule `i`.
fn rule_fail(v: &mut Validator, i: usize, k: &str, message: String) {
    let f = format!("approvals[{i}].{k}");
    let at = v.at(&f);
    v.err(at, f, message);
}
