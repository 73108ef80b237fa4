//! The MCP side of an `execute_command` call; the work is the command use case's
//! (`gatecmd_domain::usecases::command`). Here: the refusal and dry-run answers, the
//! progress reporter of a request with a progress token, a job's handle or task, the
//! foreground wait that detaches into a job when the client gives up, and the approval
//! round trip (docs/APPROVALS.md: the use case holds the call; a person is pointed at the
//! request, and the client told whom it waits for).

use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::model::{CallToolResponse, CallToolResult};
use rmcp::service::RequestContext;

use crate::calls::answer::{refusal, structured};
use crate::calls::{approvals, jobs, progress};
use gatecmd_core::identity::ClientIdentity;
use gatecmd_domain::config::{ApprovalRule, CancelPolicy};
use gatecmd_domain::jobs::{Job, Origin};
use gatecmd_domain::locks::{LeaseId, SessionId};
use gatecmd_domain::state::AppState;
use gatecmd_domain::usecases::command::{
    self, Ask, Call, Prepared, Report, Reporter, Snapshot, approval, origin, prepare,
};

use super::interface::{ExecuteRequest, ExecuteResult};
use super::render::render_dry_run;

/// Runs `execute_command` for `who`. With `task` (the client declared the MCP tasks
/// extension), a call that would run long (`background`, or a `cancel: detach`/`never`
/// command) is answered with a task whose id is its job's.
pub async fn run(
    state: &Arc<AppState>,
    who: &ClientIdentity,
    session: Option<SessionId>,
    req: ExecuteRequest,
    ctx: &RequestContext<RoleServer>,
    task: bool,
) -> CallToolResponse {
    // Read once: every check, the run and its refusals use this.
    let snap = Snapshot::take(state);
    let (ask, lease, note) = req.into_ask();
    // Every refusal below goes through `call` so that it is audited with its reason.
    let lease = lease.map(LeaseId);
    let surface = (super::NAME, super::rejected::refusal as fn(_) -> _);
    let call = Call::new(state, who, (session, lease), &ask, surface);
    // The call as asked, to be checked again once approved; taken only where a rule exists.
    let again = (!snap.config.approvals.is_empty()).then(|| ask.again());
    // Every check, the wait limit included: a dry run makes them all.
    let prepared = match prepare(&snap, who, ask) {
        Ok(p) => p,
        Err(e) => return refusal(call.refuse(e)).into(),
    };
    let run = Report::of(&prepared);
    let mut result = ExecuteResult {
        run,
        ..ExecuteResult::default()
    };
    if prepared.dry_run {
        return dry_run(&call, &prepared, result).into();
    }
    if let Some(rule) = approval::rule_for(&prepared) {
        // Nothing has touched the board: the call becomes a request that waits.
        let held = (rule, again.unwrap_or_default(), note);
        return approve(state, (call, held), &prepared, result, ctx, task).await;
    }
    let mut begun = match command::start(&call, &prepared, &ctx.ct).await {
        Ok(b) => b,
        Err(e) => return refusal(call.refuse(e)).into(),
    };
    result.run.isolated_view = begun.view.take();
    let as_job = prepared.background || (task && prepared.cancel != CancelPolicy::Kill);
    if as_job || prepared.cancel == CancelPolicy::Detach {
        let origin = command::origin(as_job, task);
        // A job's answer comes at once: only a foreground call reports progress.
        let reporter = (!as_job).then(|| reporter(&prepared, ctx)).flatten();
        let run = result.run.clone();
        let job = command::launch::<ExecuteResult>(state, &prepared, begun, origin, reporter, run);
        return match origin {
            Origin::Task => jobs::task_handle(&job),
            Origin::Background => job_handle(&job, result).into(),
            _ => jobs::wait_foreground(state, &job, ctx).await.into(),
        };
    }
    let never = prepared.cancel == CancelPolicy::Never;
    let reporter = reporter(&prepared, ctx);
    match command::run_foreground(&call, begun, never, reporter, &ctx.ct).await {
        Ok(finished) => {
            result.finished(finished, state.executor.grace());
            result.answer().into()
        }
        Err(r) => refusal(r).into(),
    }
}

/// A dry run: the argv, the view it would get, whether its locks are free now.
fn dry_run(call: &Call<'_>, prepared: &Prepared<'_>, mut result: ExecuteResult) -> CallToolResult {
    match command::dry_run(call, prepared) {
        Ok(d) => {
            let text = render_dry_run(&result.run, &d);
            result.run.isolated_view = d.view;
            structured(&result, text)
        }
        Err(e) => refusal(call.refuse(e)),
    }
}

/// A progress reporter for the request, if it carries a progress token.
fn reporter(prepared: &Prepared<'_>, ctx: &RequestContext<RoleServer>) -> Option<Reporter> {
    let (tap, done) = progress::for_request(ctx, prepared.progress.clone())?;
    let tap = Box::new(move |line: &str| tap.offer(line));
    Some(Reporter { tap, done })
}

/// The answer to `background: true`: the command runs on as `job`.
fn job_handle(job: &Job, mut result: ExecuteResult) -> CallToolResult {
    result.job = Some(job.id.0.clone());
    result.started_at = Some(job.started_at.to_rfc3339());
    let text = format!(
        "started {} as job {}; it runs on. Follow it with wait_job {{\"job\": \"{}\"}} \
         (each wait returns after at most 110 s), stop it with cancel_job.\n",
        result.run.argv.join(" "),
        job.id,
        job.id
    );
    structured(&result, text)
}

/// Holds the call for an approver's yes under `rule`, and answers (or waits).
async fn approve(
    state: &Arc<AppState>,
    (call, held): (Call<'_>, (&ApprovalRule, Ask, Option<String>)),
    prepared: &Prepared<'_>,
    mut result: ExecuteResult,
    ctx: &RequestContext<RoleServer>,
    task: bool,
) -> CallToolResponse {
    let origin = origin(prepared.background || task, task);
    let tell = |r: &Arc<_>| approvals::tell_person(state, ctx, r);
    let held = approval::hold::<ExecuteResult>(call, state, prepared, held, origin, tell);
    let (job, request) = match held {
        Ok(held) => held,
        Err(r) => return refusal(r).into(),
    };
    let view = request.view();
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
