//! How a run ended, for the three who read it: the result (`fill`), the audit log
//! (`run_end`) and the metrics (`command_outcome`). Shared by the foreground path
//! (`run.rs`) and jobs (`background.rs`).

use std::time::Duration;

use gatecmd_core::metrics;
use gatecmd_core::output;
use gatecmd_domain::audit;
use gatecmd_domain::exec::{Outcome, StopReason};

use super::interface::ExecuteResult;

/// The metrics' name for how a run ended.
pub(super) fn command_outcome(outcome: &Outcome) -> metrics::CommandOutcome {
    match outcome.stopped {
        Some(StopReason::Timeout) => metrics::CommandOutcome::TimedOut,
        Some(StopReason::Cancelled | StopReason::Shutdown) => metrics::CommandOutcome::Cancelled,
        None if outcome.exit_code == Some(0) => metrics::CommandOutcome::Ok,
        None => metrics::CommandOutcome::Failed,
    }
}

/// What the audit log keeps of a run's end: plain data, no tool types.
pub(super) fn run_end(result: &ExecuteResult, outcome: &Outcome) -> audit::RunEnd {
    audit::RunEnd {
        outcome: match outcome.stopped {
            Some(StopReason::Timeout) => audit::RunOutcome::TimedOut,
            Some(StopReason::Cancelled) => audit::RunOutcome::Cancelled,
            Some(StopReason::Shutdown) => audit::RunOutcome::Shutdown,
            None if outcome.exit_code.is_some() => audit::RunOutcome::Exited,
            None => audit::RunOutcome::Signalled,
        },
        exit_code: result.exit_code,
        signal: result.signal,
        duration_ms: result.duration_ms,
        stdout_bytes: outcome.stdout.len() as u64 + outcome.stdout_dropped,
        stderr_bytes: outcome.stderr.len() as u64 + outcome.stderr_dropped,
    }
}

pub(super) fn fill(result: &mut ExecuteResult, o: &Outcome, grace: Duration) {
    result.exit_code = if o.stopped.is_some() {
        None
    } else {
        o.exit_code
    };
    result.signal = o.signal;
    // No bigger than what was captured (within `max_output_bytes`) once converted.
    let (stdout, stdout_cut) = output::clean_within(&o.stdout, o.stdout.len());
    let (stderr, stderr_cut) = output::clean_within(&o.stderr, o.stderr.len());
    result.stdout = stdout;
    result.stderr = stderr;
    result.stdout_truncated = o.stdout_dropped > 0 || stdout_cut;
    result.stderr_truncated = o.stderr_dropped > 0 || stderr_cut;
    result.duration_ms = o.duration.as_millis() as u64;
    result.timed_out = o.stopped == Some(StopReason::Timeout);
    result.cancelled = matches!(
        o.stopped,
        Some(StopReason::Cancelled | StopReason::Shutdown)
    );
    let grace = grace.as_secs();
    result.stop_reason = match o.stopped {
        Some(StopReason::Timeout) => Some(format!(
            "timed out after {} s: the process group got SIGTERM, then SIGKILL after {grace} s; output so far is included",
            result.timeout_secs
        )),
        Some(StopReason::Cancelled) => Some(format!(
            "cancelled by the client after {} ms: the process group got SIGTERM, then SIGKILL after {grace} s",
            result.duration_ms
        )),
        Some(StopReason::Shutdown) => Some("stopped because the server is shutting down".into()),
        None => result.stop_reason.take(),
    };
}
