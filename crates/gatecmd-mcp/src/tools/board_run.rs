//! `board_run`: one command line at a leased board's shell over its serial console, with
//! its exact output and exit status, logging in first when a login prompt shows. The
//! conversation is `board_talk`'s, shared with `uboot_run`, which runs at U-Boot's prompt.

use rmcp::handler::server::tool::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};

use crate::console::board_talk::{At, BoardRunRequest, BoardRunResult, run};
use crate::handler::{GatecmdServer, session_id};

#[tool_router(router = board_run_router, vis = "pub(crate)")]
impl GatecmdServer {
    /// Runs one command line at a leased board's shell over its serial console.
    #[tool(
        description = "Run one command line on a leased board's shell over its serial console and get its exact \
                       output (no echo, no prompt) and exit_code. Logs in first when the console shows a login \
                       prompt (the board's console.login). The command must be printable text (no line ends or \
                       control characters); on timeout_secs (default 30) or cancel, Ctrl-C is sent and the prompt \
                       awaited. Needs your lock_board lease (pass it as lease). The board must be booted: \
                       boot_board {to: \"shell\"}. When an approvals rule holds, \
                       nothing is typed until an approver says yes (the call waits).",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = true),
        output_schema = schema_for_output::<BoardRunResult>()
    )]
    async fn board_run(
        &self,
        Parameters(req): Parameters<BoardRunRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        if let Some(r) = crate::lab::forward::remote_call(
            &self.state,
            &who,
            "board_run",
            &req,
            req.timeout_secs.unwrap_or(30),
        )
        .await
        {
            return Ok(r);
        }
        Ok(run(&self.state, &who, session_id(&ctx), req, At::Shell, &ctx).await)
    }
}
