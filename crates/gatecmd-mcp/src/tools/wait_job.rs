//! `wait_job`: follows a job the client started (`execute_command {background: true}`, a
//! foreground call that continued as a job, an MCP task) until it ends or the wait is up,
//! with its output since a cursor and progress notifications meanwhile. A job is its
//! client's by name: any session of that client finds it, no other client does.

use std::sync::Arc;
use std::time::Duration;

use rmcp::handler::server::tool::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ProgressNotificationParam};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::calls::answer::{refusal, structured};
use crate::calls::jobs::{JobsRefusal, job_refusal, notices};
use crate::handler::GatecmdServer;
use crate::views::JobSummary;
use gatecmd_core::identity::ClientIdentity;
use gatecmd_core::output;
use gatecmd_domain::jobs::Job;
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
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
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

/// Result of `wait_job`. Field names are part of the interface (docs/TOOLS.md).
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(transform = crate::calls::answer::or_refusal)]
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
    /// Once the job ended, the structured result its call would have answered, for the
    /// jobs that keep one (`flash_board`'s, a task's); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
}

#[tool_router(router = wait_job_router, vis = "pub(crate)")]
impl GatecmdServer {
    /// Waits for a job.
    #[tool(
        description = "Wait for a job (from execute_command {background: true}, list_jobs, or a notice that \
                       your call continues as a job) until it ends or timeout_secs pass (default 30, at most \
                       110): state (awaiting_approval|running|succeeded|failed|timed_out|cancelled|lost), progress, exit code \
                       and the output since output_cursor; pass the returned output_cursor to read on. \
                       Progress notifications while it waits if you send a progress token.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false),
        output_schema = schema_for_output::<WaitJobResult>()
    )]
    async fn wait_job(
        &self,
        Parameters(req): Parameters<WaitJobRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        // A job of another host (`HOST/JOB`, a remote flash) is waited for there.
        let secs = req.timeout_secs.unwrap_or(DEFAULT_WAIT_SECS);
        if let Some(r) =
            crate::lab::forward::remote_call(&self.state, &who, "wait_job", &req, secs).await
        {
            return Ok(r);
        }
        Ok(wait(&self.state, &who, req, &ctx).await)
    }
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
                "{} {}: {p}%{}",
                v.spec.command,
                v.state.as_str(),
                v.transfer
                    .as_ref()
                    .map(|t| format!(", {}", t.line()))
                    .unwrap_or_default()
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
        result: v
            .end
            .result
            .as_ref()
            .and_then(|r| r.get("structuredContent"))
            .cloned(),
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
    if let Some(t) = v.transfer.as_ref().filter(|_| v.state.is_running()) {
        text.push_str(&format!(" ({})", t.line()));
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
