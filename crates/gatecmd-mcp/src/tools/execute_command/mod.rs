//! `execute_command`: its registration (here), [`interface`] (request and answer),
//! `rejected.rs` (its words for a refusal), `outcome.rs` (the answer), [`render`] (text for
//! people), `run.rs` (the MCP side of a call). The work is the command use case's,
//! `gatecmd_domain::usecases::command`.

pub mod interface;
mod outcome;
mod rejected;
pub mod render;
pub mod run;

use rmcp::handler::server::tool::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResponse;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};

use crate::calls::jobs;
use crate::handler::{GatecmdServer, session_id, wants_task};

pub use interface::{ExecuteRequest, ExecuteResult};

/// The tool's name, in the approval request and the log's lines.
const NAME: &str = "execute_command";
pub use run::run;

#[tool_router(router = execute_command_router, vis = "pub(crate)")]
impl GatecmdServer {
    /// Runs one allowlisted command.
    #[tool(
        description = "Run one allowlisted host command with arguments that match one of its patterns \
                       (see list_commands). No shell is involved. A command that touches a device class \
                       locks that device while it runs: pass lease (from lock_device, or lock_board \
                       with board) if you hold one, wait_secs to queue if it is busy, device (or board) to \
                       pick one board. Returns exit code, \
                       stdout, stderr and timing. With dry_run: true, validates and shows the exact argv \
                       and lock keys without running.",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false),
        output_schema = schema_for_output::<ExecuteResult>()
    )]
    async fn execute_command(
        &self,
        Parameters(req): Parameters<ExecuteRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let (who, task) = (self.identity(&ctx)?, wants_task(&ctx));
        let notices = jobs::notices(&self.state, &who.name);
        let mut answer = run(&self.state, &who, session_id(&ctx), req, &ctx, task).await;
        if let CallToolResponse::Complete(r) = &mut answer {
            jobs::tell(r, notices);
        }
        Ok(answer)
    }
}
