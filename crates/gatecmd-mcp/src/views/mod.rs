//! What every surface renders: the MCP tools and resources, the bench page and the
//! command line show a device, a lock key, a board, the lock table, a job, the allowlist,
//! an isolated view and a wrong-mode hint through these types, so none of them imports another's (a resource never
//! borrows a tool's code). A layer of its own between the MCP surface and the domain:
//! views read the state (`AppState`) and never change it.

mod boards;
mod commands;
mod devices;
mod isolation;
mod jobs;
pub mod list_cache;
mod locks;
mod mode_hint;

pub use boards::{BoardList, BoardView, PowerView, board_view, boards_view};
pub use commands::{CommandInfo, CommandList, PatternInfo, command_infos, commands_view};
pub use devices::{DeviceLeft, DeviceList, DeviceView, LockView, SharedView, render_device};
pub use isolation::render_view;
pub use jobs::{JobList, JobSummary, job_view, jobs_view};
pub use locks::{LockList, locks_view};
pub use mode_hint::mode_hint;
