//! An allowed `execute_command` run as a job (src/jobs/): the child runs on a task of its
//! own that holds the run's slot, locks and page row until the child (and its group) is
//! gone, so a lease the job uses stays alive exactly as long as the job. Used for
//! `background: true`, for a task-augmented call, and for a `cancel: detach` command in
//! the foreground, whose call waits on the job and, if its client gives up, leaves it
//! running.

use std::sync::Arc;
use std::time::Duration;

use regex::Regex;
use rmcp::model::CallToolResult;
use tokio_util::sync::CancellationToken;

use crate::calls::answer::{refusal, structured, structured_error};
use crate::calls::progress;
use gatecmd_core::metrics;
use gatecmd_core::refusal::Refusal;
use gatecmd_domain::audit;
use gatecmd_domain::exec::{Executor, LineTap, Spec, StopReason, StreamKind};
use gatecmd_domain::jobs::{Job, JobEnd, JobSpec, JobState, Jobs, Origin};

use super::held::Held;
use super::interface::ExecuteResult;
use super::outcome::{command_outcome, fill, run_end};
use super::prepare::Rejected;
use super::render::render;

/// Everything the job's task takes with it.
pub(super) struct Launch {
    pub executor: Executor,
    pub jobs: Jobs,
    pub audit: audit::Audit,
    pub spec: Spec,
    pub held: Held,
    pub progress: Option<Regex>,
    pub result: ExecuteResult,
    pub trail: audit::RunTrail,
    pub running: metrics::RunningCommand,
    /// The starting request's progress reporter (a foreground call's; it goes quiet when
    /// the client is gone).
    pub reporter: Option<(progress::Tap, tokio::task::JoinHandle<()>)>,
    pub uncancellable: bool,
    pub origin: Origin,
    /// Whether the device left the bus during the run, for the result's `device_left`.
    pub left: Option<super::device_left::Watch>,
    pub registry: gatecmd_devices::Registry,
}

/// Registers the job and starts its task; the job is listed before this returns.
pub(super) fn launch(l: Launch) -> Arc<Job> {
    let r = &l.result;
    let job = l.jobs.start(JobSpec {
        client: l.held.client.clone(),
        command: r.command.clone(),
        argv: r.argv.clone(),
        lock_keys: r.lock_keys.clone(),
        device: r.device.clone(),
        board: l.held.board.clone(),
        timeout_secs: r.timeout_secs,
        uncancellable: l.uncancellable,
        origin: l.origin,
    });
    if let Some(run) = &l.held.run {
        run.set_job(&job.id.0);
    }
    l.audit.record(&audit::JobRecord::started(
        &job.spec.client,
        &job.id.0,
        l.origin.as_str(),
    ));
    let jobs = l.jobs.clone();
    let watched = job.clone();
    let task = tokio::spawn(run_job(l, job.clone()));
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

/// Runs a job's command to its end and records the end (a job whose locks are held).
pub(super) async fn run_job(l: Launch, job: Arc<Job>) {
    let Launch {
        executor,
        jobs,
        audit,
        spec,
        held,
        progress,
        mut result,
        trail,
        running,
        reporter,
        left,
        registry,
        ..
    } = l;
    let grace = executor.grace();
    let outcome = {
        let tap = reporter.as_ref().map(|(t, _)| t);
        let mut on_line = |kind: StreamKind, line: &str| {
            job.push_line(kind == StreamKind::Stderr, line);
            if let Some(re) = &progress
                && let Some(p) = progress::parse_percent(re, line)
                && job.set_progress(p)
            {
                jobs.changed(&job.id);
            }
            held.offer(tap, line);
        };
        let cancel: CancellationToken = job.cancel_token();
        executor
            .run_with(&spec, cancel, Some(LineTap::Every(&mut on_line)))
            .await
    };
    // The device stays locked until the command (and its group) is gone.
    drop(held);
    if let Some((tap, mut done)) = reporter {
        drop(tap);
        if tokio::time::timeout(Duration::from_secs(1), &mut done)
            .await
            .is_err()
        {
            done.abort();
        }
    }
    // Only a waiting foreground call and `tasks/get` read the final tool result; a
    // background job's answers come from its rings (wait_job), so it keeps none.
    let keep_result = matches!(job.view().origin, Origin::Foreground | Origin::Task);
    let (state, end) = match outcome {
        Ok(o) => {
            running.finish(command_outcome(&o), None, Some(o.duration));
            fill(&mut result, &o, grace);
            result.device_left = left.and_then(|w| w.finish(&registry));
            trail.finished(&run_end(&result, &o));
            let state = match o.stopped {
                Some(StopReason::Timeout) => JobState::TimedOut,
                Some(StopReason::Cancelled | StopReason::Shutdown) => JobState::Cancelled,
                None if o.exit_code == Some(0) => JobState::Succeeded,
                None => JobState::Failed,
            };
            let ended_by = match o.stopped {
                Some(StopReason::Timeout) => Some("timeout".to_string()),
                Some(StopReason::Shutdown) => Some("server shutdown".to_string()),
                _ => None,
            };
            let call = keep_result.then(|| {
                let text = render(&result);
                if state == JobState::Succeeded {
                    structured(&result, text)
                } else {
                    structured_error(&result, text)
                }
            });
            (
                state,
                JobEnd {
                    exit_code: result.exit_code,
                    signal: result.signal,
                    duration_ms: result.duration_ms,
                    stop_reason: result.stop_reason.clone(),
                    ended_by,
                    result: call.and_then(|c| serde_json::to_value(&c).ok()),
                    device_left: result
                        .device_left
                        .as_ref()
                        .and_then(|d| serde_json::to_value(d).ok()),
                },
            )
        }
        Err(e) => {
            trail.failed(&e.to_string());
            let r = Refusal::from(Rejected::from(e));
            running.finish(metrics::CommandOutcome::Refused, Some(r.reason), None);
            let message = r.message.clone();
            (
                JobState::Failed,
                JobEnd {
                    stop_reason: Some(message),
                    result: serde_json::to_value(refusal(r)).ok(),
                    ..JobEnd::default()
                },
            )
        }
    };
    crate::calls::jobs::end_job(&jobs, &audit, &job, state, end);
}

/// The final answer a job stored, as the tool result it was.
pub(super) fn stored_result(job: &Job) -> Option<CallToolResult> {
    let v = job.view();
    serde_json::from_value(v.end.result?).ok()
}
