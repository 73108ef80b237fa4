//! `uboot_run`: one command at a leased board's U-Boot prompt, with its output up to the
//! next prompt and, where U-Boot has `$?`, its exit status. The conversation is
//! `board_talk`'s, shared with `board_run`, which runs at the board's shell.

use rmcp::handler::server::tool::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};

use crate::console::board_talk::{At, BoardRunRequest, BoardRunResult, run};
use crate::handler::{GatecmdServer, session_id};

#[tool_router(router = uboot_run_router, vis = "pub(crate)")]
impl GatecmdServer {
    /// Runs one command at a leased board's U-Boot prompt.
    #[tool(
        description = "Run one command at a leased board's U-Boot prompt (the board must sit there: boot_board \
                       {to: \"uboot\"}) and get its output up to the next prompt and, where U-Boot has $?, its \
                       exit_code (else null). Same rules as board_run: printable text, lease, timeout → Ctrl-C, \
                       approvals.",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = true),
        output_schema = schema_for_output::<BoardRunResult>()
    )]
    async fn uboot_run(
        &self,
        Parameters(req): Parameters<BoardRunRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        if let Some(r) = crate::lab::forward::remote_call(
            &self.state,
            &who,
            "uboot_run",
            &req,
            req.timeout_secs.unwrap_or(30),
        )
        .await
        {
            return Ok(r);
        }
        Ok(run(&self.state, &who, session_id(&ctx), req, At::Uboot, &ctx).await)
    }
}
