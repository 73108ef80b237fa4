//! What the tools' calls share, below any one tool and above the domain: how a tool
//! answers, why a call was refused, the approval round trip, jobs and their foreground
//! wait, progress notifications, and the smaller pieces several tools need.
//!
//! - `answer`: how every tool answers: structured content with a bounded text, or a
//!   refusal, and the output schema a refusal fits.
//! - `reasons`: lower layers' errors classified as refusal reasons, and the refusal for an
//!   unknown board.
//! - `approvals`: what every gated tool shares: the wait for an approver's decision, the
//!   refusal a no becomes, the file hashes an approval binds, and a decision taken.
//! - `boot_log`: a flash's boot log in its text, its last lines (local and remote flashes).
//! - `jobs`: job refusals, a foreground call's wait that detaches its job when the client
//!   gives up, the notices of calls that continued as jobs, the task poll interval, shared
//!   by `execute_command`, `flash_board`, the job tools and `tasks`.
//! - `progress`: a command's output lines turned into MCP progress notifications.
//! - `power_refusal`: why a power switch was refused (`power_board`, and `boot_board`'s
//!   power steps).
//! - `file_staging`: what the file staging tools share: an audited refusal, blocking work
//!   off the async workers, file times as text.
//! - `device_filter`: the filter of `list_devices` and `wait_for_device`, and its refusal.

pub mod answer;
pub mod approvals;
pub mod boot_log;
pub mod device_filter;
pub mod file_staging;
pub mod jobs;
pub mod power_refusal;
pub mod progress;
pub mod reasons;
