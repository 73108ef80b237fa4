//! The audit lines of approvals (docs/AUDIT.md): a request made (what exactly will run,
//! under which rule, for whom), and its decision (outcome, approver, note, time to decide).
//! Plain data: the log imports no tool type.

use serde::Serialize;

use crate::approvals::{Decision, FileDigest, RequestView};

/// One approval event; serialised with `"event": "approval_…"`.
#[derive(Debug, Serialize)]
#[serde(tag = "event")]
pub enum ApprovalRecord<'a> {
    #[serde(rename = "approval_requested")]
    Requested {
        /// The requesting client.
        client: &'a str,
        approval: &'a str,
        tool: &'a str,
        what: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        board: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        holder: Option<&'a str>,
        files: &'a [FileDigest],
        rule: &'a str,
        approvers: &'a [String],
        /// `by: requester`: the client the approver answers for.
        #[serde(skip_serializing_if = "Option::is_none")]
        answers_for: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        note: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        job: Option<&'a str>,
    },
    #[serde(rename = "approval_decided")]
    Decided {
        /// The requesting client.
        client: &'a str,
        approval: &'a str,
        what: &'a str,
        /// `approved`, `denied`, `expired`, `withdrawn` or `lease_ended`.
        outcome: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        by: Option<&'a str>,
        /// How the approver decided: `page` or `mcp` (docs/APPROVALS.md).
        #[serde(skip_serializing_if = "Option::is_none")]
        via: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        note: Option<&'a str>,
        /// From the request to the decision.
        after_ms: u64,
    },
    /// An approved request refused at run time: what was approved changed.
    #[serde(rename = "approval_binding_failed")]
    BindingFailed {
        client: &'a str,
        approval: &'a str,
        why: &'a str,
    },
}

impl<'a> ApprovalRecord<'a> {
    pub fn requested(v: &'a RequestView) -> Self {
        ApprovalRecord::Requested {
            client: &v.client,
            approval: &v.id.0,
            tool: &v.tool,
            what: &v.what,
            board: v.board.as_deref(),
            holder: v.holder.as_deref(),
            files: &v.files,
            rule: &v.rule,
            approvers: &v.approvers,
            answers_for: v.answers_for.as_deref(),
            note: v.note.as_deref(),
            job: v.job.as_deref(),
        }
    }

    pub fn decided(v: &'a RequestView, d: &'a Decision) -> Self {
        ApprovalRecord::Decided {
            client: &v.client,
            approval: &v.id.0,
            what: &v.what,
            outcome: d.outcome.as_str(),
            by: d.by.as_deref(),
            via: d.via.map(|v| v.as_str()),
            note: d.note.as_deref(),
            after_ms: d.after_ms,
        }
    }
}
