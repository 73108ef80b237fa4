//! An allowed command run in the foreground: the call waits for its child and its outcome.
//! `cancel: kill` stops the child with the request; `cancel: never` runs it on a task of
//! its own with a fresh token, so that neither a cancel nor a dropped request stops it.
//! Also how a run's end is told to the audit log and the metrics, for a job as well.

use gatecmd_core::metrics;
use gatecmd_core::refusal::Refusal;
use tokio_util::sync::CancellationToken;

use super::device_left::Left;
use super::hold::{Begun, Call, Held, Reporter, wait_done};
use super::refused::Refused;
use crate::audit;
use crate::exec::{ExecError, LineTap, Outcome, Spec, StopReason};
use crate::state::AppState;

/// How a foreground run ended.
#[derive(Debug)]
pub struct Finished {
    pub outcome: Outcome,
    /// The device it ran on left the bus meanwhile.
    pub left: Option<Left>,
    /// A `cancel: never` command was asked to stop and ran on.
    pub refused_cancel: bool,
}

/// Runs a begun command and waits for it: the audit trail's end, the metrics and the
/// device's watch are done here; `Err` is the refusal when it could not start (worded by
/// the call's surface, audited as failed).
pub async fn run_foreground(
    call: &Call<'_>,
    begun: Begun,
    never: bool,
    reporter: Option<Reporter>,
    cancel: &CancellationToken,
) -> Result<Finished, Refusal> {
    let Begun {
        spec,
        held,
        trail,
        running,
        left,
        ..
    } = begun;
    let (state, who, command) = (call.state, call.who, &call.record.command);
    let (outcome, refused_cancel) = match spawn(state, spec, held, never, reporter, cancel, command)
        .await
    {
        Ok(ran) => ran,
        Err(e) => {
            let r = (call.words)(e);
            tracing::warn!(client = %who.name, command = %command, error = %r.message, "{} failed to start", call.name);
            trail.failed(&r.message);
            running.finish(metrics::CommandOutcome::Refused, Some(r.reason), None);
            return Err(r);
        }
    };
    running.finish(command_outcome(&outcome), None, Some(outcome.duration));
    let left = left.and_then(|w| w.finish(&state.registry));
    let end = run_end(&outcome);
    trail.finished(&end);
    tracing::info!(
        client = %who.name, command = %command, exit_code = ?end.exit_code,
        duration_ms = end.duration_ms, timed_out = outcome.stopped == Some(StopReason::Timeout),
        cancelled = matches!(outcome.stopped, Some(StopReason::Cancelled | StopReason::Shutdown)),
        "{} finished", call.name
    );
    Ok(Finished {
        outcome,
        left,
        refused_cancel,
    })
}

/// Spawns the child and waits for its outcome; `held` is released when it is gone, then
/// the reporter flushed.
async fn spawn(
    state: &AppState,
    spec: Spec,
    held: Held,
    never: bool,
    reporter: Option<Reporter>,
    cancel: &CancellationToken,
    command: &str,
) -> Result<(Outcome, bool), Refused> {
    let (tap, done) = match reporter {
        Some(r) => (Some(r.tap), Some(r.done)),
        None => (None, None),
    };
    let ran = if never {
        run_detached(state, spec, held, tap, cancel, command).await?
    } else {
        let watch = held.watches_output(tap.is_some());
        let mut offer = |_kind, line: &str| held.offer(tap.as_deref(), line);
        // Lines are split and looked at only when someone watches the percentage.
        let lines = watch.then_some(LineTap::Latest(&mut offer));
        let r = state.executor.run_with(&spec, cancel.clone(), lines).await;
        drop(held);
        drop(tap);
        (r?, false)
    };
    if let Some(done) = done {
        // The tap went with the run; the reporter now flushes and ends.
        wait_done(done).await;
    }
    Ok(ran)
}

type Tap = Box<dyn Fn(&str) -> bool + Send + Sync>;

/// A `cancel: never` command: run detached from this request so that neither a cancel
/// nor a dropped request stops it; the caller still waits for the result.
async fn run_detached(
    state: &AppState,
    spec: Spec,
    held: Held,
    tap: Option<Tap>,
    cancel: &CancellationToken,
    command: &str,
) -> Result<(Outcome, bool), Refused> {
    let executor = state.executor.clone();
    let client = held.client.clone();
    let mut task = tokio::spawn(async move {
        let watch = held.watches_output(tap.is_some());
        let mut offer = |_kind, line: &str| held.offer(tap.as_deref(), line);
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
            _ = cancel.cancelled(), if !refused_cancel => {
                refused_cancel = true;
                tracing::warn!(client = %client, command = %command, "cancel refused: command is marked cancel: never");
            }
        }
    };
    let outcome: Result<Outcome, ExecError> = joined.map_err(|e| Refused::Task(e.to_string()))?;
    Ok((outcome?, refused_cancel))
}

/// The metrics' name for how a run ended.
pub(super) fn command_outcome(outcome: &Outcome) -> metrics::CommandOutcome {
    match outcome.stopped {
        Some(StopReason::Timeout) => metrics::CommandOutcome::TimedOut,
        Some(StopReason::Cancelled | StopReason::Shutdown) => metrics::CommandOutcome::Cancelled,
        None if outcome.exit_code == Some(0) => metrics::CommandOutcome::Ok,
        None => metrics::CommandOutcome::Failed,
    }
}

/// What the audit log keeps of a run's end: the exit code only when it exited by itself.
pub(super) fn run_end(outcome: &Outcome) -> audit::RunEnd {
    audit::RunEnd {
        outcome: match outcome.stopped {
            Some(StopReason::Timeout) => audit::RunOutcome::TimedOut,
            Some(StopReason::Cancelled) => audit::RunOutcome::Cancelled,
            Some(StopReason::Shutdown) => audit::RunOutcome::Shutdown,
            None if outcome.exit_code.is_some() => audit::RunOutcome::Exited,
            None => audit::RunOutcome::Signalled,
        },
        exit_code: outcome.exit_code.filter(|_| outcome.stopped.is_none()),
        signal: outcome.signal,
        duration_ms: outcome.duration.as_millis() as u64,
        stdout_bytes: outcome.stdout.len() as u64 + outcome.stdout_dropped,
        stderr_bytes: outcome.stderr.len() as u64 + outcome.stderr_dropped,
    }
}
