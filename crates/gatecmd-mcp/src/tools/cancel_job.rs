//! `cancel_job`: stops a running job of the caller's (its process group gets SIGTERM, then
//! SIGKILL after the grace) and answers with the job's final state; a `cancel: never`
//! command is refused. Requests and refusals are audited.

use std::time::Duration;

use rmcp::handler::server::tool::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::calls::answer::{refusal, structured};
use crate::calls::jobs::job_refusal;
use crate::handler::GatecmdServer;
use crate::views::JobSummary;
use gatecmd_core::identity::ClientIdentity;
use gatecmd_domain::state::AppState;

/// Arguments of `cancel_job`.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelJobRequest {
    pub job: String,
}

#[tool_router(router = cancel_job_router, vis = "pub(crate)")]
impl GatecmdServer {
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
        // A job of another host (`HOST/JOB`, a remote flash) is cancelled there.
        if let Some(r) =
            crate::lab::forward::remote_call(&self.state, &who, "cancel_job", &req, 0).await
        {
            return Ok(r);
        }
        Ok(cancel(&self.state, &who, req).await)
    }
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
