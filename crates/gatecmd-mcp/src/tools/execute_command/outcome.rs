//! `execute_command`'s answer as the run goes ([`Answer`] of the command use case): built
//! before anything runs, filled from the outcome (output cleaned, why it stopped in words,
//! whether its device left), and answered; a job stores the same answer.

use std::time::Duration;

use rmcp::model::CallToolResult;

use crate::calls::answer::{refusal, structured, structured_error};
use crate::views::DeviceLeft;
use gatecmd_core::output;
use gatecmd_core::refusal::Refusal;
use gatecmd_domain::exec::{Outcome, StopReason};
use gatecmd_domain::isolation::View;
use gatecmd_domain::jobs::JobEnd;
use gatecmd_domain::usecases::command::{Answer, Finished, Left, Prepared, Refused};

use super::interface::ExecuteResult;
use super::render::render;

impl Answer for ExecuteResult {
    fn of(prepared: &Prepared<'_>) -> Self {
        ExecuteResult {
            command: prepared.command.name.clone(),
            argv: prepared.argv(),
            passed_argv: (!prepared.spec.inherit.is_empty()).then(|| prepared.passed_argv()),
            timeout_secs: prepared.spec.timeout.as_secs(),
            dry_run: prepared.dry_run,
            device: prepared.device_id(),
            lock_keys: prepared.lock_keys(),
            shared_lock_keys: prepared.shared_keys.iter().map(|k| k.to_string()).collect(),
            ..ExecuteResult::default()
        }
    }

    fn isolated(&mut self, view: Option<View>) {
        self.isolated_view = view;
    }

    fn approved(&mut self, job: &str, approval: &str) {
        self.job = Some(job.to_string());
        self.approval = Some(approval.to_string());
    }

    fn ended(mut self, o: &Outcome, left: Option<Left>, grace: Duration, keep: bool) -> JobEnd {
        self.fill(o, left, grace);
        JobEnd {
            exit_code: self.exit_code,
            signal: self.signal,
            duration_ms: self.duration_ms,
            stop_reason: self.stop_reason.clone(),
            ended_by: None,
            result: keep
                .then(|| self.answer())
                .and_then(|c| serde_json::to_value(&c).ok()),
            device_left: (self.device_left.as_ref()).and_then(|d| serde_json::to_value(d).ok()),
        }
    }

    fn refused(why: Refused) -> Refusal {
        super::rejected::refusal(why)
    }

    fn refusal(r: Refusal) -> Option<serde_json::Value> {
        serde_json::to_value(refusal(r)).ok()
    }
}

impl ExecuteResult {
    /// A foreground run's end.
    pub(super) fn finished(&mut self, f: Finished, grace: Duration) {
        if f.refused_cancel {
            self.stop_reason = Some(
                "a cancel was refused: this command is marked `cancel: never` and ran to its end"
                    .into(),
            );
        }
        self.fill(&f.outcome, f.left, grace);
    }

    /// The answer: an error when the command did not exit 0 by itself.
    pub(super) fn answer(&self) -> CallToolResult {
        let text = render(self);
        if self.exit_code == Some(0) && !self.timed_out && !self.cancelled {
            structured(self, text)
        } else {
            structured_error(self, text)
        }
    }

    fn fill(&mut self, o: &Outcome, left: Option<Left>, grace: Duration) {
        self.exit_code = if o.stopped.is_some() {
            None
        } else {
            o.exit_code
        };
        self.signal = o.signal;
        // No bigger than what was captured (within `max_output_bytes`) once converted.
        let (stdout, stdout_cut) = output::clean_within(&o.stdout, o.stdout.len());
        let (stderr, stderr_cut) = output::clean_within(&o.stderr, o.stderr.len());
        self.stdout = stdout;
        self.stderr = stderr;
        self.stdout_truncated = o.stdout_dropped > 0 || stdout_cut;
        self.stderr_truncated = o.stderr_dropped > 0 || stderr_cut;
        self.duration_ms = o.duration.as_millis() as u64;
        self.timed_out = o.stopped == Some(StopReason::Timeout);
        self.cancelled = matches!(
            o.stopped,
            Some(StopReason::Cancelled | StopReason::Shutdown)
        );
        let grace = grace.as_secs();
        self.stop_reason = match o.stopped {
            Some(StopReason::Timeout) => Some(format!(
                "timed out after {} s: the process group got SIGTERM, then SIGKILL after {grace} s; output so far is included",
                self.timeout_secs
            )),
            Some(StopReason::Cancelled) => Some(format!(
                "cancelled by the client after {} ms: the process group got SIGTERM, then SIGKILL after {grace} s",
                self.duration_ms
            )),
            Some(StopReason::Shutdown) => {
                Some("stopped because the server is shutting down".into())
            }
            None => self.stop_reason.take(),
        };
        self.device_left = left.map(device_left);
    }
}

/// The device left the bus while the command ran, in words.
fn device_left(l: Left) -> DeviceLeft {
    let message = match (l.attached_now, &l.mode_now) {
        (false, _) => format!(
            "device {} went away while the command ran (unplugged, powered off, or reset by the command itself as db and rd do); nothing is attached there now: wait_for_device to see it return",
            l.device
        ),
        (true, Some(mode)) => format!(
            "device {} went away while the command ran and is attached again now ({mode} mode)",
            l.device
        ),
        (true, None) => format!(
            "device {} went away while the command ran and is attached again now",
            l.device
        ),
    };
    DeviceLeft {
        device: l.device.to_string(),
        attached_now: l.attached_now,
        mode_now: l.mode_now,
        message,
    }
}
