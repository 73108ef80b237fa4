//! Running an allowed `execute_command`: the dry run, or the client's slot and the device
//! locks, the isolated view, the spawn (detached for `cancel: never`), and the outcome.

use std::time::Duration;

use rmcp::RoleServer;
use rmcp::model::{CallToolResponse, CallToolResult};
use rmcp::service::RequestContext;
use tokio_util::sync::CancellationToken;

use crate::calls::answer::{refusal, structured, structured_error};
use crate::calls::progress;
use crate::views::LockView;
use gatecmd_core::identity::ClientIdentity;
use gatecmd_core::metrics;
use gatecmd_core::refusal::Refusal;
use gatecmd_domain::audit;
use gatecmd_domain::config::CancelPolicy;
use gatecmd_domain::exec::{ExecError, LineTap, Outcome, Spec};
use gatecmd_domain::isolation::{Plan, Privilege, Roots};
use gatecmd_domain::locks::{LeaseId, SessionId};
use gatecmd_domain::state::AppState;

use super::held::Held;
use super::interface::{ExecuteRequest, ExecuteResult};
use super::outcome::{command_outcome, fill, run_end};
use super::prepare::{Prepared, Rejected, Snapshot, prepare};
use super::render::{render, render_view, shell_words};
use super::stages::{Begun, Refuser, begin, hold, new_result};

/// Runs `execute_command` for `who`. With `task` (the client declared the MCP tasks
/// extension), a call that would run long (`background`, or a `cancel: detach`/`never`
/// command) is answered with a task whose id is its job's.
pub async fn run(
    state: &std::sync::Arc<AppState>,
    who: &ClientIdentity,
    session: Option<SessionId>,
    req: ExecuteRequest,
    ctx: &RequestContext<RoleServer>,
    task: bool,
) -> CallToolResponse {
    let notices = crate::calls::jobs::notices(state, &who.name);
    let mut answer = run_call(state, who, session, req, ctx, task).await;
    if let CallToolResponse::Complete(r) = &mut answer {
        crate::calls::jobs::tell(r, notices);
    }
    answer
}

async fn run_call(
    state: &std::sync::Arc<AppState>,
    who: &ClientIdentity,
    session: Option<SessionId>,
    req: ExecuteRequest,
    ctx: &RequestContext<RoleServer>,
    task: bool,
) -> CallToolResponse {
    // Read once: every check, the run and its refusals use this (`snapshot.rs`).
    let snap = Snapshot::take(state);
    let config = &snap.config;
    let lease = req.lease.clone().map(LeaseId);
    // The request as asked, before `prepare` consumes it: every refusal below goes through
    // `refuser` so that it is audited with its reason.
    let refuser = Refuser {
        state,
        who,
        call: audit::ExecuteCall::new(
            &who.name,
            session.as_ref().map(|s| s.0.as_str()),
            &req.command,
        ),
        asked: req.args.clone().into_vec(),
    };
    // The request as asked, for a call that waits for an approval to be checked again when
    // it is approved; taken only where a rule exists.
    let again = (!config.approvals.is_empty()).then(|| super::approval::Again::of(&req));
    // Every check, the wait limit included: a dry run makes them all.
    let prepared = match prepare(&snap, who, req) {
        Ok(p) => p,
        Err(e) => return refuser.refuse(e).into(),
    };
    let mut result = new_result(&prepared);
    let roots = config.isolation.roots();
    if prepared.dry_run {
        return dry_run(&refuser, &prepared, &roots, result).into();
    }
    if let Some(rule) = super::approval::rule_for(&prepared) {
        // Nothing has touched the board: the call becomes a request that waits.
        return super::approval::ask(super::approval::Ask {
            state,
            who,
            session,
            again: again.unwrap_or_default(),
            lease,
            prepared: &prepared,
            rule,
            refuser: &refuser,
            result,
            ctx,
            task,
        })
        .await;
    }
    let held = match hold(state, who, session, lease, &prepared, &ctx.ct).await {
        Ok(h) => h,
        Err(e) => return refuser.refuse(e).into(),
    };
    let Begun {
        spec,
        held,
        trail,
        running,
        left,
    } = match begin(state, who, &refuser, &prepared, held, &mut result) {
        Ok(b) => b,
        Err(e) => return refuser.refuse(e).into(),
    };
    let as_job = prepared.background || (task && prepared.cancel != CancelPolicy::Kill);
    if as_job || prepared.cancel == CancelPolicy::Detach {
        let origin = match (as_job, task) {
            (true, true) => gatecmd_domain::jobs::Origin::Task,
            (true, false) => gatecmd_domain::jobs::Origin::Background,
            (false, _) => gatecmd_domain::jobs::Origin::Foreground,
        };
        // A job's answer comes at once: only a foreground call reports progress.
        let reporter = (!as_job).then(|| reporter(&prepared, ctx)).flatten();
        let job = super::background::launch(super::background::Launch {
            executor: state.executor.clone(),
            jobs: state.jobs.clone(),
            audit: state.audit.clone(),
            spec,
            held,
            progress: prepared.progress.clone(),
            result: result.clone(),
            trail,
            running,
            reporter,
            uncancellable: prepared.cancel == CancelPolicy::Never,
            origin,
            left,
            registry: state.registry.clone(),
        });
        return match origin {
            gatecmd_domain::jobs::Origin::Task => crate::calls::jobs::task_handle(&job),
            gatecmd_domain::jobs::Origin::Background => {
                super::job_calls::job_handle(&job, result).into()
            }
            _ => super::job_calls::wait_foreground(state, &job, ctx)
                .await
                .into(),
        };
    }
    let outcome = match spawn(state, who, &prepared, spec, held, ctx, &mut result).await {
        Ok(o) => o,
        Err(e) => {
            tracing::warn!(client = %who.name, command = %result.command, error = %e, "execute_command failed to start");
            trail.failed(&e.to_string());
            let r = Refusal::from(e);
            running.finish(metrics::CommandOutcome::Refused, Some(r.reason), None);
            return refusal(r).into();
        }
    };
    running.finish(command_outcome(&outcome), None, Some(outcome.duration));
    fill(&mut result, &outcome, state.executor.grace());
    result.device_left = left.and_then(|w| w.finish(&state.registry));
    trail.finished(&run_end(&result, &outcome));
    tracing::info!(
        client = %who.name, command = %result.command, exit_code = ?result.exit_code,
        duration_ms = result.duration_ms, timed_out = result.timed_out, cancelled = result.cancelled,
        "execute_command finished"
    );
    let text = render(&result);
    if result.exit_code == Some(0) && !result.timed_out && !result.cancelled {
        structured(&result, text).into()
    } else {
        structured_error(&result, text).into()
    }
}

/// A dry run: the argv, the view it would get, whether its locks are free now.
fn dry_run(
    refuser: &Refuser<'_>,
    prepared: &Prepared<'_>,
    roots: &Roots,
    mut result: ExecuteResult,
) -> CallToolResult {
    let (state, who) = (refuser.state, refuser.who);
    let mut text = format!(
        "dry run: would run {}\ntimeout {} s; nothing was run\n",
        shell_words(&result.argv),
        result.timeout_secs
    );
    if let Some(id) = prepared.isolate() {
        match Plan::new(roots, id, Privilege::current()) {
            Ok(plan) => {
                text.push_str(&render_view(&plan.view));
                result.isolated_view = Some(plan.view);
            }
            Err(e) => return refuser.refuse(e.into()),
        }
    }
    for k in prepared.keys.iter().chain(&prepared.shared_keys) {
        let v = LockView::of(&state.locks, k, &who.name);
        match (&v.holder, v.held) {
            (Some(h), true) => text.push_str(&format!(
                "lock {k}: held by {h} now ({} waiting)\n",
                v.queue_len
            )),
            _ => text.push_str(&format!("lock {k}: free now\n")),
        }
    }
    state.audit.execute_dry_run(&refuser.call, &result.argv);
    metrics::command_done(
        &result.command,
        true,
        &who.name,
        metrics::CommandOutcome::DryRun,
        None,
    );
    structured(&result, text)
}

/// A progress reporter for the request, if it carries a progress token.
fn reporter(
    prepared: &Prepared<'_>,
    ctx: &RequestContext<RoleServer>,
) -> Option<(progress::Tap, tokio::task::JoinHandle<()>)> {
    let token = ctx.meta.get_progress_token()?;
    let sink = progress::Sink {
        peer: ctx.peer.clone(),
        token,
    };
    Some(progress::spawn_reporter(sink, prepared.progress.clone()))
}

/// Spawns the child and waits for its outcome; `held` is released when it is gone.
async fn spawn(
    state: &AppState,
    who: &ClientIdentity,
    prepared: &Prepared<'_>,
    spec: Spec,
    held: Held,
    ctx: &RequestContext<RoleServer>,
    result: &mut ExecuteResult,
) -> Result<Outcome, Rejected> {
    let (reporter, reporter_done) = match reporter(prepared, ctx) {
        Some((tap, done)) => (Some(tap), Some(done)),
        None => (None, None),
    };
    let outcome = if prepared.cancel == CancelPolicy::Never {
        run_detached(state, who, spec, held, reporter, ctx, result).await?
    } else {
        let watch = held.watches_output(reporter.as_ref());
        let mut offer = |_kind, line: &str| held.offer(reporter.as_ref(), line);
        // Lines are split and looked at only when someone watches the percentage.
        let lines = watch.then_some(LineTap::Latest(&mut offer));
        let r = state.executor.run_with(&spec, ctx.ct.clone(), lines).await;
        drop(held);
        drop(reporter);
        r?
    };
    if let Some(mut done) = reporter_done {
        // The tap went with the run; the reporter now flushes and ends. A client that does not
        // read may keep it waiting on its last notification: then it goes, not the answer.
        if tokio::time::timeout(Duration::from_secs(1), &mut done)
            .await
            .is_err()
        {
            done.abort();
        }
    }
    Ok(outcome)
}

/// A `cancel: never` command: run detached from this request so that neither a cancel
/// nor a dropped request stops it; the caller still waits for the result.
async fn run_detached(
    state: &AppState,
    who: &ClientIdentity,
    spec: Spec,
    held: Held,
    reporter: Option<progress::Tap>,
    ctx: &RequestContext<RoleServer>,
    result: &mut ExecuteResult,
) -> Result<Outcome, Rejected> {
    let executor = state.executor.clone();
    let mut task = tokio::spawn(async move {
        let watch = held.watches_output(reporter.as_ref());
        let mut offer = |_kind, line: &str| held.offer(reporter.as_ref(), line);
        let lines = watch.then_some(LineTap::Latest(&mut offer));
        let r = executor
            .run_with(&spec, CancellationToken::new(), lines)
            .await;
        // The device stays locked until the command (and its group) is gone.
        drop(held);
        r
    });
    let mut refused_cancel = false;
    let joined = loop {
        tokio::select! {
            r = &mut task => break r,
            _ = ctx.ct.cancelled(), if !refused_cancel => {
                refused_cancel = true;
                tracing::warn!(client = %who.name, command = %result.command, "cancel refused: command is marked cancel: never");
            }
        }
    };
    if refused_cancel {
        result.stop_reason = Some(
            "a cancel was refused: this command is marked `cancel: never` and ran to its end"
                .into(),
        );
    }
    let outcome: Result<Outcome, ExecError> = joined.map_err(|e| Rejected::Task(e.to_string()))?;
    Ok(outcome?)
}
