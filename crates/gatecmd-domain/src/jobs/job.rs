//! One job: a command that runs apart from the call that started it, its state, the
//! newest output in two rings with absolute cursors, and how it ended.
//!
//! The job's task holds the run's slot, lock guards and page row (`Held` in gatecmd-mcp's
//! `tools/execute_command/held.rs`), so locks and leases live exactly as long as the child;
//! this value is what callers read, and it outlives the run by the retention time.

use std::sync::Mutex;
use std::time::Instant;

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::Serialize;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::console::ring::{Ring, Slice};

/// A job's id: `job-N`, unique while the server runs.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobId(pub String);

impl std::fmt::Display for JobId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where a job is. Serialised in snake_case; part of the interface (docs/TOOLS.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Nothing runs yet: the call waits for an approver's yes (docs/APPROVALS.md).
    AwaitingApproval,
    Running,
    /// Exited with code 0.
    Succeeded,
    /// Exited non-zero, was ended by a signal, or could not start.
    Failed,
    TimedOut,
    /// Stopped by `cancel_job`, a task cancel, or the server's shutdown.
    Cancelled,
    /// Its task ended without an outcome (a bug, or a panic): the child is gone.
    Lost,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::AwaitingApproval => "awaiting_approval",
            JobState::Running => "running",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::TimedOut => "timed_out",
            JobState::Cancelled => "cancelled",
            JobState::Lost => "lost",
        }
    }

    /// Whether the job has not ended yet: it runs, or it waits for an approval (then it
    /// runs, or ends refused).
    pub fn is_running(self) -> bool {
        matches!(self, JobState::Running | JobState::AwaitingApproval)
    }
}

/// How a job came to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// `execute_command {background: true}`.
    Background,
    /// A foreground call of a `cancel: detach` command whose client gave up.
    Detached,
    /// A task-augmented `tools/call` (the MCP tasks extension).
    Task,
    /// A foreground call of a `cancel: detach` command, still waited on by its call.
    Foreground,
}

impl Origin {
    /// The word for it (the audit's `job_started` line, the job views).
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Background => "background",
            Origin::Detached => "detached",
            Origin::Foreground => "foreground",
            Origin::Task => "task",
        }
    }
}

/// What a job is running, fixed at its start.
#[derive(Debug, Clone)]
pub struct JobSpec {
    pub client: String,
    pub command: String,
    pub argv: Vec<String>,
    pub lock_keys: Vec<String>,
    pub device: Option<String>,
    pub board: Option<String>,
    pub timeout_secs: u64,
    /// `cancel: never`: `cancel_job` is refused.
    pub uncancellable: bool,
    pub origin: Origin,
}

/// How a job ended.
#[derive(Debug, Clone, Default)]
pub struct JobEnd {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub duration_ms: u64,
    pub stop_reason: Option<String>,
    /// Who ended it early (a client name, `server`), if anyone did.
    pub ended_by: Option<String>,
    /// The final tool result (`CallToolResult` as JSON) for `tasks/get` and the
    /// detached foreground call's client.
    pub result: Option<serde_json::Value>,
    /// The result's `device_left` (the device left the bus during the run), as JSON: its
    /// type belongs to the MCP surface, which reads it back for `wait_job`/`list_jobs`.
    pub device_left: Option<serde_json::Value>,
}

/// Mutable part, behind one std mutex: held for a copy or an append, never across an await.
struct Live {
    state: JobState,
    origin: Origin,
    progress: Option<f64>,
    transfer: Option<Transfer>,
    end: JobEnd,
    ended_at: Option<Instant>,
    /// A detach the client has not been told about yet.
    untold: bool,
    /// `cancel_job` asked by this client (for the audit line of its end).
    cancel_by: Option<String>,
    /// The approval request the job waits for, or waited for (`apr-N`).
    approval: Option<String>,
    stdout: Ring,
    stderr: Ring,
}

/// One job; shared by the table and the task running it.
pub struct Job {
    pub id: JobId,
    pub spec: JobSpec,
    pub started_at: DateTime<Utc>,
    started: Instant,
    /// Cancelled by `cancel_job`: the executor stops the process group.
    pub(super) cancel: CancellationToken,
    live: Mutex<Live>,
    /// Moves on every change a waiter may care about (state, progress, output).
    changed: watch::Sender<u64>,
}

/// What a job that moves bytes (`flash_board`) is doing now: enough to plan with. Field
/// names are part of the interface (docs/TOOLS.md, `wait_job`).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Transfer {
    /// The step moving them (`check_image`, `write`, `verify`).
    pub step: String,
    pub bytes_done: u64,
    pub bytes_total: u64,
    /// Bytes per second since the step began.
    pub rate_bytes_per_s: f64,
    /// Seconds left in this step at that rate (absent before anything moved).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eta_secs: Option<f64>,
}

impl Transfer {
    /// `write 12.0 MiB of 64.0 MiB at 20.1 MB/s, 3 s left`.
    pub fn line(&self) -> String {
        format!(
            "{} {:.1} MiB of {:.1} MiB at {:.1} MB/s{}",
            self.step,
            self.bytes_done as f64 / 1048576.0,
            self.bytes_total as f64 / 1048576.0,
            self.rate_bytes_per_s / 1e6,
            self.eta_secs
                .map(|s| format!(", {s:.0} s left"))
                .unwrap_or_default()
        )
    }
}

/// A read of a job, copied out of its lock.
#[derive(Debug, Clone)]
pub struct JobView {
    pub id: JobId,
    pub spec: JobSpec,
    pub started_at: DateTime<Utc>,
    pub state: JobState,
    pub origin: Origin,
    pub progress: Option<f64>,
    /// Bytes moving now, for a job that moves them (`flash_board`).
    pub transfer: Option<Transfer>,
    pub end: JobEnd,
    /// Milliseconds since the start (the run's duration once it ended).
    pub elapsed_ms: u64,
    /// The approval request it waits for, or waited for.
    pub approval: Option<String>,
}

impl Job {
    pub(super) fn new(id: JobId, spec: JobSpec, output_bytes: usize, state: JobState) -> Job {
        let origin = spec.origin;
        Job {
            id,
            spec,
            started_at: Utc::now(),
            started: Instant::now(),
            cancel: CancellationToken::new(),
            live: Mutex::new(Live {
                state,
                origin,
                progress: None,
                transfer: None,
                end: JobEnd::default(),
                ended_at: None,
                untold: false,
                cancel_by: None,
                approval: None,
                stdout: Ring::new(output_bytes),
                stderr: Ring::new(output_bytes),
            }),
            changed: watch::channel(0).0,
        }
    }

    fn live(&self) -> std::sync::MutexGuard<'_, Live> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn tick(&self) {
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// Appends one output line (the executor splits on `\n` and `\r`).
    pub fn push_line(&self, stderr: bool, line: &str) {
        {
            let mut l = self.live();
            let ring = if stderr { &mut l.stderr } else { &mut l.stdout };
            ring.push(line.as_bytes());
            ring.push(b"\n");
        }
        self.tick();
    }

    /// Records a higher percentage; whether it was higher.
    pub fn set_progress(&self, p: f64) -> bool {
        let raised = {
            let mut l = self.live();
            let raised = l.progress.is_none_or(|h| p > h);
            if raised {
                l.progress = Some(p);
            }
            raised
        };
        if raised {
            self.tick();
        }
        raised
    }

    /// Records the bytes moving now (the newest report replaces the last).
    pub fn set_transfer(&self, t: Transfer) {
        self.live().transfer = Some(t);
        self.tick();
    }

    /// Names the approval request the job waits for.
    pub fn set_approval(&self, id: &str) {
        self.live().approval = Some(id.to_string());
        self.tick();
    }

    /// An approved job starts running (from `AwaitingApproval`; anything else is kept).
    pub fn approved(&self) {
        {
            let mut l = self.live();
            if l.state != JobState::AwaitingApproval {
                return;
            }
            l.state = JobState::Running;
        }
        self.tick();
    }

    /// Marks the job ended; the first end wins.
    pub fn finish(&self, state: JobState, mut end: JobEnd) {
        {
            let mut l = self.live();
            if !l.state.is_running() {
                return;
            }
            if end.ended_by.is_none() {
                end.ended_by = l.cancel_by.clone();
            }
            l.state = state;
            l.end = end;
            l.ended_at = Some(Instant::now());
        }
        self.tick();
    }

    /// The foreground call's client gave up: the job is now the client's to wait on, and
    /// its next call is told so.
    pub fn mark_detached(&self) {
        {
            let mut l = self.live();
            l.origin = Origin::Detached;
            l.untold = true;
        }
        self.tick();
    }

    /// Takes the untold detach notice, if there is one.
    pub(super) fn take_untold(&self) -> bool {
        std::mem::take(&mut self.live().untold)
    }

    pub(super) fn note_cancel(&self, by: &str) {
        self.live().cancel_by = Some(by.to_string());
    }

    /// Cancelled when the job is to stop (`cancel_job`, `tasks/cancel`).
    pub fn cancel_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    pub fn state(&self) -> JobState {
        self.live().state
    }

    /// When it ended, if it did (for retention).
    pub(super) fn ended_at(&self) -> Option<Instant> {
        self.live().ended_at
    }

    /// A copy of what a caller reads.
    pub fn view(&self) -> JobView {
        let l = self.live();
        let elapsed_ms = if l.state.is_running() {
            self.started.elapsed().as_millis() as u64
        } else {
            l.end.duration_ms
        };
        JobView {
            id: self.id.clone(),
            spec: self.spec.clone(),
            started_at: self.started_at,
            state: l.state,
            origin: l.origin,
            progress: l.progress,
            transfer: l.transfer.clone(),
            end: l.end.clone(),
            elapsed_ms,
            approval: l.approval.clone(),
        }
    }

    /// Up to `max` bytes of each stream from the cursors given.
    pub fn output(&self, stdout_at: u64, stderr_at: u64, max: usize) -> (Slice, Slice) {
        let l = self.live();
        (l.stdout.read(stdout_at, max), l.stderr.read(stderr_at, max))
    }

    /// Bytes held now in both rings (the flood test's bound).
    pub fn held_bytes(&self) -> usize {
        let l = self.live();
        l.stdout.len() + l.stderr.len()
    }

    /// A receiver that moves on every change.
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }
}

#[cfg(test)]
mod transfer_tests {
    use super::*;

    /// The newest transfer replaces the last, is in the view, and reads as a plan.
    #[test]
    fn a_transfer_is_kept_and_reads_as_a_plan() {
        let spec = JobSpec {
            client: "vm-a".into(),
            command: "flash_board".into(),
            argv: vec!["flash_board".into()],
            lock_keys: vec![],
            device: None,
            board: None,
            timeout_secs: 10,
            uncancellable: false,
            origin: Origin::Background,
        };
        let job = Job::new(JobId("job-1".into()), spec, 1024, JobState::Running);
        assert!(job.view().transfer.is_none());
        let t = |done| Transfer {
            step: "write".into(),
            bytes_done: done,
            bytes_total: 64 << 20,
            rate_bytes_per_s: 21.3e6,
            eta_secs: Some(2.0),
        };
        job.set_transfer(t(16 << 20));
        job.set_transfer(t(27 << 20));
        let v = job.view().transfer.expect("a transfer");
        assert_eq!(v.bytes_done, 27 << 20);
        assert_eq!(
            v.line(),
            "write 27.0 MiB of 64.0 MiB at 21.3 MB/s, 2 s left"
        );
    }
}
