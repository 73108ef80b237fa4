//! Use cases: what a board action does, written once below every surface that offers it
//! (the MCP tools, the labgrid bridge, the bench page, the command line), so that each
//! surface holds only its request, its answer and its rendering.
//!
//! - `power`: running one of a board's power actions (the executor, the audit line of a
//!   step, the board's power state after it) for `power_board`, `boot_board`,
//!   `flash_board` and labgrid's power port.
//! - `take`: taking a leased board (lookup, lease check and key, once, on one
//!   configuration snapshot) for `board_run`, `uboot_run`, `boot_board` and `flash_board`.

pub mod power;
pub mod take;
