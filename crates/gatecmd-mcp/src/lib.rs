//! gatecmd's MCP surface: tools, resources and notifications over the domain.
//!
//! # Layout
//!
//! From the top (what the transport calls) down (what the domain is asked):
//!
//! - `server`: a handler per transport, the tool list summed from the tools' routers once
//!   and cached, which tools answer at once, and the rest of MCP (server info, resources,
//!   subscriptions, tasks) in the `ServerHandler` impl.
//! - `tools`: the MCP tools, one file each, named after the tool; its `pub mod` lines are
//!   the one list of tools (`build.rs` pairs each with its router). No tool imports another.
//! - `handler`: `GatecmdServer`'s state and what every tool asks of it: who is calling, its
//!   legacy session, whether it speaks the tasks extension, the mark of a quick tool.
//! - `schema`: every tool's input and output schema rewritten in standard JSON Schema.
//! - `tasks`: `tasks/get` and `tasks/cancel` of the MCP tasks extension, mapped onto jobs.
//! - `resources`: the `gatecmd://` resources, read from the views, and which URIs an event
//!   changes.
//! - `notify`: resource change notifications in both protocol eras (legacy sessions'
//!   `resources/subscribe`, 2026-07-28 `subscriptions/listen`).
//! - `subscriptions`: what a client may subscribe to, and how much of it.
//! - `pace`: board resource updates at most ten a second per subscriber.
//! - `board_talk`: a leased board, its console and its key, and one command line at its
//!   shell or U-Boot prompt, shared by `board_run`, `uboot_run` and `boot_board`.
//! - `console_access`: a board's console by name and who may use it, for the console
//!   tools and the console resource.
//! - `device_filter`: the filter of `list_devices` and `wait_for_device`, and its refusal.
//! - `file_staging`: what the file staging tools share: an audited refusal, blocking work
//!   off the async workers, file times as text.
//! - `jobs`: job refusals, a foreground call's wait that detaches its job when the client
//!   gives up, the notices of calls that continued as jobs, the task poll interval, shared
//!   by `execute_command`, `flash_board`, the job tools and `tasks`.
//! - `approvals`: what every gated tool shares: the wait for an approver's decision, the
//!   refusal a no becomes, the file hashes an approval binds, and a decision taken.
//! - `answer`: how every tool answers: structured content with a bounded text, or a
//!   refusal, and the output schema a refusal fits.
//! - `power_refusal`: why a power switch was refused (`power_board`, and `boot_board`'s
//!   power steps).
//! - `reasons`: lower layers' errors classified as refusal reasons, and the refusal for an
//!   unknown board.
//! - `views`: what every surface renders (a device, a lock, a board, a job, the
//!   allowlist), read from the state; the bench page and the command line use them too.
//! - `progress`: a command's output lines turned into MCP progress notifications.
//! - `list_cache`: the `list_devices` answers kept per caller until what they show changes.

pub mod answer;
pub mod approvals;
pub mod board_talk;
pub mod console_access;
pub mod device_filter;
pub mod file_staging;
pub mod handler;
pub mod jobs;
pub mod list_cache;
pub mod notify;
pub mod pace;
pub mod power_refusal;
pub mod progress;
pub mod reasons;
pub mod resources;
pub mod schema;
pub mod server;
pub mod subscriptions;
pub mod tasks;
pub mod tools;
pub mod views;
