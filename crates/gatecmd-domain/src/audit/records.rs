//! The audit log's own record types. Tools hand them plain data (names, argv, numbers),
//! so the log depends on no tool, executor or lock type.

use std::time::Instant;

use gatecmd_core::events::{Events, RecvError};
use serde::Serialize;

use super::log::Audit;
use super::refusals::RefusalClass;

/// Lock events that are refusals are aggregated per client under this class.
const LOCK_REFUSED: RefusalClass = RefusalClass {
    event: "lock",
    kind: "refused",
};

/// Records every lock event from `events` until the sender goes away.
///
/// Runs as a task: `tokio::spawn(audit::record_lock_events(audit, locks.subscribe()))`.
/// An event is any record with `kind` and `client` fields; one whose `kind` is `refused`
/// is aggregated like other refusals. A subscriber that falls behind the broadcast buffer
/// loses events; that gap is recorded as a `lock_events_lost` line, so the log never
/// silently misses lock decisions.
pub async fn record_lock_events<E: Serialize + Clone>(audit: Audit, mut events: Events<E>) {
    loop {
        match events.recv().await {
            Ok(event) => audit.lock_event(&event),
            Err(RecvError::Lagged(missed)) => {
                tracing::warn!(missed, "the audit log fell behind the lock events");
                audit.record(&LockEventsLost {
                    event: "lock_events_lost",
                    missed,
                });
            }
            Err(RecvError::Closed) => break,
        }
    }
}

/// The audit writer fell behind the lock events: how many it missed.
#[derive(Serialize)]
struct LockEventsLost {
    event: &'static str,
    missed: u64,
}

/// A lock event as an audit line: `{"event": "lock", "kind": "taken", "key": …}`.
#[derive(Serialize)]
struct LockRecord<'a, E> {
    event: &'static str,
    #[serde(flatten)]
    inner: &'a E,
}

impl Audit {
    fn lock_event(&self, event: &impl Serialize) {
        let record = LockRecord {
            event: "lock",
            inner: event,
        };
        let refused_by = serde_json::to_value(event)
            .ok()
            .filter(|v| v["kind"] == "refused")
            .and_then(|v| v["client"].as_str().map(str::to_string));
        match refused_by {
            Some(client) => self.refusal(&client, LOCK_REFUSED, &record),
            None => self.record(&record),
        }
    }

    /// `execute_refused`: the call was refused before anything ran. `args` are the caller's
    /// as sent; `kind` is a stable name for the refusal's class (`policy`, `lock_busy`, …):
    /// refusals are aggregated per client and kind.
    pub fn execute_refused(
        &self,
        call: &ExecuteCall,
        args: &[String],
        kind: &'static str,
        reason: &str,
    ) {
        let class = RefusalClass {
            event: "execute_refused",
            kind,
        };
        let record = ExecuteRecord::Refused {
            call,
            args,
            refusal: RefusalTag { reason: kind },
            reason,
        };
        self.refusal(&call.client, class, &record);
    }

    /// `execute_dry_run`: every check passed and nothing was run.
    pub fn execute_dry_run(&self, call: &ExecuteCall, argv: &[String]) {
        self.record(&ExecuteRecord::DryRun { call, argv });
    }
}

/// The identity and request of an `execute_command` call, shared by its records.
#[derive(Debug, Clone, Serialize)]
pub struct ExecuteCall {
    /// The authenticated client name.
    pub client: String,
    /// The legacy MCP session, when the request carried one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// The command name as requested.
    pub command: String,
}

impl ExecuteCall {
    /// Who asks for what: the client's name, its legacy session id, the command as asked.
    pub fn new(client: &str, session: Option<&str>, command: &str) -> Self {
        ExecuteCall {
            client: client.to_string(),
            session: session.map(str::to_string),
            command: command.to_string(),
        }
    }
}

/// What an allowed run is about to do: the facts of `execute_started`.
#[derive(Debug, Clone, Default)]
pub struct RunStart {
    /// The argv as it will be executed (absolute binary, resolved file slots).
    pub argv: Vec<String>,
    /// The device id the run is bound to.
    pub device: Option<String>,
    /// Keys held exclusively while it runs.
    pub lock_keys: Vec<String>,
    pub timeout_secs: u64,
}

/// How a run ended, in the audit log's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunOutcome {
    /// Exited by itself, with an exit code.
    Exited,
    /// Killed by a signal nobody in gatecmd sent.
    Signalled,
    TimedOut,
    /// Cancelled by the client.
    Cancelled,
    /// Stopped because the server is shutting down.
    Shutdown,
}

/// The facts of `execute_finished`.
#[derive(Debug, Clone)]
pub struct RunEnd {
    pub outcome: RunOutcome,
    /// Null when the command did not exit by itself.
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub duration_ms: u64,
    /// Bytes the child wrote, including any dropped beyond the output cap.
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
}

/// `"refusal": {"reason": "forbidden_character"}` in a refused call's record.
#[derive(Debug, Serialize)]
struct RefusalTag {
    reason: &'static str,
}

/// An `execute_command` decision or outcome.
#[derive(Debug, Serialize)]
#[serde(tag = "event")]
enum ExecuteRecord<'a> {
    /// Refused before anything ran; `args` are the caller's, unresolved.
    #[serde(rename = "execute_refused")]
    Refused {
        #[serde(flatten)]
        call: &'a ExecuteCall,
        args: &'a [String],
        /// The refusal's stable reason, at the same path as in the tool's result.
        refusal: RefusalTag,
        reason: &'a str,
    },
    /// Checked and shown, not run.
    #[serde(rename = "execute_dry_run")]
    DryRun {
        #[serde(flatten)]
        call: &'a ExecuteCall,
        argv: &'a [String],
    },
    /// Allowed: written before the child is spawned, so a crash mid-run still shows it.
    #[serde(rename = "execute_started")]
    Started {
        #[serde(flatten)]
        call: &'a ExecuteCall,
        run_id: &'a str,
        argv: &'a [String],
        #[serde(skip_serializing_if = "Option::is_none")]
        device: Option<&'a str>,
        lock_keys: &'a [String],
        timeout_secs: u64,
    },
    /// How an allowed run ended.
    #[serde(rename = "execute_finished")]
    Finished {
        #[serde(flatten)]
        call: &'a ExecuteCall,
        run_id: &'a str,
        argv: &'a [String],
        #[serde(skip_serializing_if = "Option::is_none")]
        device: Option<&'a str>,
        lock_keys: &'a [String],
        /// `exited`, `signalled`, `timed_out`, `cancelled`, `shutdown` or `failed`.
        outcome: &'a str,
        exit_code: Option<i32>,
        #[serde(skip_serializing_if = "Option::is_none")]
        signal: Option<i32>,
        duration_ms: u64,
        timed_out: bool,
        cancelled: bool,
        stdout_bytes: u64,
        stderr_bytes: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<&'a str>,
    },
}

/// The audit trail of one allowed run: `execute_started` is written when the trail is
/// created (before the spawn), `execute_finished` by [`RunTrail::finished`] or
/// [`RunTrail::failed`]. Both carry the same `run_id`.
pub struct RunTrail {
    audit: Audit,
    call: ExecuteCall,
    run: RunStart,
    run_id: String,
    started: Instant,
}

impl RunTrail {
    /// Records that `run` was allowed and is about to start.
    pub fn start(audit: &Audit, call: ExecuteCall, run: RunStart) -> RunTrail {
        let run_id = uuid::Uuid::new_v4().simple().to_string();
        audit.record(&ExecuteRecord::Started {
            call: &call,
            run_id: &run_id,
            argv: &run.argv,
            device: run.device.as_deref(),
            lock_keys: &run.lock_keys,
            timeout_secs: run.timeout_secs,
        });
        RunTrail {
            audit: audit.clone(),
            call,
            run,
            run_id,
            started: Instant::now(),
        }
    }

    /// Records how the run ended.
    pub fn finished(&self, end: &RunEnd) {
        let outcome = match end.outcome {
            RunOutcome::Exited => "exited",
            RunOutcome::Signalled => "signalled",
            RunOutcome::TimedOut => "timed_out",
            RunOutcome::Cancelled => "cancelled",
            RunOutcome::Shutdown => "shutdown",
        };
        self.write(outcome, end, None);
    }

    /// Records that the run could not start or its task failed.
    pub fn failed(&self, error: &str) {
        let end = RunEnd {
            outcome: RunOutcome::Exited,
            exit_code: None,
            signal: None,
            duration_ms: self.started.elapsed().as_millis() as u64,
            stdout_bytes: 0,
            stderr_bytes: 0,
        };
        self.write("failed", &end, Some(error));
    }

    /// `end.outcome` is ignored when `error` is set: the run failed, it did not end.
    fn write(&self, outcome: &str, end: &RunEnd, error: Option<&str>) {
        let ended = error.is_none().then_some(end.outcome);
        self.audit.record(&ExecuteRecord::Finished {
            call: &self.call,
            run_id: &self.run_id,
            argv: &self.run.argv,
            device: self.run.device.as_deref(),
            lock_keys: &self.run.lock_keys,
            outcome,
            exit_code: end.exit_code,
            signal: end.signal,
            duration_ms: end.duration_ms,
            timed_out: ended == Some(RunOutcome::TimedOut),
            cancelled: matches!(ended, Some(RunOutcome::Cancelled | RunOutcome::Shutdown)),
            stdout_bytes: end.stdout_bytes,
            stderr_bytes: end.stderr_bytes,
            error,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::FILE_NAME;
    use crate::config::AuditSettings;
    use crate::locks::{LeaseRequest, LockManager, LockSettings};
    use serde_json::Value;
    use std::path::Path;
    use std::time::Duration;

    fn lines(path: &Path) -> Vec<Value> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("every line is whole JSON"))
            .collect()
    }

    #[test]
    fn execute_records_have_the_documented_shape() {
        let dir = tempfile::tempdir().expect("tempdir");
        let audit = Audit::open(dir.path(), &AuditSettings::default()).expect("open");
        let call = ExecuteCall::new("vm-a", None, "flash");
        audit.execute_refused(&call, &["wl".into(), "../x".into()], "policy", "no");
        let trail = RunTrail::start(
            &audit,
            call.clone(),
            RunStart {
                argv: vec!["/bin/true".into()],
                timeout_secs: 5,
                ..RunStart::default()
            },
        );
        trail.finished(&RunEnd {
            outcome: RunOutcome::Exited,
            exit_code: Some(0),
            signal: None,
            duration_ms: 3,
            stdout_bytes: 0,
            stderr_bytes: 0,
        });
        let timed = RunTrail::start(&audit, call.clone(), RunStart::default());
        timed.finished(&RunEnd {
            outcome: RunOutcome::TimedOut,
            exit_code: None,
            signal: None,
            duration_ms: 1000,
            stdout_bytes: 7,
            stderr_bytes: 0,
        });
        RunTrail::start(&audit, call.clone(), RunStart::default()).failed("no such file");
        audit.flush();
        let got = lines(&dir.path().join(FILE_NAME));
        assert_eq!(got[0]["event"], "execute_refused");
        assert_eq!(got[0]["client"], "vm-a");
        assert_eq!(got[0]["args"][1], "../x");
        assert_eq!(got[0]["reason"], "no");
        assert_eq!(got[0]["refusal"]["reason"], "policy");
        assert!(got[0].get("session").is_none());
        assert_eq!(got[1]["event"], "execute_started");
        assert_eq!(got[1]["timeout_secs"], 5);
        assert_eq!(got[2]["event"], "execute_finished");
        assert_eq!(got[2]["exit_code"], 0);
        assert_eq!(got[2]["run_id"], got[1]["run_id"]);
        assert_eq!(got[2]["argv"][0], "/bin/true");
        assert_eq!(got[4]["outcome"], "timed_out");
        assert_eq!(got[4]["timed_out"], true);
        assert_eq!(got[4]["cancelled"], false);
        assert_eq!(got[6]["outcome"], "failed");
        assert_eq!(got[6]["error"], "no such file");
        assert_eq!(got[6]["exit_code"], Value::Null);
    }

    #[tokio::test]
    async fn lock_events_are_recorded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let audit = Audit::open(dir.path(), &AuditSettings::default()).expect("open");
        let locks = LockManager::new(LockSettings::default());
        let task = tokio::spawn(record_lock_events(audit, locks.subscribe()));
        let key = "usb:2207:350b".parse().expect("key");
        let lease = locks
            .lock(LeaseRequest {
                key,
                client: "vm-a".into(),
                session: None,
                ttl: None,
                note: Some("flashing".into()),
                wait: Duration::ZERO,
                shared: vec![],
            })
            .await
            .expect("lease");
        locks
            .unlock(&lease.lease_id, &"vm-a".into())
            .expect("unlock");
        // The task ends when the last handle is gone and the channel closes.
        drop(locks);
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("task ends")
            .expect("task ok");
        let got = lines(&dir.path().join(FILE_NAME));
        let kinds: Vec<&str> = got.iter().filter_map(|v| v["kind"].as_str()).collect();
        assert_eq!(kinds, ["taken", "released"], "{got:?}");
        assert!(got.iter().all(|v| v["event"] == "lock"));
        assert_eq!(got[0]["key"], "usb:2207:350b");
        assert_eq!(got[0]["client"], "vm-a");
        assert!(got[0]["lease_id"].is_string());
    }

    #[tokio::test]
    async fn refused_lock_events_are_aggregated() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = AuditSettings {
            refusal_burst: 1,
            ..AuditSettings::default()
        };
        let audit = Audit::open(dir.path(), &s).expect("open");
        let tx = gatecmd_core::events::Broadcast::new(16);
        let task = tokio::spawn(record_lock_events(audit.clone(), tx.subscribe()));
        for _ in 0..4 {
            let sent =
                tx.send(serde_json::json!({"kind": "refused", "client": "vm-b", "key": "usb:1:2"}));
            assert_eq!(sent, 1);
        }
        let sent =
            tx.send(serde_json::json!({"kind": "taken", "client": "vm-a", "key": "usb:1:2"}));
        assert_eq!(sent, 1);
        drop(tx);
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("task ends")
            .expect("task ok");
        audit.flush();
        let got = lines(&dir.path().join(FILE_NAME));
        let events: Vec<&str> = got.iter().filter_map(|v| v["event"].as_str()).collect();
        assert_eq!(events, ["lock", "lock", "refusals_summarized"], "{got:?}");
        assert_eq!(got[2]["suppressed_by_reason"]["lock/refused"], 3);
    }
}
