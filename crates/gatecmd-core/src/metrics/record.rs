//! The one call per thing that happens: tools, locks, the registry, notifications, the
//! HTTP layers and the audit log call these, and import nothing else of the metrics.

use std::time::{Duration, Instant};

use super::families::families;
use super::labels::{
    AuditLabels, AuditResult, CommandLabels, CommandOutcome, DurationLabels, HotplugLabels,
    HttpLabels, KindLabels, WaitLabels, command_label, era,
};
use crate::refusal::RefusalReason;

/// Counts one `execute_command` call that ended in `outcome` without running (a refusal,
/// a dry run). `configured` says whether `command` is a configured name (an unknown one
/// is counted as `other`); `reason` is the refusal class of a refused call.
pub fn command_done(
    command: &str,
    configured: bool,
    client: &str,
    outcome: CommandOutcome,
    reason: Option<RefusalReason>,
) {
    count(
        command_label(command, configured),
        client.to_string(),
        outcome,
        reason,
        None,
    );
}

fn count(
    command: String,
    client: String,
    outcome: CommandOutcome,
    reason: Option<RefusalReason>,
    ran_for: Option<Duration>,
) {
    let f = families();
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
            client,
            outcome: outcome.as_str(),
            reason: reason.map_or("", RefusalReason::as_str),
        })
        .inc();
}

/// Counts a job's end by its outcome (one of `JobState`'s names, never request text).
pub fn job_done(outcome: &'static str) {
    families()
        .jobs
        .get_or_create(&super::labels::JobLabels { outcome })
        .inc();
}

/// Counts an approval request made (one more pending).
pub fn approval_requested() {
    families().approvals_pending.inc();
}

/// Counts an approval request decided by `outcome` (one of the decision outcomes' names,
/// never request text); one fewer pending.
pub fn approval_decided(outcome: &'static str) {
    let f = families();
    f.approvals_pending.dec();
    f.approval_decisions
        .get_or_create(&super::labels::JobLabels { outcome })
        .inc();
}

/// Marks the configured `command` of `client` running until [`RunningCommand::finish`];
/// dropped unfinished (the request went away mid-run), it counts as `cancelled`.
pub fn command_running(command: &str, client: &str) -> RunningCommand {
    families().commands_running.inc();
    RunningCommand {
        command: command.to_string(),
        client: client.to_string(),
        since: Instant::now(),
        done: false,
    }
}

/// One running command in `gatecmd_commands_running` (see [`command_running`]).
pub struct RunningCommand {
    command: String,
    client: String,
    since: Instant,
    done: bool,
}

impl RunningCommand {
    /// Counts its end: `ran_for` for a command that ran, none for one that failed to start.
    pub fn finish(
        mut self,
        outcome: CommandOutcome,
        reason: Option<RefusalReason>,
        ran_for: Option<Duration>,
    ) {
        self.done = true;
        let command = std::mem::take(&mut self.command);
        let client = std::mem::take(&mut self.client);
        count(command, client, outcome, reason, ran_for);
    }
}

impl Drop for RunningCommand {
    fn drop(&mut self) {
        families().commands_running.dec();
        if !self.done {
            count(
                std::mem::take(&mut self.command),
                std::mem::take(&mut self.client),
                CommandOutcome::Cancelled,
                None,
                Some(self.since.elapsed()),
            );
        }
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
/// (`kind`: one of [`super::labels::DEVICE_KINDS`].)
pub fn hotplug(event: &'static str, kind: &'static str) {
    families()
        .hotplug
        .get_or_create(&HotplugLabels { event, kind })
        .inc();
}

/// Counts a device of `kind` that went away while a command ran on it.
pub fn device_lost_during_command(kind: &'static str) {
    families()
        .devices_lost
        .get_or_create(&KindLabels { kind })
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
