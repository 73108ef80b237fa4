//! One file per MCP tool (or per family of tools, until they are cut apart): its request
//! and result types and its logic. `server.rs` holds the `#[tool_router]` list that
//! dispatches to them. No tool imports another's code: what several share lives below
//! them (`views`, `answer`, `reasons`, `board_talk`, …).

pub mod board_list;
pub mod boards;
pub mod boot_board;
pub mod commands;
pub mod console;
pub mod devices;
pub mod execute;
pub mod files;
pub mod jobs;
pub mod locks;
pub mod power;
