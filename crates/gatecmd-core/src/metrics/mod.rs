//! Prometheus metrics, the recording side (docs/METRICS.md): the process's counters and
//! histograms and the one call per event that updates them. A leaf of the core layer: the
//! tools, locks, devices, notifications, HTTP and audit call it, and it imports none of
//! them. The scrape side (the gauges read from the state, the exposition formats, the
//! `/metrics` handlers) is `metrics` in `src/transport/`.
//!
//! # Layout
//!
//! - `labels`: the label values (fixed lists, configured names).
//! - `families`: the process's counters and histograms, in one registry.
//! - `record`: the one call per event that updates them.
//! - `probes`: the hook through which the state reaches the session manager at scrape time.

mod families;
mod labels;
mod probes;
mod record;

pub use families::counters;
pub use labels::{AuditResult, CommandOutcome, DEVICE_KINDS, PREFIX, route_of};
pub use probes::{Probes, SessionCensus};
pub use record::{
    LockWait, RunningCommand, approval_decided, approval_requested, audit_record, command_done,
    command_running, device_lost_during_command, hotplug, http_answer, job_done, lock_queued,
    lock_taken_at_once, notification_changes_missed, notification_sent,
};
