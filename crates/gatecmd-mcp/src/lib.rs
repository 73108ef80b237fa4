//! gatecmd's MCP surface: tools, resources and notifications over the domain.
//!
//! # Layout
//!
//! Seven rooms, from the top (what the transport calls) down (what the domain is asked):
//!
//! - `server`: a handler per transport, the tool list summed from the tools' routers once
//!   and cached, which tools answer at once, and the rest of MCP (server info, resources,
//!   subscriptions, tasks) in the `ServerHandler` impl. Inside: `schema` (every tool's
//!   input and output schema rewritten in standard JSON Schema), `lean` (the list kept
//!   within an agent's budget: lean output schemas), `tasks` (`tasks/get` and
//!   `tasks/cancel` of the MCP tasks extension, mapped onto jobs).
//! - `handler`: `GatecmdServer`'s state and what every tool asks of it: who is calling,
//!   its legacy session, whether it speaks the tasks extension, the mark of a quick tool.
//!   A room of its own, not inside `server`: every tool imports it and `server` imports the
//!   tools, so inside `server` the two would import each other.
//! - `tools`: the MCP tools, one file each (a folder for a tool of several files), named
//!   after the tool; its `pub mod` lines are the one list of tools (`build.rs` pairs each with its
//!   router). No tool imports another. A tool holds its request, its answer and its
//!   rendering; the work is in the domain's use cases.
//! - `calls`: what the tools' calls share: `answer`, `reasons`, `approvals`, `jobs`,
//!   `progress`, `power_refusal`, `file_staging`, `device_filter` (its own layout doc).
//! - `console`: a board's console as the tools meet it: `console_access` (a console by name
//!   and who may use it) and `board_talk` (one command line at a leased board's prompt).
//! - `lab`: one lab for agents: `list_boards`/`lock_board {scope: "lab"}` and every board
//!   tool on another host's `HOST/BOARD`, through the peer link (`labgrid.peers`).
//! - `resources`: the `gatecmd://` resources, read from the views, and which URIs an event
//!   changes; inside: `notify` (change notifications in both protocol eras),
//!   `subscriptions` (what a client may subscribe to, and how much of it), `pace` (board
//!   resource updates at most ten a second per subscriber).
//! - `views`: what every surface renders (a device, a lock, a board, a job, the
//!   allowlist), read from the state; the bench page and the command line use them too.
//!   `views::list_cache` keeps the `list_devices` answers per caller until what they show
//!   changes.

pub mod calls;
pub mod console;
pub mod handler;
pub mod lab;
pub mod resources;
pub mod server;
pub mod tools;
pub mod views;
