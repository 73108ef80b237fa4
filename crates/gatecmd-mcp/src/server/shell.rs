//! The console conversation tools in the tool list (a third `#[tool_router]`, joined in
//! `GatecmdServer::shared_router`): they register and delegate to
//! `src/tools/board_run.rs` and `src/tools/boot_board.rs`.

use rmcp::handler::server::tool::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};

use super::{GatecmdServer, session_id};
use crate::board_talk::{At, BoardRunRequest, BoardRunResult};
use crate::tools::boot_board::{BootRequest, BootResult};

#[tool_router(router = shell_router, vis = "pub(super)")]
impl GatecmdServer {
    /// Runs one command line at a leased board's shell over its serial console.
    #[tool(
        description = "Run one command line on a leased board's shell over its serial console and get its exact \
                       output (no echo, no prompt) and exit_code. Logs in first when the console shows a login \
                       prompt (the board's console.login). The command must be printable text (no line ends or \
                       control characters); on timeout_secs (default 30) or cancel, Ctrl-C is sent and the prompt \
                       awaited. Needs your lock_board lease (pass it as lease). The board must be booted: \
                       boot_board {to: \"shell\"}.",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = true),
        output_schema = schema_for_output::<BoardRunResult>()
    )]
    async fn board_run(
        &self,
        Parameters(req): Parameters<BoardRunRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        Ok(
            crate::board_talk::run(&self.state, &who, session_id(&ctx), req, At::Shell, &ctx.ct)
                .await,
        )
    }

    /// Runs one command at a leased board's U-Boot prompt.
    #[tool(
        description = "Run one command at a leased board's U-Boot prompt (the board must sit there: boot_board \
                       {to: \"uboot\"}) and get its output up to the next prompt and, where U-Boot has $?, its \
                       exit_code (else null). Same rules as board_run: printable text, lease, timeout → Ctrl-C.",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = true),
        output_schema = schema_for_output::<BoardRunResult>()
    )]
    async fn uboot_run(
        &self,
        Parameters(req): Parameters<BoardRunRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        Ok(
            crate::board_talk::run(&self.state, &who, session_id(&ctx), req, At::Uboot, &ctx.ct)
                .await,
        )
    }

    /// Drives a leased board to maskrom, uboot, shell or off.
    #[tool(
        description = "Bring a leased board to a state: maskrom (its rockusb device in MaskROM mode, through \
                       power.maskrom), uboot (power cycle, autoboot interrupted, U-Boot's prompt), shell (power \
                       cycle unless a login or shell prompt already answers, then the login prompt awaited), or \
                       off. Uses only what the board's config offers and says what is missing when a state cannot \
                       be reached. Returns the state, took_ms and the console cursor where the boot log starts.",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = true),
        output_schema = schema_for_output::<BootResult>()
    )]
    async fn boot_board(
        &self,
        Parameters(req): Parameters<BootRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        Ok(crate::tools::boot_board::boot(&self.state, &who, session_id(&ctx), req, &ctx.ct).await)
    }
}
