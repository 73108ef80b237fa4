//! What `execute_command` answers about jobs: the handle of a background call, the task
//! of a task-augmented one, and a foreground `cancel: detach` call waiting on its job (and
//! leaving it running when the client gives up; its notice is `crate::calls::jobs`').

use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;

use crate::calls::answer::{structured, structured_error};
use gatecmd_domain::jobs::Job;
use gatecmd_domain::state::AppState;

use super::background::stored_result;
use super::interface::ExecuteResult;

/// The answer to `background: true`: the command runs on as `job`.
pub(super) fn job_handle(job: &Job, mut result: ExecuteResult) -> CallToolResult {
    result.job = Some(job.id.0.clone());
    result.started_at = Some(job.started_at.to_rfc3339());
    let text = format!(
        "started {} as job {}; it runs on. Follow it with wait_job {{\"job\": \"{}\"}} \
         (each wait returns after at most 110 s), stop it with cancel_job.\n",
        result.argv.join(" "),
        job.id,
        job.id
    );
    structured(&result, text)
}

/// A foreground call of a `cancel: detach` command: waits for its job and answers as a
/// foreground call does. When the client gives up, the job runs on and the answer (which
/// nobody reads) says so; the client's next call is told.
pub(super) async fn wait_foreground(
    state: &AppState,
    job: &Arc<Job>,
    ctx: &RequestContext<RoleServer>,
) -> CallToolResult {
    if let Err(gave_up) = crate::calls::jobs::wait_or_detach(state, job, ctx).await {
        return gave_up;
    }
    let answer = stored_result(job).unwrap_or_else(|| {
        structured_error(
            &serde_json::json!({"job": job.id.0}),
            format!("job {} ended without a result", job.id),
        )
    });
    // Answered: nobody needs the handle.
    state.jobs.forget(&job.id);
    answer
}
