//! The counters and histograms of the process, in one registry.
//!
//! They live in one process-wide set ([`families`]) rather than in `AppState`: the places
//! that count (the lock manager, the device registry, the audit log, the accept loop) are
//! built before and below the state, and one process serves one bench, so there is one set,
//! like there is one log. Every update (`record.rs`) is an atomic add on a series looked
//! up in a small map. What is state rather than an event (leases, devices, sessions) is not
//! kept here: `census.rs` reads it from the state at each scrape.

use std::sync::LazyLock;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use super::labels::{
    AuditLabels, AuditResult, CommandLabels, DEVICE_KINDS, DurationLabels, EraLabels,
    HotplugLabels, HttpLabels, KindLabels, PREFIX, WaitLabels, era,
};

type HistogramMaker = fn() -> Histogram;

/// The process's counters and histograms (see the module comment).
pub struct Families {
    pub(super) registry: Registry,
    pub(super) commands: Family<CommandLabels, Counter>,
    pub(super) command_duration: Family<DurationLabels, Histogram, HistogramMaker>,
    pub(super) commands_running: Gauge,
    pub(super) lock_wait: Family<WaitLabels, Histogram, HistogramMaker>,
    pub(super) hotplug: Family<HotplugLabels, Counter>,
    pub(super) devices_lost: Family<KindLabels, Counter>,
    pub(super) notify_lag: Family<EraLabels, Histogram, HistogramMaker>,
    pub(super) notify_missed: Family<EraLabels, Counter>,
    pub(super) http: Family<HttpLabels, Counter>,
    pub(super) audit: Family<AuditLabels, Counter>,
    pub(super) jobs: Family<super::labels::JobLabels, Counter>,
    pub(super) approvals_pending: Gauge,
    pub(super) approval_decisions: Family<super::labels::JobLabels, Counter>,
}

fn command_buckets() -> Histogram {
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
        600.0, 1800.0,
    ])
}

fn wait_buckets() -> Histogram {
    Histogram::new([
        0.0001, 0.001, 0.01, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
    ])
}

fn lag_buckets() -> Histogram {
    Histogram::new([
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    ])
}

impl Families {
    fn new() -> Self {
        let mut registry = Registry::with_prefix(PREFIX);
        let f = Families {
            commands: Family::default(),
            command_duration: Family::new_with_constructor(command_buckets as HistogramMaker),
            commands_running: Gauge::default(),
            lock_wait: Family::new_with_constructor(wait_buckets as HistogramMaker),
            hotplug: Family::default(),
            devices_lost: Family::default(),
            notify_lag: Family::new_with_constructor(lag_buckets as HistogramMaker),
            notify_missed: Family::default(),
            http: Family::default(),
            audit: Family::default(),
            jobs: Family::default(),
            approvals_pending: Gauge::default(),
            approval_decisions: Family::default(),
            registry: Registry::default(),
        };
        registry.register(
            "commands",
            "execute_command calls by command, client and outcome (ok, failed, timed_out, cancelled, refused with its reason class, dry_run)",
            f.commands.clone(),
        );
        registry.register_with_unit(
            "command_duration",
            "Run time of the commands that ran, by command and outcome",
            Unit::Seconds,
            f.command_duration.clone(),
        );
        registry.register(
            "commands_running",
            "Commands running now (children of execute_command)",
            f.commands_running.clone(),
        );
        registry.register_with_unit(
            "lock_wait",
            "Time from asking for a lock key to getting it (0 when free) or giving up, by want (command, lease) and outcome (granted, gave_up)",
            Unit::Seconds,
            f.lock_wait.clone(),
        );
        registry.register(
            "hotplug_events",
            "Device registry changes by event (added, removed, changed) and device kind; devices present at start count as added",
            f.hotplug.clone(),
        );
        registry.register(
            "devices_lost_during_command",
            "Devices removed (past the re-enumeration grace) while, or just after, a command ran on them",
            f.devices_lost.clone(),
        );
        registry.register_with_unit(
            "notification_delivery",
            "Time from a change reaching a subscriber's stream to its resource notification written, by protocol era",
            Unit::Seconds,
            f.notify_lag.clone(),
        );
        registry.register(
            "notification_changes_missed",
            "Times a slow subscriber fell behind the change stream and was sent 'everything changed' instead",
            f.notify_missed.clone(),
        );
        registry.register(
            "http_requests",
            "HTTP answers on the main bind by route (mcp, health, metrics, other) and status code, including 401/403 and the connection cap's 503",
            f.http.clone(),
        );
        registry.register(
            "audit_records",
            "Audit records by result (written, failed, aggregated into a refusal summary, invalid)",
            f.audit.clone(),
        );
        registry.register(
            "jobs",
            "Jobs (background, detached or task-augmented execute_command runs) ended, by outcome (succeeded, failed, timed_out, cancelled, lost)",
            f.jobs.clone(),
        );
        registry.register(
            "approvals_pending",
            "Approval requests waiting for an approver's yes now (docs/APPROVALS.md)",
            f.approvals_pending.clone(),
        );
        registry.register(
            "approval_decisions",
            "Approval requests decided, by outcome (approved, denied, expired, withdrawn, lease_ended, unavailable)",
            f.approval_decisions.clone(),
        );
        for outcome in [
            "approved",
            "denied",
            "expired",
            "withdrawn",
            "lease_ended",
            "unavailable",
        ] {
            let _ = f
                .approval_decisions
                .get_or_create(&super::labels::JobLabels { outcome });
        }
        // The series alert rules watch exist from the start at 0, so that `increase()` sees
        // their first event (a series born at 1 has no increase).
        for result in [
            AuditResult::Written,
            AuditResult::Failed,
            AuditResult::Aggregated,
            AuditResult::Invalid,
        ] {
            let _ = f.audit.get_or_create(&AuditLabels {
                result: result.as_str(),
            });
        }
        for kind in DEVICE_KINDS {
            let _ = f.devices_lost.get_or_create(&KindLabels { kind });
        }
        for legacy in [true, false] {
            let _ = f.notify_missed.get_or_create(&era(legacy));
        }
        Families { registry, ..f }
    }
}

static FAMILIES: LazyLock<Families> = LazyLock::new(Families::new);

/// The process's counters and histograms.
pub fn families() -> &'static Families {
    &FAMILIES
}

/// The registry holding them, for the scrape side to render.
pub fn counters() -> &'static Registry {
    &FAMILIES.registry
}
