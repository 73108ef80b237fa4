//! Prometheus metrics (docs/METRICS.md): `GET /metrics` in the classic text format or
//! OpenMetrics, as the scraper asks.
//!
//! # Layout
//!
//! - `labels`: the label values (fixed lists, configured names).
//! - `families`: the process's counters and histograms, in one registry.
//! - `record`: the one call per event that updates them (tools, locks, devices,
//!   notifications, HTTP and audit call these; it imports none of them).
//! - `probes`: the hook through which the state reaches the session manager at scrape time.
//! - `census`: the gauges that are state (leases, waiters, devices, sessions), read from
//!   `AppState` at each scrape.
//! - `encode`: content negotiation and the two exposition formats.
//! - `route`: the `/metrics` handlers (main bind, loopback `metrics.bind`) and the layer
//!   counting HTTP answers.
//! - `watch`: tells a device lost during a command from an idle unplug.

mod census;
mod encode;
mod families;
mod labels;
mod probes;
mod record;
mod route;
mod watch;

pub use encode::Format;
pub use labels::{AuditResult, CommandOutcome, route_of};
pub use probes::{Probes, SessionCensus};
pub use record::{
    LockWait, RunningCommand, audit_record, command_done, command_running,
    device_lost_during_command, hotplug, http_answer, job_done, lock_queued, lock_taken_at_once,
    notification_changes_missed, notification_sent,
};
pub use route::{PATH, Unrestricted, answer, count_status, loopback_router, scrape};
pub use watch::watch_lost_devices;
