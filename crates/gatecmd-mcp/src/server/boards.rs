//! The board tools in the tool list (a second `#[tool_router]`, joined to the first in
//! `GatecmdServer::shared_router`, so that `server.rs` stays one screen per tool): they
//! register and delegate to `src/tools/boards.rs`, `board_list.rs` and `power.rs`.

use rmcp::handler::server::tool::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};

use super::{GatecmdServer, answers_at_once, session_id};
use crate::tools;
use crate::tools::boards::{BoardLeaseResult, LockBoardRequest};
use crate::tools::power::{PowerRequest, PowerResult};
use crate::views::BoardList;

#[tool_router(router = board_router, vis = "pub(super)")]
impl GatecmdServer {
    /// Leases a board (by name, or the first free one of a match).
    #[tool(
        description = "Lease a board: its flashing USB port (whatever enumerates there, in any mode), its \
                       console and its power switch, under one lease. Give board (a name from list_boards) or \
                       match ({soc: \"rk3588\", mode?: maskrom|loader, attached?: bool, other tags...}) for the \
                       first free matching board; wait_secs queues in arrival order for the first one freed. \
                       Pass the lease_id as lease to execute_command {board} and power_board; release with \
                       unlock_device.",
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false),
        output_schema = schema_for_output::<BoardLeaseResult>()
    )]
    async fn lock_board(
        &self,
        Parameters(req): Parameters<LockBoardRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        Ok(tools::boards::lock(&self.state, &who, session_id(&ctx), req, &ctx).await)
    }

    /// Switches a board's power.
    #[tool(
        description = "Switch a leased board's power: on, off, or cycle (off, wait off_secs (default 2), on), \
                       through its configured switch (uhubctl or on/off commands). Needs your lock_board lease. \
                       Returns the state and the command lines run.",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false),
        output_schema = schema_for_output::<PowerResult>()
    )]
    async fn power_board(
        &self,
        Parameters(req): Parameters<PowerRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        Ok(tools::power::power(&self.state, &who, session_id(&ctx), req, &ctx).await)
    }

    /// Lists the configured boards.
    #[tool(
        description = "List the configured boards: name, tags, the device at its usb port (or null) with SoC and \
                       mode, its console, its power switch and state, and who holds its lease.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false),
        output_schema = schema_for_output::<BoardList>(),
        meta = answers_at_once()
    )]
    async fn list_boards(
        &self,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        Ok(tools::board_list::list(&self.state, &who.name))
    }
}
