//! `execute_command`'s approval round trip on the MCP surface (docs/APPROVALS.md). The
//! command use case holds the call in a job and runs it once approved
//! (`gatecmd_domain::usecases::command::approval`); here, with the shared
//! `crate::calls::approvals`, each file argument is hashed for the approver, the request
//! opened and a person pointed at it, the call answered with the job or waiting on it
//! (its client told whom it waits for), and the decision awaited. A client that gives up
//! leaves the request and its job (list_jobs and wait_job find them).

use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::model::CallToolResponse;
use rmcp::service::RequestContext;

use crate::calls::answer::{refusal, structured};
use crate::calls::approvals::{self, LeaseWatch};
use crate::calls::jobs;
use gatecmd_domain::approvals::Request;
use gatecmd_domain::config::{ApprovalRule, Approvers};
use gatecmd_domain::jobs::Origin;
use gatecmd_domain::state::AppState;
use gatecmd_domain::usecases::command::approval::{self as held, Approved, Holding};
use gatecmd_domain::usecases::command::{Ask, Call, Prepared, origin, shell_words};

use super::interface::ExecuteResult;

/// A call a rule holds: the call, as asked (to be checked again), its note, the rule.
pub(super) struct Asked<'a> {
    pub call: Call<'a>,
    pub again: Ask,
    pub note: Option<String>,
    pub rule: &'a ApprovalRule,
}

/// Opens the request and its job, starts the job's task, and answers (or waits).
pub(super) async fn ask(
    state: &Arc<AppState>,
    asked: Asked<'_>,
    prepared: &Prepared<'_>,
    mut result: ExecuteResult,
    ctx: &RequestContext<RoleServer>,
    task: bool,
) -> CallToolResponse {
    let Asked {
        call,
        again,
        note,
        rule,
    } = asked;
    let who = call.who;
    // `by: requester` with nobody configured to answer for this client: refused before
    // anything waits.
    if rule.by == Approvers::Requester {
        let what = shell_words(&result.argv);
        if let Err(r) = approvals::person_for(state, &who.name, &what, &rule.describe()) {
            let (reason, message) = (r.reason.as_str(), &r.message);
            state
                .audit
                .execute_refused(&call.record, &call.asked, reason, message);
            return refusal(r).into();
        }
    }
    let files = match approvals::hash_files(&prepared.files) {
        Ok(f) => f,
        Err(r) => return refusal(r).into(),
    };
    let origin = origin(prepared.background || task, task);
    let tool = super::NAME;
    let holding = Holding {
        rule,
        tool,
        note,
        files,
    };
    let (job, mut spec) = held::awaiting(state, who, prepared, origin, holding);
    spec.holder = (spec.board.as_deref()).and_then(|b| approvals::board_holder(state, b));
    let lease_watch = LeaseWatch::find(state, &prepared.keys, call.lease.as_ref());
    let request = match approvals::open(state, spec) {
        Ok(r) => r,
        Err(r) => {
            state.jobs.forget(&job.id);
            return refusal(r).into();
        }
    };
    held::requested(state, &job, &request.id.0);
    approvals::tell_person(state, ctx, &request);
    let view = request.view();
    let approved = Approved {
        state: state.clone(),
        who: who.clone(),
        session: call.session,
        lease: call.lease,
        again,
        job: job.clone(),
        name: tool,
    };
    tokio::spawn(decided(approved, request, lease_watch));
    result.job = Some(job.id.0.clone());
    result.started_at = Some(job.started_at.to_rfc3339());
    result.approval = Some(view.id.0.clone());
    match origin {
        Origin::Task => jobs::task_handle(&job),
        Origin::Background => {
            let text = format!(
                "{}. Nothing runs until then. Follow it with wait_job {{\"job\": \"{}\"}} (each \
                 wait returns after at most 110 s); cancel_job withdraws it.\n",
                approvals::waiting_line(&view),
                job.id
            );
            structured(&result, text).into()
        }
        _ => {
            let _telling = approvals::tell_job_waiting(ctx, &job, &view);
            jobs::wait_foreground(state, &job, ctx).await.into()
        }
    }
}

/// The job's task: waits for the decision, then the use case runs the call (or it ends
/// refused).
async fn decided(approved: Approved, request: Arc<Request>, lease: Option<LeaseWatch>) {
    let (state, job) = (approved.state.clone(), approved.job.clone());
    let cancel = job.cancel_token();
    let decision = approvals::await_decision(&state, &request, lease.as_ref(), &cancel).await;
    let view = request.view();
    if let Some(r) = approvals::decision_refusal(&view, &decision) {
        return held::end_refused::<ExecuteResult>(&state, &job, r);
    }
    let files_changed = |now: &[_]| approvals::files_changed(&view.files, now);
    held::run_approved::<ExecuteResult>(approved, &view, files_changed).await;
}
