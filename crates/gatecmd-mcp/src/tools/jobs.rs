//! `wait_job`, `cancel_job`, `list_jobs`: following the jobs a client started
//! (`execute_command {background: true}`, a detached foreground call, an MCP task).
//! A job is its client's by name: any session of that client finds it, no other
//! client does.

use std::sync::Arc;
use std::time::Duration;

use rmcp::RoleServer;
use rmcp::model::{CallToolResult, ProgressNotificationParam};
use rmcp::service::RequestContext;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::answer::{refusal, structured};
use crate::jobs::{JobsRefusal, job_refusal, notices, tell};
use crate::views::{JobList, JobSummary};
use gatecmd_core::identity::ClientIdentity;
use gatecmd_core::output;
use gatecmd_domain::jobs::{Job, JobState};
use gatecmd_domain::state::AppState;

/// `wait_job`'s default wait.
pub const DEFAULT_WAIT_SECS: u64 = 30;
/// `wait_job`'s longest wait: under the two-minute horizon after which clients give up
/// or move a call to the background (docs/CLIENTS.md).
pub const MAX_WAIT_SECS: u64 = 110;
/// Bytes of each stream one `wait_job` answer carries at most; the cursors go on.
pub const MAX_ANSWER_BYTES: usize = 256 * 1024;

/// Where to read a job's output from: absolute byte offsets per stream.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OutputCursor {
    #[serde(default)]
    pub stdout: u64,
    #[serde(default)]
    pub stderr: u64,
}

/// Arguments of `wait_job`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitJobRequest {
    /// The job id (from execute_command {background: true}, list_jobs, or a notice).
    pub job: String,
    /// Return after this long if the job is still running (default 30, at most 110; 0:
    /// answer now).
    #[serde(default)]
    pub timeout_secs: Option<u64>,
    /// Output from here on (the previous answer's output_cursor); default: from the start.
    #[serde(default)]
    pub output_cursor: Option<OutputCursor>,
}

/// Arguments of `cancel_job`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelJobRequest {
    pub job: String,
}

/// Arguments of `list_jobs`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListJobsRequest {
    /// Only jobs in this state.
    #[serde(default)]
    pub state: Option<JobState>,
}

/// Result of `wait_job`. Field names are part of the interface (docs/TOOLS.md).
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(transform = crate::answer::or_refusal)]
pub struct WaitJobResult {
    #[serde(flatten)]
    pub summary: JobSummary,
    /// Output since the cursor asked for: every line the command printed (split on `\n`
    /// and `\r`, escape sequences removed, a redrawn progress line kept as a line of its
    /// own), at most 256 KiB per stream per answer.
    pub stdout: String,
    pub stderr: String,
    /// Bytes between the cursor asked for and the oldest byte the job still holds
    /// (`jobs.output_bytes` per stream).
    pub stdout_dropped: u64,
    pub stderr_dropped: u64,
    /// Pass as output_cursor to read on.
    pub output_cursor: OutputCursor,
    /// More output is held past this answer's bound: wait_job again at once.
    pub more_output: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notices: Vec<String>,
}

/// `wait_job`: returns when the job ends or after `timeout_secs`, with its output since
/// the cursor; progress notifications while it waits if the request has a token.
pub async fn wait(
    state: &AppState,
    who: &ClientIdentity,
    req: WaitJobRequest,
    ctx: &RequestContext<RoleServer>,
) -> CallToolResult {
    let secs = req.timeout_secs.unwrap_or(DEFAULT_WAIT_SECS);
    if secs > MAX_WAIT_SECS {
        let e = JobsRefusal::WaitTooLong {
            given: secs,
            max: MAX_WAIT_SECS,
        };
        return refusal(e.into());
    }
    let job = match state.jobs.get(&who.name, &req.job) {
        Ok(j) => j,
        Err(e) => return refusal(job_refusal(e)),
    };
    let token = ctx.meta.get_progress_token();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    let mut changes = job.watch();
    let mut sent: Option<f64> = None;
    loop {
        let v = job.view();
        if let (Some(t), Some(p)) = (&token, v.progress)
            && sent.is_none_or(|s| p > s)
        {
            sent = Some(p);
            let param = ProgressNotificationParam::new(t.clone(), p).with_message(format!(
                "{} {}: {p}%",
                v.spec.command,
                v.state.as_str()
            ));
            let mut param = param;
            param.total = Some(100.0);
            let _ = ctx.peer.notify_progress(param).await;
        }
        if !v.state.is_running() {
            break;
        }
        tokio::select! {
            r = changes.changed() => if r.is_err() { break },
            _ = tokio::time::sleep_until(deadline) => break,
            _ = ctx.ct.cancelled() => break,
        }
    }
    answer(state, who, &job, req.output_cursor.unwrap_or_default())
}

fn answer(
    state: &AppState,
    who: &ClientIdentity,
    job: &Arc<Job>,
    at: OutputCursor,
) -> CallToolResult {
    let v = job.view();
    let (out, err) = job.output(at.stdout, at.stderr, MAX_ANSWER_BYTES);
    let (more_out, more_err) = job.output(out.to, err.to, 1);
    let more_output = !more_out.bytes.is_empty() || !more_err.bytes.is_empty();
    let result = WaitJobResult {
        summary: JobSummary::of(&v),
        // Escape sequences go, cursor motion is not applied: each progress line the
        // command drew over the last stays a line of its own (a log, not a screen).
        stdout: log_text(&out.bytes),
        stderr: log_text(&err.bytes),
        stdout_dropped: out.dropped,
        stderr_dropped: err.dropped,
        output_cursor: OutputCursor {
            stdout: out.to,
            stderr: err.to,
        },
        more_output,
        notices: notices(state, &who.name),
    };
    let mut text = format!(
        "job {} ({}): {}",
        v.id,
        v.spec.argv.join(" "),
        v.state.as_str()
    );
    if let Some(p) = v.progress {
        text.push_str(&format!(", {p}%"));
    }
    if let Some(c) = v.end.exit_code {
        text.push_str(&format!(", exit code {c}"));
    }
    text.push_str(&format!(", {} ms\n", v.elapsed_ms));
    if let Some(r) = &v.end.stop_reason {
        text.push_str(&format!("{r}\n"));
    }
    if v.state.is_running() {
        text.push_str(&format!(
            "still running: wait_job {{\"job\": \"{}\", \"output_cursor\": {{\"stdout\": {}, \"stderr\": {}}}}} to go on\n",
            v.id, out.to, err.to
        ));
    }
    if !result.stdout.is_empty() {
        text.push_str(&format!("stdout:\n{}\n", result.stdout));
    }
    if !result.stderr.is_empty() {
        text.push_str(&format!("stderr:\n{}\n", result.stderr));
    }
    for n in &result.notices {
        text.push_str(&format!("note: {n}\n"));
    }
    structured(&result, text)
}

/// A job's output as text: escape sequences removed line by line.
fn log_text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .split_inclusive('\n')
        .map(|l| match l.strip_suffix('\n') {
            Some(l) => output::strip_ansi(l) + "\n",
            None => output::strip_ansi(l),
        })
        .collect()
}

/// `cancel_job`: stops a running job's process group (SIGTERM, then SIGKILL after the
/// grace) and answers once it ended, or after the grace and a second.
pub async fn cancel(
    state: &AppState,
    who: &ClientIdentity,
    req: CancelJobRequest,
) -> CallToolResult {
    let job = match state.jobs.cancel(&who.name, &req.job) {
        Ok(j) => j,
        Err(e) => {
            let r = job_refusal(e);
            state.audit.execute_refused(
                &gatecmd_domain::audit::ExecuteCall::new(&who.name, None, "cancel_job"),
                std::slice::from_ref(&req.job),
                r.reason.as_str(),
                &r.message,
            );
            return refusal(r);
        }
    };
    let was_running = job.state().is_running();
    if was_running {
        state
            .audit
            .record(&gatecmd_domain::audit::JobRecord::cancel_requested(
                &job.spec.client,
                &job.id.0,
                &who.name,
            ));
        let limit = state.executor.grace() + Duration::from_secs(1);
        let mut changes = job.watch();
        let _ = tokio::time::timeout(limit, async {
            while job.state().is_running() {
                if changes.changed().await.is_err() {
                    break;
                }
            }
        })
        .await;
    }
    let v = job.view();
    let text = if was_running {
        format!("job {} cancelled: {}\n", v.id, v.state.as_str())
    } else {
        format!("job {} had already ended: {}\n", v.id, v.state.as_str())
    };
    structured(&JobSummary::of(&v), text)
}

/// `list_jobs`: the caller's jobs, oldest first.
pub fn list(state: &AppState, who: &ClientIdentity, req: ListJobsRequest) -> CallToolResult {
    let jobs: Vec<JobSummary> = state
        .jobs
        .list(&who.name)
        .iter()
        .filter(|v| req.state.is_none_or(|s| v.state == s))
        .map(JobSummary::of)
        .collect();
    let mut text = String::new();
    if jobs.is_empty() {
        text.push_str("no jobs\n");
    }
    for j in &jobs {
        text.push_str(&format!(
            "{} {} {}{}\n",
            j.job,
            j.state.as_str(),
            j.argv.join(" "),
            j.progress.map(|p| format!(" ({p}%)")).unwrap_or_default()
        ));
    }
    let mut r = structured(
        &JobList {
            jobs,
            notices: vec![],
        },
        text,
    );
    tell(&mut r, notices(state, &who.name));
    r
}
