//! One request for approval: what exactly will run, who asked, who may decide, until
//! when; and how it was decided.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::Serialize;
use tokio::sync::watch;

use crate::config::Approvers;

/// A request's id: `apr-N`, unique while the server runs.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, JsonSchema)]
pub struct ApprovalId(pub String);

impl std::fmt::Display for ApprovalId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A file argument as it was when the request was made: the approval covers these bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct FileDigest {
    /// The path it resolved to.
    pub path: String,
    /// SHA-256 of the content, lowercase hex.
    pub sha256: String,
    pub size: u64,
}

/// What a request asks for, fixed when it is made.
#[derive(Debug, Clone)]
pub struct NewRequest {
    /// The requesting client.
    pub client: String,
    /// The caller's note (why), if it gave one.
    pub note: Option<String>,
    /// `execute_command` or the built-in tool.
    pub tool: String,
    /// What will run, in one line: the argv, or the tool's action.
    pub what: String,
    /// The argv that will run (an `execute_command`), file arguments as resolved.
    pub argv: Option<Vec<String>>,
    pub board: Option<String>,
    /// Who holds the board's lease now, if anyone.
    pub holder: Option<String>,
    pub files: Vec<FileDigest>,
    /// The rule that holds, described (`approvals[0] (command rkdeveloptool, args ^ef$)`).
    pub rule: String,
    pub approvers: Approvers,
    pub timeout: Duration,
    /// The job that waits on it (an `execute_command`).
    pub job: Option<String>,
}

gatecmd_core::named_enum! {
    /// How a request ended. Serialised in snake_case; part of the interface.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
    #[serde(rename_all = "snake_case")]
    pub enum Outcome {
        Approved => "approved",
        Denied => "denied",
        /// Nobody decided within `approve.timeout_secs`.
        Expired => "expired",
        /// The requester went away or cancelled before a decision.
        Withdrawn => "withdrawn",
        /// The lease the request was made under ended.
        LeaseEnded => "lease_ended",
        /// A `by: requester` request nobody can answer (no person answers for the client).
        Unavailable => "unavailable",
    }
}

/// How an approver's decision reached gatecmd: what it proves is the credential behind
/// it (docs/APPROVALS.md, "What each way proves").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Via {
    /// The `approve`/`deny` tools over MCP with the approver client's token (the host's
    /// `gatecmd approve` CLI is such a client).
    Mcp,
    /// The bench page, in a session signed in with the approver client's token.
    Page,
}

impl Via {
    pub fn as_str(self) -> &'static str {
        match self {
            Via::Mcp => "mcp",
            Via::Page => "page",
        }
    }
}

/// A decision: how, by whom, with what note, when.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Decision {
    pub outcome: Outcome,
    /// The approver (a configured client's name), for an approval or a denial.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// How the approver decided (`mcp`, `page`), for an approval or a denial.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub via: Option<Via>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    #[schemars(with = "String")]
    pub at: DateTime<Utc>,
    /// From the request to the decision.
    pub after_ms: u64,
}

/// A request waiting (or decided); shared by the registry and the call that waits.
#[derive(Debug)]
pub struct Request {
    pub id: ApprovalId,
    pub spec: NewRequest,
    pub since: DateTime<Utc>,
    pub(super) since_instant: Instant,
    pub deadline: DateTime<Utc>,
    pub(super) deadline_instant: Instant,
    pub(super) decided: watch::Sender<Option<Decision>>,
}

impl Request {
    /// The decision, once there is one.
    pub fn decision(&self) -> Option<Decision> {
        self.decided.borrow().clone()
    }

    /// When it expires (for a waiter's timer).
    pub fn deadline_instant(&self) -> Instant {
        self.deadline_instant
    }

    /// A copy for a resource, the page or a tool's answer.
    pub fn view(&self) -> RequestView {
        RequestView {
            id: self.id.clone(),
            client: self.spec.client.clone(),
            note: self.spec.note.clone(),
            tool: self.spec.tool.clone(),
            what: self.spec.what.clone(),
            argv: self.spec.argv.clone(),
            board: self.spec.board.clone(),
            holder: self.spec.holder.clone(),
            files: self.spec.files.clone(),
            rule: self.spec.rule.clone(),
            approvers: self.spec.approvers.names(),
            answers_for: match &self.spec.approvers {
                Approvers::Person { client, .. } => Some(client.clone()),
                _ => None,
            },
            since: self.since,
            deadline: self.deadline,
            job: self.spec.job.clone(),
            decision: self.decision(),
        }
    }
}

/// A request as shown: `gatecmd://approvals`, the page, `approve`/`deny` answers. Field
/// names are part of the interface (docs/APPROVALS.md).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct RequestView {
    pub id: ApprovalId,
    /// The requesting client.
    pub client: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// `execute_command` or the built-in tool asked for.
    pub tool: String,
    /// What will run, in one line.
    pub what: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub argv: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub board: Option<String>,
    /// Who holds the board's lease now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// Each file argument's SHA-256 and size when the request was made.
    pub files: Vec<FileDigest>,
    pub rule: String,
    /// Client names that may decide: the rule's approvers, or for `by: requester` the
    /// person who answers for the requesting client (`clients[].person`).
    pub approvers: Vec<String>,
    /// `by: requester`: the client the approver answers for (the requester).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answers_for: Option<String>,
    #[schemars(with = "String")]
    pub since: DateTime<Utc>,
    #[schemars(with = "String")]
    pub deadline: DateTime<Utc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_is_serialised_by_its_name() {
        assert_eq!(Outcome::ALL.len(), 6);
        for &o in Outcome::ALL {
            assert_eq!(serde_json::to_value(o).ok(), Some(o.as_str().into()));
        }
    }
}
