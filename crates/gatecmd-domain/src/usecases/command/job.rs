//! An allowed command run as a job (`crate::jobs`): the child runs on a task of its own
//! that holds the run's slot, locks and page row until the child (and its group) is gone,
//! so that a lease the job uses stays alive exactly as long as the job. For `background`,
//! a task-augmented call, a `cancel: detach` command in the foreground (whose call waits on
//! the job and, if its client gives up, leaves it running) and an approved call.
//!
//! The job's stored answer is the surface's: [`Answer`] renders it from the [`Report`].

use std::sync::Arc;

use gatecmd_core::metrics;
use gatecmd_core::refusal::Refusal;
use regex::Regex;

use super::device_left::Left;
use super::hold::{Begun, Reporter, wait_done};
use super::prepare::Prepared;
use super::refused::Refused;
use super::report::Report;
use super::run::{command_outcome, run_end};
use crate::audit::JobRecord;
use crate::config::CancelPolicy;
use crate::exec::{LineTap, StopReason, StreamKind};
use crate::jobs::{Job, JobEnd, JobSpec, JobState, Origin};
use crate::state::AppState;
use crate::usecases::job::end_job;

/// A surface's answer to a command call: what a job stores for whoever reads its end (a
/// waiting call, a task's reader), and the surface's words for a refusal.
pub trait Answer: Send + 'static {
    /// The answer of a job whose command ran (`None` unless `keep`: someone reads it) and
    /// its `device_left`, both as JSON; `approved` is the job's and its approval's ids
    /// when an approval held the call.
    fn ended(
        run: Report,
        approved: Option<(&str, &str)>,
        left: Option<Left>,
        keep: bool,
    ) -> (Option<serde_json::Value>, Option<serde_json::Value>);
    /// The surface's words for a refusal, with its stable class.
    fn refused(why: Refused) -> Refusal;
    /// A refusal as the answer a job stores.
    fn refusal(r: Refusal) -> Option<serde_json::Value>;
}

/// Where a job comes from: a task-augmented call, `background: true`, else a foreground
/// call that waits on it.
pub fn origin(as_job: bool, task: bool) -> Origin {
    match (as_job, task) {
        (true, true) => Origin::Task,
        (true, false) => Origin::Background,
        (false, _) => Origin::Foreground,
    }
}

/// Registers the job and starts its task; the job is listed before this returns.
pub fn launch<A: Answer>(
    state: &Arc<AppState>,
    prepared: &Prepared<'_>,
    begun: Begun,
    origin: Origin,
    reporter: Option<Reporter>,
    report: Report,
) -> Arc<Job> {
    let job = state.jobs.start(JobSpec {
        client: begun.held.client.clone(),
        command: prepared.command.name.clone(),
        argv: prepared.argv(),
        lock_keys: prepared.lock_keys(),
        device: prepared.device_id(),
        board: begun.held.board.clone(),
        timeout_secs: prepared.spec.timeout.as_secs(),
        uncancellable: prepared.cancel == CancelPolicy::Never,
        origin,
    });
    if let Some(run) = &begun.held.run {
        run.set_job(&job.id.0);
    }
    state.audit.record(&JobRecord::started(
        &job.spec.client,
        &job.id.0,
        origin.as_str(),
    ));
    let ran = Ran {
        state: state.clone(),
        begun,
        progress: prepared.progress.clone(),
        reporter,
        report,
        approved: None,
    };
    let task = tokio::spawn(run_job::<A>(ran, job.clone()));
    let (jobs, watched) = (state.jobs.clone(), job.clone());
    // A task that panicked leaves no outcome: the job is `lost`, not running forever.
    tokio::spawn(async move {
        if let Err(e) = task.await {
            jobs.finish(
                &watched,
                JobState::Lost,
                JobEnd {
                    stop_reason: Some(format!("the job's task ended without an outcome: {e}")),
                    ..JobEnd::default()
                },
            );
        }
    });
    job
}

/// What a job's task takes with it.
pub(super) struct Ran {
    pub(super) state: Arc<AppState>,
    pub(super) begun: Begun,
    pub(super) progress: Option<Regex>,
    /// The starting request's progress reporter (a foreground call's; it goes quiet when
    /// the client is gone).
    pub(super) reporter: Option<Reporter>,
    /// What will run, with the isolated view it got.
    pub(super) report: Report,
    /// The job's and its approval's ids, for an approved call.
    pub(super) approved: Option<(String, String)>,
}

/// Runs a job's command to its end and records the end (a job whose locks are held).
pub(super) async fn run_job<A: Answer>(ran: Ran, job: Arc<Job>) {
    let Ran {
        state,
        begun,
        progress,
        reporter,
        mut report,
        approved,
    } = ran;
    let Begun {
        spec,
        held,
        trail,
        running,
        left,
        ..
    } = begun;
    let (tap, done) = match reporter {
        Some(r) => (Some(r.tap), Some(r.done)),
        None => (None, None),
    };
    let outcome = {
        let mut on_line = |kind: StreamKind, line: &str| {
            job.push_line(kind == StreamKind::Stderr, line);
            if let Some(re) = &progress
                && let Some(p) = crate::exec::progress::parse_percent(re, line)
                && job.set_progress(p)
            {
                state.jobs.changed(&job.id);
            }
            held.offer(tap.as_deref(), line);
        };
        state
            .executor
            .run_with(
                &spec,
                job.cancel_token(),
                Some(LineTap::Every(&mut on_line)),
            )
            .await
    };
    // The device stays locked until the command (and its group) is gone.
    drop(held);
    drop(tap);
    if let Some(done) = done {
        wait_done(done).await;
    }
    // Only a waiting foreground call and a task's reader read the final answer; a
    // background job's answers come from its rings, so it keeps none.
    let keep = matches!(job.view().origin, Origin::Foreground | Origin::Task);
    let (job_state, end) = match outcome {
        Ok(o) => {
            running.finish(command_outcome(&o), None, Some(o.duration));
            let left = left.and_then(|w| w.finish(&state.registry));
            trail.finished(&run_end(&o));
            let job_state = match o.stopped {
                Some(StopReason::Timeout) => JobState::TimedOut,
                Some(StopReason::Cancelled | StopReason::Shutdown) => JobState::Cancelled,
                None if o.exit_code == Some(0) => JobState::Succeeded,
                None => JobState::Failed,
            };
            report.fill(&o, state.executor.grace());
            let end = JobEnd {
                exit_code: report.exit_code,
                signal: report.signal,
                duration_ms: report.duration_ms,
                stop_reason: report.stop_reason.clone(),
                ended_by: match o.stopped {
                    Some(StopReason::Timeout) => Some("timeout".to_string()),
                    Some(StopReason::Shutdown) => Some("server shutdown".to_string()),
                    _ => None,
                },
                ..JobEnd::default()
            };
            let ids = approved.as_ref().map(|(j, a)| (j.as_str(), a.as_str()));
            let (result, device_left) = A::ended(report, ids, left, keep);
            let end = JobEnd {
                result,
                device_left,
                ..end
            };
            (job_state, end)
        }
        Err(e) => {
            let r = A::refused(Refused::Start(e));
            trail.failed(&r.message);
            running.finish(metrics::CommandOutcome::Refused, Some(r.reason), None);
            let stop_reason = Some(r.message.clone());
            (
                JobState::Failed,
                JobEnd {
                    stop_reason,
                    result: A::refusal(r),
                    ..JobEnd::default()
                },
            )
        }
    };
    end_job(&state.jobs, &state.audit, &job, job_state, end);
}
