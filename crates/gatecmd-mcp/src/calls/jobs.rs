//! What the MCP surface says about jobs, shared by `execute_command` (whose long calls
//! become jobs), the job tools (`wait_job`, `cancel_job`, `list_jobs`) and the tasks
//! extension (`tasks.rs`): why a job id is refused, the notices of calls that continued as
//! jobs after their client gave up (told once, with the client's next call), and how often
//! a task client should poll. The jobs themselves are [`gatecmd_domain::jobs`].

use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::model::{
    CallToolResponse, CallToolResult, ContentBlock, CreateTaskResult, Task, TaskStatus,
};
use rmcp::service::RequestContext;

use gatecmd_core::refusal::{Classified, Refusal, RefusalReason};
use gatecmd_domain::audit::{Audit, JobRecord};
use gatecmd_domain::jobs::{Job, JobError, JobView, Jobs};
use gatecmd_domain::state::AppState;

/// How often a task client should poll `tasks/get` (the job's progress moves about
/// once a second for a flash).
pub const TASK_POLL_MS: u64 = 1000;

/// The answer to a task-augmented call (execute_command, flash_board): a task whose id is
/// the job's (src/tasks.rs maps `tasks/*` onto the job).
pub fn task_handle(job: &Job) -> CallToolResponse {
    let at = job.started_at.to_rfc3339();
    let task = Task::new(job.id.0.clone(), TaskStatus::Working, at.clone(), at)
        .with_poll_interval_ms(TASK_POLL_MS)
        .with_status_message(format!("running {}", job.spec.argv.join(" ")));
    CallToolResponse::Task(CreateTaskResult::new(task))
}

/// Why a job tool said no.
#[derive(Debug, thiserror::Error)]
pub enum JobsRefusal {
    #[error("{0}")]
    Job(#[from] JobError),
    #[error(
        "timeout_secs {given} is more than wait_job's maximum of {max} s (clients give up on \
         calls after one to two minutes); wait in steps of at most {max} s"
    )]
    WaitTooLong { given: u64, max: u64 },
}

impl Classified for JobsRefusal {
    fn reason(&self) -> RefusalReason {
        match self {
            JobsRefusal::Job(JobError::Unknown { .. }) => RefusalReason::NotFound,
            JobsRefusal::Job(JobError::Uncancellable { .. }) => RefusalReason::NotPermitted,
            JobsRefusal::WaitTooLong { .. } => RefusalReason::Limit,
        }
    }
}

/// A job error as a refusal.
pub fn job_refusal(e: JobError) -> Refusal {
    JobsRefusal::Job(e).into()
}

/// A job that continues after its client gave up on the call, in words.
pub fn detached_text(v: &JobView) -> String {
    format!(
        "your {} continues as job {} after you gave up on the call; wait with wait_job {{\"job\": \"{}\"}}",
        short(v),
        v.id,
        v.id
    )
}

/// `wl` out of `rkdeveloptool wl 0x0 /x.img`: the command and its first argument.
fn short(v: &JobView) -> String {
    match v.spec.argv.get(1) {
        Some(a) => format!("`{} {a}`", v.spec.command),
        None => format!("`{}`", v.spec.command),
    }
}

/// The detach notices for `client`'s next call, in words (told once).
pub fn notices(state: &AppState, client: &str) -> Vec<String> {
    state
        .jobs
        .take_notices(client)
        .iter()
        .map(|v| {
            let mut s = detached_text(v);
            if !v.state.is_running() {
                s.push_str(&format!(" (it has since ended: {})", v.state.as_str()));
            }
            s
        })
        .collect()
}

/// Ends a job the way every job ends (the job use case's: state, `job_ended` audit line,
/// count), for the tools whose jobs end here.
pub use gatecmd_domain::usecases::job::end_job;

/// Adds `notices` to an answer: a line of text each, and `notices` in its structured
/// content.
pub fn tell(r: &mut CallToolResult, notices: Vec<String>) {
    if notices.is_empty() {
        return;
    }
    for n in &notices {
        r.content.push(ContentBlock::text(format!("note: {n}")));
    }
    if let Some(serde_json::Value::Object(o)) = &mut r.structured_content {
        o.insert("notices".into(), notices.into());
    }
}

/// Waits until a foreground call's job ends. When the client gives up first (it cancels,
/// or drops the connection so that rmcp drops this future), the job is marked detached,
/// audited, and runs on; `Err` is then the answer (which nobody may read) that says so.
/// Shared by `execute_command` and `flash_board`, whose long calls continue as jobs.
pub async fn wait_or_detach(
    state: &AppState,
    job: &Arc<Job>,
    ctx: &RequestContext<RoleServer>,
) -> Result<(), CallToolResult> {
    let mut guard = DetachOnDrop {
        jobs: &state.jobs,
        audit: &state.audit,
        job,
        armed: true,
    };
    let mut changes = job.watch();
    while job.state().is_running() {
        tokio::select! {
            r = changes.changed() => if r.is_err() { break },
            _ = ctx.ct.cancelled() => {
                guard.detach("the client cancelled the call (notifications/cancelled)");
                let v = job.view();
                return Err(crate::calls::answer::structured_error(
                    &serde_json::json!({"job": v.id.0, "state": "running"}),
                    detached_text(&v),
                ));
            }
        }
    }
    guard.armed = false;
    Ok(())
}

/// A foreground call whose work runs as a job (`execute_command`'s `cancel: detach` and
/// approved calls, `flash_board`, `run_test_plan`): waits for the job ([`wait_or_detach`])
/// and answers with the result it stored, as the call would have (or why it has none); the
/// job is then forgotten (nobody needs its handle).
pub async fn wait_foreground(
    state: &AppState,
    job: &Arc<Job>,
    ctx: &RequestContext<RoleServer>,
) -> CallToolResult {
    if let Err(gave_up) = wait_or_detach(state, job, ctx).await {
        return gave_up;
    }
    let v = job.view();
    let answer = (v.end.result).and_then(|r| serde_json::from_value(r).ok());
    let answer = answer.unwrap_or_else(|| {
        let why = v.end.stop_reason.unwrap_or_default();
        crate::calls::answer::structured_error(
            &serde_json::json!({"job": job.id.0}),
            format!("job {} ended without a result: {why}", job.id),
        )
    });
    state.jobs.forget(&job.id);
    answer
}

/// Marks the job detached (and audits why) if the waiting call goes away unanswered:
/// the client dropped its connection, so rmcp dropped the request's future.
struct DetachOnDrop<'a> {
    jobs: &'a Jobs,
    audit: &'a Audit,
    job: &'a Arc<Job>,
    armed: bool,
}

impl DetachOnDrop<'_> {
    fn detach(&mut self, why: &str) {
        self.armed = false;
        if !self.job.state().is_running() {
            return;
        }
        self.job.mark_detached();
        self.jobs.changed(&self.job.id);
        self.audit.record(&JobRecord::detached(
            &self.job.spec.client,
            &self.job.id.0,
            why,
        ));
        tracing::info!(client = %self.job.spec.client, job = %self.job.id, why, "foreground call continues as a job");
    }
}

impl Drop for DetachOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.detach("the request went away (connection dropped)");
        }
    }
}
