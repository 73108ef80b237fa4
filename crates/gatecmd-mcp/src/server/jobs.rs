//! The job tools in the tool list (a third `#[tool_router]`, joined in
//! `GatecmdServer::shared_router`): they register and delegate to `src/tools/jobs.rs`.

use rmcp::handler::server::tool::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};

use super::{GatecmdServer, answers_at_once};
use crate::tools;
use crate::tools::jobs::{CancelJobRequest, ListJobsRequest, WaitJobRequest, WaitJobResult};
use crate::views::{JobList, JobSummary};

/// Whether a call's client declared the MCP tasks extension (per request in 2026-07-28,
/// at `initialize` in a session): then a long `execute_command` is answered as a task.
pub(super) fn wants_task(ctx: &RequestContext<RoleServer>) -> bool {
    ctx.client_capabilities()
        .is_some_and(|c| c.supports_tasks())
}

#[tool_router(router = job_router, vis = "pub(super)")]
impl GatecmdServer {
    /// Waits for a job.
    #[tool(
        description = "Wait for a job (from execute_command {background: true}, list_jobs, or a notice that \
                       your call continues as a job) until it ends or timeout_secs pass (default 30, at most \
                       110): state (running|succeeded|failed|timed_out|cancelled|lost), progress, exit code \
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
        Ok(tools::jobs::wait(&self.state, &who, req, &ctx).await)
    }

    /// Cancels a job.
    #[tool(
        description = "Stop a running job of yours: its process group gets SIGTERM, then SIGKILL after the \
                       grace. Refused for a command marked cancel: never. Returns the job's final state.",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = true, open_world_hint = false),
        output_schema = schema_for_output::<JobSummary>()
    )]
    async fn cancel_job(
        &self,
        Parameters(req): Parameters<CancelJobRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        Ok(tools::jobs::cancel(&self.state, &who, req).await)
    }

    /// Lists the caller's jobs.
    #[tool(
        description = "List your jobs (running and recently finished; any session of yours sees them): id, \
                       state, command line, progress, exit code. Also says which of your calls continued as \
                       jobs after you gave up on them.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false),
        output_schema = schema_for_output::<JobList>(),
        meta = answers_at_once()
    )]
    async fn list_jobs(
        &self,
        Parameters(req): Parameters<ListJobsRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        Ok(tools::jobs::list(&self.state, &who, req))
    }
}
