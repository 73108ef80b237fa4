//! The MCP tools, one file each, named after the tool (a folder for a tool of several
//! files: `execute_command/`, `boot_board/`, `flash_board/`, `run_test_plan/`). A tool's
//! file holds its request and result types, its registration (the `#[tool]` method on
//! `GatecmdServer` with its description, annotations and output schema, in a
//! `#[tool_router(router = <name>_router)]` impl), its answer and its wording; the work is
//! the domain's use cases (`gatecmd_domain::usecases`), which the other surfaces call too.
//! A tool file stays within 300 production lines, a tool folder within 600
//! (`tools_are_thin` in `tests/server/use_cases.rs`).
//!
//! The `pub mod` lines below are the one list of tools: `build.rs` reads them and pairs each
//! with its router ([`TOOLS`]); [`router`] sums them and the `server` room
//! (`server/mod.rs`) serves the sum (standardized, kept lean, cached). Adding a tool is one
//! new file and one line here (and its section in docs/TOOLS.md).
//!
//! No tool imports another: what several share lives below them, in the crate's other
//! rooms (`calls::answer`, `calls::reasons`, `calls::approvals`, `views`,
//! `console::board_talk`, …) or in gatecmd-domain; `tests/server/structure.rs` holds this.

use rmcp::handler::server::router::tool::ToolRouter;

use crate::handler::GatecmdServer;

pub mod approve;
pub mod board_run;
pub mod boot_board;
pub mod boot_report;
pub mod cancel_job;
pub mod console_read;
pub mod console_write;
pub mod deny;
pub mod execute_command;
pub mod flash_board;
pub mod list_boards;
pub mod list_commands;
pub mod list_devices;
pub mod list_files;
pub mod list_jobs;
pub mod list_locks;
pub mod lock_board;
pub mod lock_device;
pub mod power_board;
pub mod remove_file;
pub mod run_test_plan;
pub mod stat_file;
pub mod uboot_run;
pub mod unlock_device;
pub mod wait_for_device;
pub mod wait_job;
pub mod write_file;

/// The router a tool's file registers (`#[tool_router(router = <name>_router)]`).
pub(crate) type Router = fn() -> ToolRouter<GatecmdServer>;

/// Each tool module of the list above with its router (written by `build.rs` from the list).
pub(crate) const TOOLS: &[(&str, Router)] = include!(concat!(env!("OUT_DIR"), "/tools.rs"));

/// Every tool of the list, one router each, summed.
pub(crate) fn router() -> ToolRouter<GatecmdServer> {
    TOOLS
        .iter()
        .fold(ToolRouter::new(), |sum, (_, router)| sum + router())
}
