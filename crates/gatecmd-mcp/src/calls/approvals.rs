//! Approvals on the MCP surface (docs/APPROVALS.md): what every gated tool shares — the
//! wait for a decision (expiry, lease end, withdrawal, audited once), the refusal a decision
//! other than yes becomes (the domain's, `gatecmd_domain::usecases::approval`, re-exported
//! here), the progress line saying who is awaited, the elicitation pointing a person at a
//! request, and the `approve`/`deny` tools' call ([`decide_call`]) over the domain's
//! decision (`usecases::approval::decide`, which the bench page calls too; the host CLI's
//! `gatecmd approve` calls the `approve` tool).
//!
//! `by: requester` is answered by a person, never by the requesting client: the request
//! is made for the client's `person` (a configured client whose token only that person
//! holds), who decides on the bench page, with `gatecmd approve` or the `approve` tool. The
//! requesting client is only told where (an MCP URL-mode elicitation pointing at the
//! request on the page); its answer to that elicitation approves nothing.

use std::sync::Arc;
use std::time::Duration;

use rmcp::RoleServer;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::Peer;

use gatecmd_core::identity::LocalAddr;
use gatecmd_core::metrics;
use gatecmd_core::refusal::Refusal;
use gatecmd_domain::approvals::{NewRequest, Outcome, Request, RequestView, Via};
use gatecmd_domain::audit::ApprovalRecord;
use gatecmd_domain::config::Approvers;
use gatecmd_domain::state::AppState;

/// How often a waiting call tells its client who it waits for (a progress notification),
/// so that clients resetting their timeout on progress keep waiting.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(5);

pub use gatecmd_domain::usecases::approval::{
    LeaseWatch, approval_reason, approval_refusal, await_decision, board_holder, decide,
    decision_refusal, files_changed, hash_files, open, person_for,
};

/// The progress line of a waiting call.
pub fn waiting_line(v: &RequestView) -> String {
    let person = v.answers_for.as_ref().map(|c| {
        format!(
            " (who answers for {c}: on the bench page at /approval/{}, or gatecmd approve)",
            v.id
        )
    });
    format!(
        "awaiting approval {} by {}{} for {} (until {}){}",
        v.id,
        v.approvers.join(", "),
        person.unwrap_or_default(),
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

/// Tells a foreground call waiting on an approval's job, every few seconds, what it waits
/// for: who must approve, then (approved) the job's state. Stops when dropped (the call
/// answered or went away); `None` without a progress token.
pub fn tell_job_waiting(
    ctx: &rmcp::service::RequestContext<RoleServer>,
    job: &Arc<gatecmd_domain::jobs::Job>,
    v: &RequestView,
) -> Option<AbortOnDrop> {
    use gatecmd_domain::jobs::JobState;
    let token = ctx.meta.get_progress_token()?;
    let (peer, job, line) = (ctx.peer.clone(), job.clone(), waiting_line(v));
    Some(AbortOnDrop(tokio::spawn(async move {
        let mut tick = tokio::time::interval(PROGRESS_EVERY);
        let mut n = 0.0;
        loop {
            tick.tick().await;
            n += 1.0;
            let message = match job.state() {
                JobState::AwaitingApproval => line.clone(),
                s => format!("approved; job {} {}", job.id, s.as_str()),
            };
            let p = ProgressNotificationParam::new(token.clone(), n).with_message(message);
            if peer.notify_progress(p).await.is_err() {
                return;
            }
        }
    })))
}

/// The answer of `approve` and `deny`. Field names are part of the interface
/// (docs/TOOLS.md).
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
#[schemars(transform = crate::calls::answer::or_refusal)]
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
    match decide(state, &who.name, Via::Mcp, &req.approval, approve, req.note) {
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
            crate::calls::answer::structured(&DecisionResult { request: view }, text)
        }
        Err(r) => crate::calls::answer::refusal(r),
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
    wait_in_call_for_id(state, spec, lease, ctx).await.map(drop)
}

/// As [`wait_in_call`], answering the request's id (`apr-N`) on a yes: for a caller whose
/// audit line names the approval (flash_board).
pub async fn wait_in_call_for_id(
    state: &AppState,
    spec: NewRequest,
    lease: Option<LeaseWatch>,
    ctx: &rmcp::service::RequestContext<RoleServer>,
) -> Result<String, Refusal> {
    let req = open(state, spec)?;
    let _withdraw = WithdrawOnDrop { state, req: &req };
    tell_person(state, ctx, &req);
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
        None => Ok(view.id.0.clone()),
        Some(r) => Err(r),
    }
}

/// Aborts a task when dropped.
pub struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Where the bench page shows request `id`: the host name the calling client reached the
/// server by (its `Host`, which the guard checked against the Host policy) and the port of
/// the listener the request arrived on — never the port the `Host` header names, which is
/// the client's to choose (issue 46: `Host: 127.0.0.1:6666` sent the person to a port any
/// local process or VM forwarding could serve). `None` without an HTTP request (stdio),
/// without the listener's address, or with the page off.
pub fn page_url(
    state: &AppState,
    ctx: &rmcp::service::RequestContext<RoleServer>,
    id: &str,
) -> Option<String> {
    if !state.config().page.enabled {
        return None;
    }
    let parts = ctx.extensions.get::<http::request::Parts>()?;
    let host = parts.headers.get(http::header::HOST)?.to_str().ok()?;
    let LocalAddr(local) = parts.extensions.get::<LocalAddr>()?;
    Some(format!(
        "http://{}:{}/approval/{id}",
        host_name(host)?,
        local.port()
    ))
}

/// The name part of a `Host` value (`10.0.2.2:9222` → `10.0.2.2`, `[::1]:1` → `[::1]`);
/// `None` for anything that is not a plain host (a path, user info, spaces).
fn host_name(host: &str) -> Option<&str> {
    if host.is_empty() || host.contains(['/', '@', '?', '#', ' ', '\\']) {
        return None;
    }
    let name = match host.strip_prefix('[') {
        Some(rest) => &host[..rest.find(']')? + 2],
        None => host.split(':').next()?,
    };
    (!name.is_empty()).then_some(name)
}

/// For a `by: requester` request: tells the requesting client's user where the person who
/// answers for the client decides it — an MCP URL-mode elicitation pointing at the request
/// on the bench page, when the client declared URL elicitation on a 2025-11-25 session.
/// Its answer decides nothing (the agent's process can give it): accept only says the user
/// was shown the link; decline or cancel withdraws the request, as the requester may. Once
/// the request is decided the client is sent `notifications/elicitation/complete`. Any
/// other client is told through the waiting line; the person decides all the same.
pub fn tell_person(
    state: &AppState,
    ctx: &rmcp::service::RequestContext<RoleServer>,
    req: &Arc<Request>,
) {
    use rmcp::model::{ElicitRequestParams, ElicitationAction};
    use rmcp::service::ElicitationMode;
    let Approvers::Person { client, person } = &req.spec.approvers else {
        return;
    };
    if !(ctx.peer.supported_elicitation_modes()).contains(&ElicitationMode::Url) {
        return;
    }
    let Some(url) = page_url(state, ctx, &req.id.0) else {
        return;
    };
    let mut message = format!(
        "gatecmd holds {} for approval by {person}, the person who answers for {client}. \
         {person} decides on gatecmd's bench page: open {url} and sign in with {person}'s own \
         token. Answering this prompt approves nothing",
        req.spec.what
    );
    if let Some(b) = &req.spec.board {
        message.push_str(&format!(" (board {b})"));
    }
    let (approvals, peer, req) = (state.approvals.clone(), ctx.peer.clone(), req.clone());
    tokio::spawn(async move {
        let id = req.id.0.clone();
        let left = req
            .deadline_instant()
            .saturating_duration_since(std::time::Instant::now());
        let params = ElicitRequestParams::UrlElicitationParams {
            meta: None,
            message,
            url,
            elicitation_id: id.clone(),
        };
        let asked = tokio::select! {
            r = peer.create_elicitation_with_timeout(params, Some(left)) => r,
            d = approvals.wait(&req) => {
                tracing::debug!(approval = %id, outcome = d.outcome.as_str(), "decided before the client answered its elicitation");
                return;
            }
        };
        match asked.map(|r| r.action) {
            Ok(ElicitationAction::Accept) => {
                approvals.wait(&req).await;
                let done = rmcp::model::CustomNotification::new(
                    "notifications/elicitation/complete",
                    Some(serde_json::json!({ "elicitationId": id })),
                );
                let _ = peer
                    .send_notification(rmcp::model::ServerNotification::CustomNotification(done))
                    .await;
            }
            Ok(_) => {
                // Decline, cancel: the requester's side said no; that withdraws, it is no
                // person's denial.
                approvals.end(
                    &req,
                    Outcome::Withdrawn,
                    None,
                    Some("declined in the requesting client".to_string()),
                );
            }
            Err(e) => {
                tracing::info!(approval = %id, error = %e, "the client did not answer its URL elicitation; the person decides on the page all the same");
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::host_name;

    #[test]
    fn the_link_keeps_the_host_name_and_drops_the_callers_port() {
        assert_eq!(host_name("127.0.0.1:6666"), Some("127.0.0.1"));
        assert_eq!(host_name("10.0.2.2"), Some("10.0.2.2"));
        assert_eq!(host_name("[::1]:6666"), Some("[::1]"));
        assert_eq!(host_name("bench.lab:9222"), Some("bench.lab"));
        for bad in ["", "evil.com/x", "a@b", "a b", ":9222", "[::1"] {
            assert_eq!(host_name(bad), None, "{bad:?}");
        }
    }
}
