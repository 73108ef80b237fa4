//! `execute_command`, by responsibility: its registration (here), [`interface`] (arguments
//! and result), [`prepare`] (policy and typed refusals on one snapshot (`snapshot.rs`) of
//! the configuration and the devices: nothing has run), [`run`] (locks → spawn → outcome)
//! and [`render`] (text for people); [`power_guard`] refuses a board's power command;
//! [`device_left`] tells whether the device left mid-run; [`approval`] holds a call an
//! `approvals:` rule covers until an approver says yes; `stages.rs` holds the steps both
//! paths share (refusal record, slot and locks, the run's beginning).

mod approval;
mod background;
pub mod device_left;
mod held;
pub mod interface;
pub mod job_calls;
mod outcome;
pub mod power_guard;
pub mod prepare;
mod rejected;
pub mod render;
pub mod run;
mod snapshot;
mod stages;

use rmcp::handler::server::tool::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResponse;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};

use crate::server::handler::{GatecmdServer, session_id, wants_task};

pub use interface::{ExecuteRequest, ExecuteResult};
pub use run::run;

#[tool_router(router = execute_command_router, vis = "pub(crate)")]
impl GatecmdServer {
    /// Runs one allowlisted command.
    #[tool(
        description = "Run one allowlisted host command with arguments that match one of its patterns \
                       (see list_commands). No shell is involved. A command that touches a device class \
                       locks that device while it runs: pass lease (from lock_device) if you hold one, \
                       wait_secs to queue if it is busy, device to pick one board. Returns exit code, \
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
        let who = self.identity(&ctx)?;
        let task = wants_task(&ctx);
        Ok(run(&self.state, &who, session_id(&ctx), req, &ctx, task).await)
    }
}
