//! The label values of the metrics: fixed lists in the code, or names from the
//! configuration. Nothing a request writes becomes a label.

use prometheus_client::encoding::EncodeLabelSet;

/// Every metric name starts with this.
pub const PREFIX: &str = "gatecmd";

/// How an `execute_command` call ended (the `outcome` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandOutcome {
    /// Exit code 0.
    Ok,
    /// Another exit code, or killed by a signal it did not get from us.
    Failed,
    /// Stopped at its timeout.
    TimedOut,
    /// Stopped by the client's cancel or the server's shutdown.
    Cancelled,
    /// Refused before anything ran (the `reason` label says why).
    Refused,
    /// A dry run: checked, not run.
    DryRun,
}

impl CommandOutcome {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            CommandOutcome::Ok => "ok",
            CommandOutcome::Failed => "failed",
            CommandOutcome::TimedOut => "timed_out",
            CommandOutcome::Cancelled => "cancelled",
            CommandOutcome::Refused => "refused",
            CommandOutcome::DryRun => "dry_run",
        }
    }
}

/// What became of an audit record (the `result` label of `gatecmd_audit_records_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuditResult {
    /// Appended to the log.
    Written,
    /// The write failed (disk full, file gone): the decision is not recorded.
    Failed,
    /// A refusal past its class's burst: counted in the window's summary line instead.
    Aggregated,
    /// Not serialisable as a JSON object (a bug): dropped.
    Invalid,
}

impl AuditResult {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            AuditResult::Written => "written",
            AuditResult::Failed => "failed",
            AuditResult::Aggregated => "aggregated",
            AuditResult::Invalid => "invalid",
        }
    }
}

/// Every value of a device's `kind` label (`DeviceKind::label` in `src/devices/model.rs`
/// gives one per kind; the metrics take the text so that they import no device type).
pub const DEVICE_KINDS: [&str; 3] = ["rockusb", "rockchip_other", "other"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct CommandLabels {
    pub(super) command: String,
    pub(super) client: String,
    pub(super) outcome: &'static str,
    /// The refusal class; empty unless `outcome` is `refused`.
    pub(super) reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct DurationLabels {
    pub(super) command: String,
    pub(super) outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct WaitLabels {
    /// `command` or `lease`.
    pub(super) want: &'static str,
    /// `granted` or `gave_up` (timed out, cancelled, refused while queued).
    pub(super) outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct HotplugLabels {
    /// `added`, `removed` or `changed`.
    pub(super) event: &'static str,
    pub(super) kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct KindLabels {
    pub(super) kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct EraLabels {
    /// `legacy` (2025-11-25 sessions) or `listen` (2026-07-28 `subscriptions/listen`).
    pub(super) era: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct HttpLabels {
    /// `mcp`, `health`, `metrics` or `other`.
    pub(super) route: &'static str,
    pub(super) code: u16,
}

/// A job's end: `succeeded`, `failed`, `timed_out`, `cancelled`, `lost` (a fixed set).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct JobLabels {
    pub(super) outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct AuditLabels {
    pub(super) result: &'static str,
}

/// A bounded `command` label: the name when the configuration defines it, else `other`
/// (a refused call may name anything).
pub(super) fn command_label(command: &str, configured: bool) -> String {
    if configured {
        command.to_string()
    } else {
        "other".to_string()
    }
}

/// The `route` label of a request path: `mcp`, `health`, `metrics`, `page` or `other`.
pub fn route_of(path: &str) -> &'static str {
    match path {
        "/mcp" => "mcp",
        "/health" => "health",
        "/metrics" => "metrics",
        "/" | "/page.css" | "/page.js" | "/signin" | "/signout" | "/state" | "/events"
        | "/release" => "page",
        _ if path.starts_with("/mcp/") => "mcp",
        _ => "other",
    }
}

/// The `era` label.
pub(super) fn era(legacy: bool) -> EraLabels {
    EraLabels {
        era: if legacy { "legacy" } else { "listen" },
    }
}
