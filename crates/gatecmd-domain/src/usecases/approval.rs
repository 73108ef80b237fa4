//! Holding a call for an approver's yes (docs/APPROVALS.md), for every surface and every
//! gated action: the request opened and audited (made for the person who answers for the
//! client under `by: requester`), the wait for its decision (an approver's, its expiry, the
//! end of the lease it was made under, its withdrawal; audited once), an approver's
//! decision ([`decide`]: the `approve`/`deny` tools, which `gatecmd approve` calls, and the
//! bench page), the refusal a decision other than yes becomes, and each file argument's
//! digest for the approver and its re-check through the descriptor the child will get. The
//! MCP surface re-exports these (`calls::approvals`) beside what is its own: the progress
//! line, the elicitation pointing a person at the request, the `approve`/`deny` answers.

use std::sync::Arc;
use std::time::Duration;

use gatecmd_core::metrics;
use gatecmd_core::refusal::{Refusal, RefusalReason};
use tokio_util::sync::CancellationToken;

use crate::approvals::{
    ApprovalError, Decision, FileDigest, NewRequest, Outcome, Request, RequestView, Via,
};
use crate::audit::ApprovalRecord;
use crate::config::Approvers;
use crate::locks::{LeaseId, LockKey};
use crate::state::AppState;

/// How often a waiting request checks that the lease it was made under still holds.
const LEASE_CHECK: Duration = Duration::from_secs(1);

/// The class of an approval refusal. Exhaustive on purpose.
pub fn approval_reason(e: &ApprovalError) -> RefusalReason {
    match e {
        ApprovalError::Unknown { .. } => RefusalReason::NotFound,
        ApprovalError::NotAnApprover { .. }
        | ApprovalError::OwnRequest { .. }
        | ApprovalError::RequesterOnly { .. } => RefusalReason::NotAnApprover,
        ApprovalError::TooMany { .. } | ApprovalError::NoteTooLong { .. } => RefusalReason::Limit,
    }
}

/// An approval refusal with its message.
pub fn approval_refusal(e: &ApprovalError) -> Refusal {
    Refusal::from_error(approval_reason(e), e)
}

/// The lease a request was made under: the request ends when it does.
pub struct LeaseWatch {
    pub key: LockKey,
    pub lease: LeaseId,
}

impl LeaseWatch {
    /// The lease the caller presented, on the first of `keys` it holds now.
    pub fn find(state: &AppState, keys: &[LockKey], lease: Option<&LeaseId>) -> Option<Self> {
        let lease = lease?;
        keys.iter()
            .find(|k| {
                state
                    .locks
                    .key_state(k)
                    .and_then(|s| s.lease)
                    .is_some_and(|l| &l.lease_id == lease)
            })
            .map(|k| LeaseWatch {
                key: k.clone(),
                lease: lease.clone(),
            })
    }

    fn holds(&self, state: &AppState) -> bool {
        state
            .locks
            .key_state(&self.key)
            .and_then(|s| s.lease)
            .is_some_and(|l| l.lease_id == self.lease)
    }
}

/// Who holds a board's lease now, for the approver's eyes.
pub fn board_holder(state: &AppState, board: &str) -> Option<String> {
    let key = LockKey::Board(board.to_string());
    let s = state.locks.key_state(&key)?;
    s.lease
        .map(|l| l.holder.0)
        .or_else(|| s.running.map(|r| r.client.0))
}

/// The person who answers `by: requester` requests of `client` (`clients[].person`), or
/// the refusal saying what the operator must configure.
pub fn person_for(
    state: &AppState,
    client: &str,
    what: &str,
    rule: &str,
) -> Result<String, Refusal> {
    match state.config().persons.get(client) {
        Some(p) => Ok(p.clone()),
        None => Err(Refusal::new(
            RefusalReason::ApprovalUnavailable,
            format!(
                "{what} must be approved by the person who answers for client {client} ({rule}: \
                 by: requester), and the server's configuration names nobody for {client}; \
                 nothing ran. The operator sets `person:` on client {client} in `clients:` (a \
                 configured client whose token only that person holds; docs/APPROVALS.md), or \
                 names approvers in the rule"
            ),
        )),
    }
}

/// Makes a pending request and audits it. A `by: requester` rule's request is made for the
/// person who answers for the requesting client (refused `approval_unavailable` when the
/// configuration names nobody).
pub fn open(state: &AppState, mut spec: NewRequest) -> Result<Arc<Request>, Refusal> {
    if spec.approvers == Approvers::Requester {
        let person = person_for(state, &spec.client, &spec.what, &spec.rule)?;
        spec.approvers = Approvers::Person {
            client: spec.client.clone(),
            person,
        };
    }
    let req = state
        .approvals
        .request(spec)
        .map_err(|e| approval_refusal(&e))?;
    let v = req.view();
    state.audit.record(&ApprovalRecord::requested(&v));
    metrics::approval_requested();
    tracing::info!(client = %v.client, approval = %v.id, what = %v.what, rule = %v.rule, "approval requested");
    Ok(req)
}

/// Waits for `req`'s decision: an approver's, its expiry, the end of the lease it was made
/// under, or `cancel` (its requester withdrew it). The decision is audited here, once.
pub async fn await_decision(
    state: &AppState,
    req: &Request,
    lease: Option<&LeaseWatch>,
    cancel: &CancellationToken,
) -> Decision {
    let mut check = tokio::time::interval(LEASE_CHECK);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let wait = state.approvals.wait(req);
    tokio::pin!(wait);
    let d = loop {
        tokio::select! {
            d = &mut wait => break d,
            _ = cancel.cancelled() => {
                if let Some(d) = state.approvals.end(req, Outcome::Withdrawn, None, None) {
                    break d;
                }
            }
            _ = check.tick(), if lease.is_some() => {
                if lease.is_some_and(|l| !l.holds(state))
                    && let Some(d) = state.approvals.end(req, Outcome::LeaseEnded, None, None)
                {
                    break d;
                }
            }
        }
        // Another decision came first: it is what the channel holds.
        if let Some(d) = req.decision() {
            break d;
        }
    };
    let v = req.view();
    state.audit.record(&ApprovalRecord::decided(&v, &d));
    metrics::approval_decided(d.outcome.as_str());
    tracing::info!(client = %v.client, approval = %v.id, outcome = d.outcome.as_str(), by = ?d.by, after_ms = d.after_ms, "approval decided");
    d
}

/// `by` approves or denies request `id` with `note` `via` MCP (an approver client's tool
/// call, the host's CLI through the `approve`/`deny` tools) or the bench page (a signed-in
/// approver): the one decision every surface calls. Checked against the request's
/// approvers (a refusal audited here); the waiting call audits the decision and acts on it.
pub fn decide(
    state: &AppState,
    by: &str,
    via: Via,
    id: &str,
    approve: bool,
    note: Option<String>,
) -> Result<(RequestView, Decision), Refusal> {
    state
        .approvals
        .decide(id, by, via, approve, note)
        .map_err(|e| {
            let r = approval_refusal(&e);
            state.audit.execute_refused(
                &crate::audit::ExecuteCall::new(by, None, if approve { "approve" } else { "deny" }),
                &[id.to_string()],
                r.reason.as_str(),
                &r.message,
            );
            r
        })
}

/// The refusal a decision other than yes becomes (`None` for a yes).
pub fn decision_refusal(v: &RequestView, d: &Decision) -> Option<Refusal> {
    let note = d
        .note
        .as_deref()
        .map(|n| format!(" Note: {n}"))
        .unwrap_or_default();
    let (reason, message) = match d.outcome {
        Outcome::Approved => return None,
        Outcome::Denied => (
            RefusalReason::ApprovalDenied,
            format!(
                "{} denied approval request {} for {}; nothing ran.{note}",
                d.by.as_deref().unwrap_or("an approver"),
                v.id,
                v.what
            ),
        ),
        Outcome::Expired => (
            RefusalReason::ApprovalExpired,
            format!(
                "nobody decided approval request {} for {} within its rule's timeout \
                 ({}; approvers: {}); nothing ran. Call again when an approver is around",
                v.id,
                v.what,
                v.rule,
                v.approvers.join(", ")
            ),
        ),
        Outcome::Withdrawn => (
            RefusalReason::ApprovalEnded,
            format!(
                "approval request {} for {} was withdrawn by its requester; nothing ran.{note}",
                v.id, v.what
            ),
        ),
        Outcome::Unavailable => (
            RefusalReason::ApprovalUnavailable,
            format!(
                "approval request {} for {} has nobody who can decide it; nothing ran.{note}",
                v.id, v.what
            ),
        ),
        Outcome::LeaseEnded => (
            RefusalReason::ApprovalEnded,
            format!(
                "the lease approval request {} was made under ended before a decision; \
                 nothing ran. Take the lease again and call again",
                v.id
            ),
        ),
    };
    Some(Refusal::new(reason, message))
}

/// Re-hashes the files of an approved request through the descriptors the child will get:
/// the first that changed (or cannot be read), in words.
pub fn files_changed(
    approved: &[FileDigest],
    now: &[(String, Arc<std::os::fd::OwnedFd>)],
) -> Option<String> {
    use std::os::fd::AsFd;
    let mut current = Vec::new();
    for (path, fd) in now {
        match crate::approvals::files::digest_fd(fd.as_fd()) {
            Ok(Some((sha256, size))) => current.push(FileDigest {
                path: path.clone(),
                sha256,
                size,
            }),
            Ok(None) => {}
            Err(e) => return Some(format!("{path} cannot be read again: {e}")),
        }
    }
    if current.len() != approved.len() {
        return Some("the file arguments are not the ones approved".to_string());
    }
    approved.iter().zip(&current).find_map(|(a, c)| {
        (a != c).then(|| {
            format!(
                "{} changed since it was approved: SHA-256 {} ({} bytes) approved, {} ({} bytes) now",
                a.path, a.sha256, a.size, c.sha256, c.size
            )
        })
    })
}

/// Hashes file arguments for a new request (`None` for an output's directory).
pub fn hash_files(
    files: &[(String, Arc<std::os::fd::OwnedFd>)],
) -> Result<Vec<FileDigest>, Refusal> {
    use std::os::fd::AsFd;
    let mut out = Vec::new();
    for (path, fd) in files {
        match crate::approvals::files::digest_fd(fd.as_fd()) {
            Ok(Some((sha256, size))) => out.push(FileDigest {
                path: path.clone(),
                sha256,
                size,
            }),
            Ok(None) => {}
            Err(e) => {
                return Err(Refusal::new(
                    RefusalReason::IoError,
                    format!("{path} could not be hashed for the approval request: {e}"),
                ));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approvals::Via;

    #[test]
    fn a_file_rewritten_after_hashing_is_named_with_both_digests() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("u-boot.img");
        std::fs::write(&p, b"approved bytes").expect("write");
        let fd: Arc<std::os::fd::OwnedFd> = Arc::new(std::fs::File::open(&p).expect("open").into());
        let files = vec![(p.display().to_string(), fd)];
        let approved = hash_files(&files).expect("hashed");
        assert_eq!(approved[0].size, 14);
        assert_eq!(files_changed(&approved, &files), None, "unchanged");
        std::fs::write(&p, b"other bytes!!!").expect("rewrite in place");
        let why = files_changed(&approved, &files).expect("changed");
        assert!(why.contains(&approved[0].sha256), "{why}");
        assert!(
            why.contains("u-boot.img changed since it was approved"),
            "{why}"
        );
    }

    #[test]
    fn only_a_yes_is_no_refusal() {
        let a = crate::approvals::Approvals::default();
        let spec = NewRequest {
            client: "agent".into(),
            note: None,
            tool: "execute_command".into(),
            what: "/usr/bin/rkdeveloptool ef".into(),
            argv: None,
            board: None,
            holder: None,
            files: vec![],
            rule: "approvals[0] (command rkdeveloptool)".into(),
            approvers: crate::config::Approvers::Clients(vec!["ops".into()]),
            timeout: Duration::from_secs(60),
            job: None,
        };
        let r = a.request(spec).expect("made");
        let (v, d) = a
            .decide(
                &r.id.0,
                "ops",
                Via::Mcp,
                false,
                Some("not at 3 a.m.".into()),
            )
            .expect("denied");
        let refused = decision_refusal(&v, &d).expect("a refusal");
        assert_eq!(refused.reason, RefusalReason::ApprovalDenied);
        assert!(
            refused.message.contains("ops denied"),
            "{}",
            refused.message
        );
        assert!(
            refused.message.contains("not at 3 a.m."),
            "{}",
            refused.message
        );
        let mut yes = d.clone();
        yes.outcome = Outcome::Approved;
        assert!(decision_refusal(&v, &yes).is_none());
        let mut expired = d;
        expired.outcome = Outcome::Expired;
        assert_eq!(
            decision_refusal(&v, &expired).map(|r| r.reason),
            Some(RefusalReason::ApprovalExpired)
        );
    }
}
