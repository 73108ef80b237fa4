//! The interface of `execute_command`: its arguments and its result. Field names are part
//! of the interface (docs/TOOLS.md).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::views::DeviceLeft;
use gatecmd_core::sanitizer::Args;
use gatecmd_domain::isolation::View;
use gatecmd_domain::usecases::command::{Ask, DeviceArg};

/// Arguments of `execute_command`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecuteRequest {
    /// Name of the command (from list_commands).
    pub command: String,
    /// Arguments: preferably a list of strings, one per argument; a single string is split on
    /// whitespace.
    #[serde(default)]
    pub args: Args,
    /// Seconds before the command is stopped; at most the command's configured timeout.
    #[serde(default)]
    pub timeout_secs: Option<u64>,
    /// Validate everything and show the exact argv, without running anything.
    #[serde(default)]
    pub dry_run: bool,
    /// Device id (from list_devices) for a command that touches a device class; default: every
    /// attached device of the class. An isolated command runs on exactly this board and sees
    /// no other; it may be omitted only when exactly one board of its class is attached.
    #[serde(default)]
    // On the wire it is the string it was: the same schema as an `Option<String>` field.
    #[schemars(with = "Option<String>", extend("default" = null))]
    pub device: Option<DeviceArg>,
    /// A board name (from list_boards) instead of `device`: the command runs on the device
    /// at the board's usb port now, whatever mode it is in.
    #[serde(default)]
    pub board: Option<String>,
    /// Lease id from lock_device, when the device is leased (a 2025-11-25 session that took the
    /// lease may omit it).
    #[serde(default)]
    pub lease: Option<String>,
    /// How long to queue if the device is busy (default 0: answer at once with who holds it).
    #[serde(default)]
    pub wait_secs: Option<u64>,
    /// Return at once with a job handle (`job`) once every check passed and the locks are
    /// held; the command runs on. Follow it with wait_job, stop it with cancel_job.
    #[serde(default)]
    pub background: bool,
    /// Why you run it, shown to the approver when an approval rule holds for this call
    /// (docs/APPROVALS.md); ignored otherwise. At most 1024 bytes.
    #[serde(default)]
    pub note: Option<String>,
}

impl ExecuteRequest {
    /// The call as the command use case takes it, then its lease and its note.
    pub fn into_ask(self) -> (Ask, Option<String>, Option<String>) {
        let r = self;
        let (command, args, device, board) = (r.command, r.args, r.device, r.board);
        let (timeout_secs, wait_secs) = (r.timeout_secs, r.wait_secs);
        let (dry_run, background) = (r.dry_run, r.background);
        let ask = Ask {
            command,
            args,
            timeout_secs,
            dry_run,
            device,
            board,
            wait_secs,
            background,
        };
        (ask, r.lease, r.note)
    }
}

/// Result of `execute_command`. Field names are part of the interface (docs/TOOLS.md).
/// A refusal stands in for it as `{"refusal": {reason, message}}` (see [`crate::calls::answer::or_refusal`]).
#[derive(Debug, Clone, Default, Serialize, JsonSchema)]
#[schemars(transform = crate::calls::answer::or_refusal)]
pub struct ExecuteResult {
    pub command: String,
    /// The argv as executed: absolute binary, then arguments, each file argument as the path
    /// it resolved to.
    pub argv: Vec<String>,
    /// Present when a file argument was passed: the argv exactly as the child received it,
    /// each file argument as the open file that was checked (`/proc/self/fd/N`, or
    /// `/proc/self/fd/N/NAME` for an output). A tool that prints its argument prints this.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub passed_argv: Option<Vec<String>>,
    /// Exit code; null when the command did not exit by itself (signal, timeout, cancel) or in a dry run.
    pub exit_code: Option<i32>,
    /// The signal that ended the command, if one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// Standard output, escape sequences removed and `\r` overwrites applied.
    pub stdout: String,
    pub stderr: String,
    /// Whether output beyond the server's cap was dropped.
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub duration_ms: u64,
    pub timed_out: bool,
    pub cancelled: bool,
    /// The timeout that applied, in seconds.
    pub timeout_secs: u64,
    /// True when nothing was run (dry_run).
    pub dry_run: bool,
    /// Device id the command was bound to, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// Lock keys held while it ran (or that it would take, in a dry run).
    pub lock_keys: Vec<String>,
    /// Keys held shared while it ran: an isolated command's board VID:PID (or group) key,
    /// which keeps whole-VID:PID commands and leases out but not other boards' commands.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shared_lock_keys: Vec<String>,
    /// The isolated view the command ran in (or would run in, in a dry run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub isolated_view: Option<View>,
    /// Why the command was stopped, in words, when it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// A background call's job id: the command runs on; wait_job {job} follows it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// The approval request this call waits for (docs/APPROVALS.md), with `job`: nothing
    /// runs until an approver says yes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval: Option<String>,
    /// When the job started (RFC 3339), with `job`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// Jobs of yours that continued after you gave up on their call (told once).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notices: Vec<String>,
    /// Present when the device the command ran on left the bus while it ran (unplugged,
    /// powered off, reset): whether it is back, and in which mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_left: Option<DeviceLeft>,
}
