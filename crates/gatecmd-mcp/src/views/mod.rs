//! What every surface renders: the MCP tools and resources, the bench page and the
//! command line show a device, a lock key and a board through these types, so none of
//! them imports another's. A layer of its own between the MCP surface and the domain:
//! views read the state (`AppState`) and never change it.

mod boards;
mod devices;

pub use boards::{BoardList, BoardView, PowerView, board_view, boards_view};
pub use devices::{DeviceView, LockView, SharedView, device_at, render_device};
