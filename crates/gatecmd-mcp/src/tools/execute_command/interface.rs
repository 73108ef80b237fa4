//! The interface of `execute_command`: its arguments and its result. Field names are part
//! of the interface (docs/TOOLS.md).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::views::DeviceLeft;
use gatecmd_core::sanitizer::Args;
use gatecmd_domain::usecases::command::{Ask, DeviceArg, Report};

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
        let ask = Ask {
            command: self.command,
            args: self.args,
            timeout_secs: self.timeout_secs,
            dry_run: self.dry_run,
            device: self.device,
            board: self.board,
            wait_secs: self.wait_secs,
            background: self.background,
        };
        (ask, self.lease, self.note)
    }
}

/// Result of `execute_command`: the command use case's [`Report`] (what ran, how it
/// ended) and what the tool adds. Field names are part of the interface (docs/TOOLS.md).
/// A refusal stands in for it as `{"refusal": {reason, message}}` (see [`crate::calls::answer::or_refusal`]).
#[derive(Debug, Clone, Default, Serialize, JsonSchema)]
#[schemars(transform = crate::calls::answer::or_refusal)]
pub struct ExecuteResult {
    #[serde(flatten)]
    pub run: Report,
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
    /// Present when the command failed on a device in a mode its pattern does not work in
    /// (e.g. `wl` in MaskROM): the mode, and the call that gets the device there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode_hint: Option<String>,
}

#[cfg(test)]
mod tests {
    use rmcp::handler::server::tool::schema_for_output;

    /// The use case's report is flattened into the answer: its output schema lists the
    /// same fields as before the report moved below the tool (docs/TOOLS.md), requires the
    /// same ones, and still admits a refusal in their place.
    #[test]
    fn the_answer_s_schema_is_the_report_s_fields_and_the_tool_s() {
        let s = schema_for_output::<super::ExecuteResult>();
        let props: Vec<&str> = s["properties"]
            .as_object()
            .expect("properties")
            .keys()
            .map(|k| k.as_str())
            .collect();
        let mut props = props;
        props.sort();
        assert_eq!(
            props,
            [
                "approval",
                "argv",
                "cancelled",
                "command",
                "device",
                "device_left",
                "dry_run",
                "duration_ms",
                "exit_code",
                "isolated_view",
                "job",
                "lock_keys",
                "mode_hint",
                "notices",
                "passed_argv",
                "refusal",
                "shared_lock_keys",
                "signal",
                "started_at",
                "stderr",
                "stderr_truncated",
                "stdout",
                "stdout_truncated",
                "stop_reason",
                "timed_out",
                "timeout_secs",
            ]
        );
        assert_eq!(
            s["anyOf"],
            serde_json::json!([
                {"required": ["command", "argv", "exit_code", "stdout", "stderr",
                    "stdout_truncated", "stderr_truncated", "duration_ms", "timed_out",
                    "cancelled", "timeout_secs", "dry_run", "lock_keys"]},
                {"required": ["refusal"]}
            ])
        );
    }
}
