//! Approvals on the MCP surface (docs/APPROVALS.md): what every gated tool shares — the
//! wait for a decision (expiry, lease end, withdrawal, audited once), the refusal a decision
//! other than yes becomes, the progress line saying who is awaited, and a decision taken by
//! an approver (the `approve`/`deny` tools, the bench page and the host CLI all go through
//! [`decide`]).

use std::sync::Arc;
use std::time::Duration;

use rmcp::RoleServer;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::Peer;
use tokio_util::sync::CancellationToken;

use gatecmd_core::metrics;
use gatecmd_core::refusal::{Refusal, RefusalReason};
use gatecmd_domain::approvals::{
    ApprovalError, Decision, FileDigest, NewRequest, Outcome, Request, RequestView,
};
use gatecmd_domain::audit::ApprovalRecord;
use gatecmd_domain::locks::{LeaseId, LockKey};
use gatecmd_domain::state::AppState;

/// How often a waiting call tells its client who it waits for (a progress notification),
/// so that clients resetting their timeout on progress keep waiting.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(5);
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

/// Makes a pending request and audits it.
pub fn open(state: &AppState, spec: NewRequest) -> Result<Arc<Request>, Refusal> {
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
                "approval request {} for {} was withdrawn by its requester; nothing ran",
                v.id, v.what
            ),
        ),
        Outcome::Unavailable => (
            RefusalReason::ApprovalUnavailable,
            format!(
                "approval request {} for {} asks your client's user (by: requester), and your \
                 client could not ask them; nothing ran.{note}",
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

/// The progress line of a waiting call.
pub fn waiting_line(v: &RequestView) -> String {
    format!(
        "awaiting approval {} by {} for {} (until {}){}",
        v.id,
        v.approvers.join(", "),
        v.what,
        v.deadline.to_rfc3339(),
        v.job
            .as_ref()
            .map(|j| format!("; job {j} (wait_job follows it)"))
            .unwrap_or_default()
    )
}

/// Sends the waiting line to a call's progress token now and then until dropped.
pub async fn tell_waiting(peer: Peer<RoleServer>, token: ProgressToken, v: RequestView) {
    let mut tick = tokio::time::interval(PROGRESS_EVERY);
    let mut n = 0.0;
    loop {
        tick.tick().await;
        n += 1.0;
        let p = ProgressNotificationParam::new(token.clone(), n).with_message(waiting_line(&v));
        if peer.notify_progress(p).await.is_err() {
            return;
        }
    }
}

/// `by` approves or denies request `id` with `note` (an approver client over MCP, a
/// signed-in approver on the page, the host's CLI): checked against the request's
/// approvers; the waiting call audits the decision and acts on it.
pub fn decide(
    state: &AppState,
    by: &str,
    id: &str,
    approve: bool,
    note: Option<String>,
) -> Result<(RequestView, Decision), Refusal> {
    state.approvals.decide(id, by, approve, note).map_err(|e| {
        let r = approval_refusal(&e);
        state.audit.execute_refused(
            &gatecmd_domain::audit::ExecuteCall::new(
                by,
                None,
                if approve { "approve" } else { "deny" },
            ),
            &[id.to_string()],
            r.reason.as_str(),
            &r.message,
        );
        r
    })
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
        match gatecmd_domain::approvals::files::digest_fd(fd.as_fd()) {
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
        match gatecmd_domain::approvals::files::digest_fd(fd.as_fd()) {
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

/// The answer of `approve` and `deny`. Field names are part of the interface
/// (docs/TOOLS.md).
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
#[schemars(transform = crate::answer::or_refusal)]
pub struct DecisionResult {
    /// The request, as it was shown, with its decision.
    pub request: RequestView,
}

/// Arguments of `approve` and `deny`.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionRequest {
    /// The approval request's id (`apr-N`, from gatecmd://approvals).
    pub approval: String,
    /// Why; shown to the requester and kept in the audit log. At most 1024 bytes.
    #[serde(default)]
    pub note: Option<String>,
}

/// `approve`/`deny` for the calling client: the decision, or why it may not decide.
pub fn decide_call(
    state: &AppState,
    who: &gatecmd_core::identity::ClientIdentity,
    req: DecisionRequest,
    approve: bool,
) -> rmcp::model::CallToolResult {
    match decide(state, &who.name, &req.approval, approve, req.note) {
        Ok((mut view, d)) => {
            let text = format!(
                "{} {}: {}{}\n",
                view.id,
                d.outcome.as_str(),
                view.what,
                d.note
                    .as_deref()
                    .map(|n| format!(" (note: {n})"))
                    .unwrap_or_default()
            );
            view.decision = Some(d);
            crate::answer::structured(&DecisionResult { request: view }, text)
        }
        Err(r) => crate::answer::refusal(r),
    }
}

/// Withdraws a request whose waiting call went away undecided (rmcp dropped the call's
/// future: the client's connection is gone), audited like any decision.
struct WithdrawOnDrop<'a> {
    state: &'a AppState,
    req: &'a Request,
}

impl Drop for WithdrawOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(d) = (self.state.approvals).end(self.req, Outcome::Withdrawn, None, None) {
            let v = self.req.view();
            self.state.audit.record(&ApprovalRecord::decided(&v, &d));
            metrics::approval_decided(d.outcome.as_str());
        }
    }
}

/// A built-in tool's call that waits in the call itself (`power_board`): makes the request,
/// tells the client who it waits for every few seconds, and returns once decided: `Ok`
/// for a yes, the refusal otherwise. The client cancelling the call (or going away)
/// withdraws the request.
pub async fn wait_in_call(
    state: &AppState,
    spec: NewRequest,
    lease: Option<LeaseWatch>,
    ctx: &rmcp::service::RequestContext<RoleServer>,
) -> Result<(), Refusal> {
    let requester = spec.approvers == gatecmd_domain::config::Approvers::Requester;
    if requester && !can_elicit(&ctx.peer) {
        return Err(cannot_elicit(&spec.what, &spec.rule));
    }
    let req = open(state, spec)?;
    let _withdraw = WithdrawOnDrop { state, req: &req };
    if requester {
        ask_requester(state.approvals.clone(), ctx.peer.clone(), req.clone());
    }
    let view = req.view();
    let telling = ctx.meta.get_progress_token().map(|t| {
        AbortOnDrop(tokio::spawn(tell_waiting(
            ctx.peer.clone(),
            t,
            view.clone(),
        )))
    });
    let d = await_decision(state, &req, lease.as_ref(), &ctx.ct).await;
    drop(telling);
    match decision_refusal(&view, &d) {
        None => Ok(()),
        Some(r) => Err(r),
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Whether the calling client can be asked for a `by: requester` approval: it declared
/// MCP elicitation (form mode) when it initialized. A 2026-07-28 stateless client has no
/// session to be asked on: it cannot.
pub fn can_elicit(peer: &Peer<RoleServer>) -> bool {
    peer.peer_info().is_some_and(|i| {
        i.capabilities
            .elicitation
            .as_ref()
            .is_some_and(|e| e.form.is_some() || e.url.is_none())
    })
}

/// The refusal of a `by: requester` call whose client cannot be asked.
pub fn cannot_elicit(what: &str, rule: &str) -> Refusal {
    Refusal::new(
        RefusalReason::ApprovalUnavailable,
        format!(
            "{what} needs your client's user to approve it ({rule}: by: requester), asked \
             through MCP elicitation, and your client did not declare elicitation (form mode) \
             on a 2025-11-25 session; nothing ran. Use a client that supports elicitation, or \
             ask the operator for a rule with named approvers"
        ),
    )
}

/// Asks the requesting client's user, through MCP elicitation (form mode), whether `req`
/// may run, and decides it by the answer: `approve: true` approves, anything else denies;
/// a client that fails to ask ends it `unavailable`. The approver is recorded as the
/// client's user.
pub fn ask_requester(
    approvals: gatecmd_domain::approvals::Approvals,
    peer: Peer<RoleServer>,
    req: Arc<Request>,
) {
    use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema};
    tokio::spawn(async move {
        let v = req.view();
        let mut message = format!("gatecmd asks you to approve {}: {}", v.id, v.what);
        if let Some(b) = &v.board {
            message.push_str(&format!(" on board {b}"));
        }
        for f in &v.files {
            message.push_str(&format!(
                "; {} ({} bytes, SHA-256 {})",
                f.path, f.size, f.sha256
            ));
        }
        if let Some(n) = &v.note {
            message.push_str(&format!(". The agent says: {n}"));
        }
        let schema = ElicitationSchema::builder()
            .required_bool("approve")
            .optional_string("note")
            .build_unchecked();
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message,
            requested_schema: schema,
        };
        let left = req
            .deadline_instant()
            .saturating_duration_since(std::time::Instant::now());
        let by = Some(format!("{} (its user, by elicitation)", v.client));
        let (outcome, who, note) = match peer
            .create_elicitation_with_timeout(params, Some(left))
            .await
        {
            Ok(r) => {
                let content = r.content.unwrap_or_default();
                let note = content["note"].as_str().map(str::to_string);
                let yes = content["approve"].as_bool() == Some(true);
                match r.action {
                    ElicitationAction::Accept if yes => (Outcome::Approved, by, note),
                    ElicitationAction::Accept => (Outcome::Denied, by, note),
                    // Decline, Cancel, and whatever a later revision adds: no yes.
                    _ => (
                        Outcome::Denied,
                        by,
                        note.or_else(|| Some("declined in the client".to_string())),
                    ),
                }
            }
            Err(e) => (
                Outcome::Unavailable,
                None,
                Some(format!("the client did not answer the elicitation: {e}")),
            ),
        };
        // A decision that came first (expiry, withdrawal) stands.
        approvals.end(&req, outcome, who, note);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let a = gatecmd_domain::approvals::Approvals::default();
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
            approvers: gatecmd_domain::config::Approvers::Clients(vec!["ops".into()]),
            timeout: Duration::from_secs(60),
            job: None,
        };
        let r = a.request(spec).expect("made");
        let (v, d) = a
            .decide(&r.id.0, "ops", false, Some("not at 3 a.m.".into()))
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
