//! The counters and histograms of the process, and the one call per thing that happens.
//!
//! They live in one process-wide set ([`families`]) rather than in `AppState`: the places
//! that count (the lock manager, the device registry, the audit log, the accept loop) are
//! built before and below the state, and one process serves one bench, so there is one set,
//! like there is one log. Every update is an atomic add on a series looked up in a small
//! map; label values are `&'static str` from enums here, or names from the configuration
//! (commands, clients), never request text. What is state rather than an event (leases,
//! devices, sessions) is not kept here: `census.rs` reads it from the state at each scrape.

use std::sync::LazyLock;
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use crate::devices::DeviceKind;
use crate::refusal::RefusalReason;

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
    fn as_str(self) -> &'static str {
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
    fn as_str(self) -> &'static str {
        match self {
            AuditResult::Written => "written",
            AuditResult::Failed => "failed",
            AuditResult::Aggregated => "aggregated",
            AuditResult::Invalid => "invalid",
        }
    }
}

/// The `kind` label of a device (`rockusb`, `rockchip_other`, `other`).
pub fn kind_label(kind: DeviceKind) -> &'static str {
    match kind {
        DeviceKind::Rockusb => "rockusb",
        DeviceKind::RockchipOther => "rockchip_other",
        DeviceKind::Other => "other",
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CommandLabels {
    command: String,
    client: String,
    outcome: &'static str,
    /// The refusal class; empty unless `outcome` is `refused`.
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DurationLabels {
    command: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WaitLabels {
    /// `command` or `lease`.
    want: &'static str,
    /// `granted` or `gave_up` (timed out, cancelled, refused while queued).
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HotplugLabels {
    /// `added`, `removed` or `changed`.
    event: &'static str,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EraLabels {
    /// `legacy` (2025-11-25 sessions) or `listen` (2026-07-28 `subscriptions/listen`).
    era: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HttpLabels {
    /// `mcp`, `health`, `metrics` or `other`.
    route: &'static str,
    code: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AuditLabels {
    result: &'static str,
}

type HistogramMaker = fn() -> Histogram;

/// The process's counters and histograms (see the module comment).
pub struct Families {
    pub(super) registry: Registry,
    commands: Family<CommandLabels, Counter>,
    command_duration: Family<DurationLabels, Histogram, HistogramMaker>,
    commands_running: Gauge,
    lock_wait: Family<WaitLabels, Histogram, HistogramMaker>,
    hotplug: Family<HotplugLabels, Counter>,
    devices_lost: Family<KindLabels, Counter>,
    notify_lag: Family<EraLabels, Histogram, HistogramMaker>,
    notify_missed: Family<EraLabels, Counter>,
    http: Family<HttpLabels, Counter>,
    audit: Family<AuditLabels, Counter>,
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
        for kind in [
            DeviceKind::Rockusb,
            DeviceKind::RockchipOther,
            DeviceKind::Other,
        ] {
            let _ = f.devices_lost.get_or_create(&KindLabels {
                kind: kind_label(kind),
            });
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

/// A bounded `command` label: the name when the configuration defines it, else `other`
/// (a refused call may name anything).
fn command_label(command: &str, configured: bool) -> String {
    if configured {
        command.to_string()
    } else {
        "other".to_string()
    }
}

/// Counts one `execute_command` call that ended in `outcome`. `configured` says whether
/// `command` is a configured name (an unknown one is counted as `other`). `reason` is the
/// refusal class of a refused call.
pub fn command_done(
    command: &str,
    configured: bool,
    client: &str,
    outcome: CommandOutcome,
    reason: Option<RefusalReason>,
    ran_for: Option<Duration>,
) {
    let f = families();
    let command = command_label(command, configured);
    if let Some(d) = ran_for {
        f.command_duration
            .get_or_create(&DurationLabels {
                command: command.clone(),
                outcome: outcome.as_str(),
            })
            .observe(d.as_secs_f64());
    }
    f.commands
        .get_or_create(&CommandLabels {
            command,
            client: client.to_string(),
            outcome: outcome.as_str(),
            reason: reason.map_or("", RefusalReason::as_str),
        })
        .inc();
}

/// Marks one command running until the returned value is dropped.
pub fn command_running() -> RunningCommand {
    families().commands_running.inc();
    RunningCommand(())
}

/// One running command in `gatecmd_commands_running`; dropping it ends it.
pub struct RunningCommand(());

impl Drop for RunningCommand {
    fn drop(&mut self) {
        families().commands_running.dec();
    }
}

/// Records a lock request that found its key free (a wait of 0).
pub fn lock_taken_at_once(lease: bool) {
    observe_wait(lease, "granted", 0.0);
}

/// Starts timing a queued lock request; records `gave_up` when dropped before
/// [`LockWait::granted`].
pub fn lock_queued(lease: bool) -> LockWait {
    LockWait {
        since: Instant::now(),
        lease,
        done: false,
    }
}

/// A queued lock request being timed (see [`lock_queued`]).
pub struct LockWait {
    since: Instant,
    lease: bool,
    done: bool,
}

impl LockWait {
    /// The key was handed over.
    pub fn granted(mut self) {
        self.done = true;
        observe_wait(self.lease, "granted", self.since.elapsed().as_secs_f64());
    }
}

impl Drop for LockWait {
    fn drop(&mut self) {
        if !self.done {
            observe_wait(self.lease, "gave_up", self.since.elapsed().as_secs_f64());
        }
    }
}

fn observe_wait(lease: bool, outcome: &'static str, secs: f64) {
    let want = if lease { "lease" } else { "command" };
    families()
        .lock_wait
        .get_or_create(&WaitLabels { want, outcome })
        .observe(secs);
}

/// Counts one registry change (`added`, `removed`, `changed`) of a device of `kind`.
pub fn hotplug(event: &'static str, kind: DeviceKind) {
    families()
        .hotplug
        .get_or_create(&HotplugLabels {
            event,
            kind: kind_label(kind),
        })
        .inc();
}

/// Counts a device of `kind` that went away while a command ran on it.
pub fn device_lost_during_command(kind: DeviceKind) {
    families()
        .devices_lost
        .get_or_create(&KindLabels {
            kind: kind_label(kind),
        })
        .inc();
}

/// Records a resource notification written `lag` after its change reached the stream.
/// `legacy`: a 2025-11-25 session; else a 2026-07-28 `subscriptions/listen`.
pub fn notification_sent(legacy: bool, lag: Duration) {
    families()
        .notify_lag
        .get_or_create(&era(legacy))
        .observe(lag.as_secs_f64());
}

/// Counts a subscriber that fell behind its change stream.
pub fn notification_changes_missed(legacy: bool) {
    families().notify_missed.get_or_create(&era(legacy)).inc();
}

fn era(legacy: bool) -> EraLabels {
    EraLabels {
        era: if legacy { "legacy" } else { "listen" },
    }
}

/// The `route` label of a request path: `mcp`, `health`, `metrics` or `other`.
pub fn route_of(path: &str) -> &'static str {
    match path {
        "/mcp" => "mcp",
        "/health" => "health",
        "/metrics" => "metrics",
        _ if path.starts_with("/mcp/") => "mcp",
        _ => "other",
    }
}

/// Counts one HTTP answer with `code` on `route` (from [`route_of`]; the connection cap's
/// 503 is sent before a path is read, so it counts as `other`).
pub fn http_answer(route: &'static str, code: u16) {
    families()
        .http
        .get_or_create(&HttpLabels { route, code })
        .inc();
}

/// Counts one audit record by what became of it.
pub fn audit_record(result: AuditResult) {
    families()
        .audit
        .get_or_create(&AuditLabels {
            result: result.as_str(),
        })
        .inc();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unconfigured_command_name_is_not_a_label() {
        assert_eq!(command_label("rm -rf /", false), "other");
        assert_eq!(command_label("rk", true), "rk");
    }

    #[test]
    fn a_wait_dropped_before_the_grant_counts_as_given_up() {
        // Other tests in this process wait for locks too: only "at least one more" holds.
        let before = gave_up_count();
        drop(lock_queued(true));
        assert!(gave_up_count() > before);
    }

    fn gave_up_count() -> u64 {
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &families().registry)
            .expect("encode");
        let series = "gatecmd_lock_wait_seconds_count{want=\"lease\",outcome=\"gave_up\"} ";
        text.lines()
            .find_map(|l| l.strip_prefix(series))
            .map_or(0, |n| n.parse().expect("a count"))
    }
}
