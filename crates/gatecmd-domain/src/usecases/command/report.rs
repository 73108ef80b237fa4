//! What a command call ran and how it ended, as the use case reports it: built from the
//! prepared call before anything runs, completed from the outcome (output cleaned, why it
//! stopped in words). A surface serializes it as (part of) its answer; field names and
//! their descriptions are its interface (docs/TOOLS.md).

use std::time::Duration;

use gatecmd_core::output;
use schemars::JsonSchema;
use serde::Serialize;

use super::prepare::Prepared;
use super::run::Finished;
use crate::exec::isolation::View;
use crate::exec::{Outcome, StopReason};

/// A command call's run.
#[derive(Debug, Clone, Default, Serialize, JsonSchema)]
pub struct Report {
    pub command: String,
    /// The argv as executed: absolute binary, then arguments, each file argument as the path
    /// it resolved to.
    pub argv: Vec<String>,
    /// Present when a file argument was passed: the argv exactly as the child received it,
    /// each file argument as the open file that was checked (`/proc/self/fd/N`, or
    /// `/proc/self/fd/N/NAME` for an output). A tool that prints its argument prints this.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub passed_argv: Option<Vec<String>>,
    /// Exit code; null when the command did not exit by itself (signal, timeout, cancel) or in a dry run.
    pub exit_code: Option<i32>,
    /// The signal that ended the command, if one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// Standard output, escape sequences removed and `\r` overwrites applied.
    pub stdout: String,
    pub stderr: String,
    /// Whether output beyond the server's cap was dropped.
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub duration_ms: u64,
    pub timed_out: bool,
    pub cancelled: bool,
    /// The timeout that applied, in seconds.
    pub timeout_secs: u64,
    /// True when nothing was run (dry_run).
    pub dry_run: bool,
    /// Device id the command was bound to, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// Lock keys held while it ran (or that it would take, in a dry run).
    pub lock_keys: Vec<String>,
    /// Keys held shared while it ran: an isolated command's board VID:PID (or group) key,
    /// which keeps whole-VID:PID commands and leases out but not other boards' commands.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shared_lock_keys: Vec<String>,
    /// The isolated view the command ran in (or would run in, in a dry run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub isolated_view: Option<View>,
    /// Why the command was stopped, in words, when it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// The device was in a mode the pattern does not work in when the call was checked
    /// (the surface words it, when the run failed).
    #[serde(skip)]
    #[schemars(skip)]
    pub wrong_mode: Option<super::prepare::WrongMode>,
}

impl Report {
    /// Before anything ran: what will run, with what timeout, on which keys.
    pub fn of(prepared: &Prepared<'_>) -> Report {
        Report {
            command: prepared.command.name.clone(),
            argv: prepared.argv(),
            passed_argv: (!prepared.spec.inherit.is_empty()).then(|| prepared.passed_argv()),
            timeout_secs: prepared.spec.timeout.as_secs(),
            dry_run: prepared.dry_run,
            device: prepared.device_id(),
            lock_keys: prepared.lock_keys(),
            shared_lock_keys: prepared.shared_keys.iter().map(|k| k.to_string()).collect(),
            wrong_mode: prepared.wrong_mode.clone(),
            ..Report::default()
        }
    }

    /// Exit code 0, by itself.
    pub fn succeeded(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out && !self.cancelled
    }

    /// A foreground run's end.
    pub fn finished(&mut self, f: &Finished, grace: Duration) {
        if f.refused_cancel {
            self.stop_reason = Some(
                "a cancel was refused: this command is marked `cancel: never` and ran to its end"
                    .into(),
            );
        }
        self.fill(&f.outcome, grace);
    }

    /// How the run ended; `grace` is the executor's kill grace.
    pub fn fill(&mut self, o: &Outcome, grace: Duration) {
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
    }
}
