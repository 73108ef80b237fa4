//! The audit log: one JSON line per decision, in `<state_dir>/audit.log`.
//!
//! Every `execute_command` decision (refused with its reason, allowed and started, and how
//! it ended) and every lock event becomes one line. The file is owner-only (0600), opened
//! with `O_APPEND`, and each record is written with a single `write_all` of the whole line
//! straight to the kernel (no user-space buffer). So once [`Audit::record`] returns, the
//! line survives a crash of gatecmd (even `SIGKILL`); a crash can at worst cut the one line
//! being written at that instant. (A power loss is another matter: there is no `fsync` per
//! line, which would cost milliseconds per call on a slow disk.)
//!
//! When the file would grow past `audit.max_bytes`, it is rotated first:
//! `audit.log.{keep-1}` → `audit.log.{keep}` … `audit.log` → `audit.log.1`, and the oldest
//! beyond `keep` is dropped.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::Serialize;
use serde_json::{Map, Value};
use tokio::sync::broadcast;

use crate::config::AuditSettings;
use crate::exec::{Outcome, StopReason};
use crate::locks::LockEvent;
use crate::tools::execute::ExecuteResult;

/// The file name inside the state directory.
pub const FILE_NAME: &str = "audit.log";

/// Why the audit log cannot be opened or written.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error(
        "cannot create the state directory {dir} for the audit log: {source}; \
         set `state_dir` to a directory gatecmd may write"
    )]
    CreateDir {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "cannot open the audit log {path}: {source}; check that gatecmd may write its state directory"
    )]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot make the audit log {path} owner-only: {source}")]
    Chmod {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write the audit log {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot rotate the audit log {path}: {source}")]
    Rotate {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("an audit record is not a JSON object: {0}")]
    NotAnObject(String),
}

/// A cheap-to-clone handle to the audit log (or to nothing, when auditing is off).
///
/// Writes are synchronous under a `std::sync::Mutex`, on purpose:
/// - the critical section is one `write(2)` of one line (plus, rarely, a few renames), with
///   no `.await`, so a tokio mutex would only add overhead;
/// - a writer task fed by a channel would keep records in user space after `record`
///   returned, and a `SIGKILL` would lose them; here a returned `record` means the line is
///   in the kernel;
/// - one writer at a time also keeps lines whole and in order across rotations.
#[derive(Clone)]
pub struct Audit {
    inner: Option<Arc<Mutex<Log>>>,
}

struct Log {
    path: PathBuf,
    file: File,
    /// Bytes in the current file, to decide rotation without a `stat` per line.
    size: u64,
    settings: AuditSettings,
    /// Set after a write error was logged, so a full disk does not flood the log.
    failing: bool,
}

impl Audit {
    /// Opens (creating if needed) `<state_dir>/audit.log`, owner-only, for appending.
    pub fn open(state_dir: &Path, settings: &AuditSettings) -> Result<Audit, AuditError> {
        create_state_dir(state_dir)?;
        let path = state_dir.join(FILE_NAME);
        let file = open_append(&path)?;
        let size = file
            .metadata()
            .map(|m| m.len())
            .map_err(|source| AuditError::Open {
                path: path.clone(),
                source,
            })?;
        Ok(Audit {
            inner: Some(Arc::new(Mutex::new(Log {
                path,
                file,
                size,
                settings: settings.clone(),
                failing: false,
            }))),
        })
    }

    /// A handle that records nothing (stdio without a writable state directory, unit tests).
    pub fn disabled() -> Audit {
        Audit { inner: None }
    }

    /// Whether records go anywhere.
    pub fn is_enabled(&self) -> bool {
        self.inner.is_some()
    }

    /// The file records go to, when enabled.
    pub fn path(&self) -> Option<PathBuf> {
        self.inner.as_ref().map(|l| lock(l).path.clone())
    }

    /// Applies new rotation limits (after a configuration reload). The file itself stays:
    /// a changed `state_dir` takes effect at the next restart.
    pub fn configure(&self, settings: &AuditSettings) {
        if let Some(l) = &self.inner {
            lock(l).settings = settings.clone();
        }
    }

    /// Appends `record` (which must serialize to a JSON object) with a `ts` field first.
    ///
    /// Never fails the caller: the decision already happened, and refusing service because
    /// the disk is full would turn an audit problem into an outage. A failure is logged
    /// once (until a write succeeds again).
    pub fn record(&self, record: &impl Serialize) {
        let Some(l) = &self.inner else { return };
        let line = match to_line(record) {
            Ok(line) => line,
            Err(e) => {
                tracing::error!(error = %e, "audit record dropped");
                return;
            }
        };
        let mut log = lock(l);
        match log.append(&line) {
            Ok(()) => log.failing = false,
            Err(e) => {
                if !log.failing {
                    tracing::error!(error = %e, "audit log write failed; decisions are not being recorded");
                }
                log.failing = true;
            }
        }
    }
}

/// A panic while holding the lock cannot leave the file in a state worse than a cut line,
/// so a poisoned mutex is used as it is rather than silencing the audit log for good.
fn lock(l: &Mutex<Log>) -> MutexGuard<'_, Log> {
    l.lock().unwrap_or_else(|p| p.into_inner())
}

fn create_state_dir(dir: &Path) -> Result<(), AuditError> {
    std::fs::create_dir_all(dir).map_err(|source| AuditError::CreateDir {
        dir: dir.to_path_buf(),
        source,
    })
}

fn open_append(path: &Path) -> Result<File, AuditError> {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .map_err(|source| AuditError::Open {
            path: path.to_path_buf(),
            source,
        })?;
    // `mode` applies only when the file is created; an older file (or one created under a
    // lax umask by someone else) is tightened here.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(|source| AuditError::Chmod {
            path: path.to_path_buf(),
            source,
        })?;
    Ok(file)
}

/// `{"ts": now, ...record}` as one line ending in `\n`.
fn to_line(record: &impl Serialize) -> Result<Vec<u8>, AuditError> {
    let value = serde_json::to_value(record).map_err(|e| AuditError::NotAnObject(e.to_string()))?;
    let Value::Object(fields) = value else {
        return Err(AuditError::NotAnObject(value.to_string()));
    };
    let mut out = Map::new();
    out.insert(
        "ts".into(),
        Value::String(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
    );
    // A record's own `ts` (none today) would win over ours.
    out.extend(fields);
    let mut line = serde_json::to_vec(&Value::Object(out))
        .map_err(|e| AuditError::NotAnObject(e.to_string()))?;
    line.push(b'\n');
    Ok(line)
}

impl Log {
    fn append(&mut self, line: &[u8]) -> Result<(), AuditError> {
        let len = line.len() as u64;
        // Rotate before a write that would cross the limit, but never leave a file empty:
        // a single line larger than the limit still gets written.
        if self.size > 0 && self.size + len > self.settings.max_bytes {
            self.rotate()?;
        }
        // One `write_all` of the whole line on an O_APPEND file: the kernel places it at
        // the end in one piece (for a regular file, short writes happen only on errors
        // such as a full disk).
        self.file
            .write_all(line)
            .map_err(|source| AuditError::Write {
                path: self.path.clone(),
                source,
            })?;
        self.size += len;
        Ok(())
    }

    fn rotate(&mut self) -> Result<(), AuditError> {
        let err = |source| AuditError::Rotate {
            path: self.path.clone(),
            source,
        };
        let keep = self.settings.keep;
        let numbered = |n: u32| {
            let mut p = self.path.clone().into_os_string();
            p.push(format!(".{n}"));
            PathBuf::from(p)
        };
        // Drop the oldest, then shift each one up: .{keep-1} → .{keep}, …, .1 → .2.
        match std::fs::remove_file(numbered(keep)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(err(e)),
        }
        for n in (1..keep).rev() {
            match std::fs::rename(numbered(n), numbered(n + 1)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(err(e)),
            }
        }
        std::fs::rename(&self.path, numbered(1)).map_err(err)?;
        self.file = open_append(&self.path)?;
        self.size = 0;
        Ok(())
    }
}

/// Records every lock event from `events` until the lock manager goes away.
///
/// Runs as a task: `tokio::spawn(audit::record_lock_events(audit, locks.subscribe()))`.
/// A subscriber that falls behind the broadcast buffer loses events; that gap is recorded
/// as a `lock_events_lost` line, so the log never silently misses lock decisions.
pub async fn record_lock_events(audit: Audit, mut events: broadcast::Receiver<LockEvent>) {
    loop {
        match events.recv().await {
            Ok(event) => audit.record(&LockRecord::from(&event)),
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                tracing::warn!(missed, "the audit log fell behind the lock events");
                audit.record(&serde_json::json!({"event": "lock_events_lost", "missed": missed}));
            }
            Err(broadcast::error::RecvError::Closed) => break,
        }
    }
}

/// A lock event as an audit line: `{"event": "lock", "kind": "taken", "key": …}`.
#[derive(Serialize)]
struct LockRecord<'a> {
    event: &'static str,
    #[serde(flatten)]
    inner: &'a LockEvent,
}

impl<'a> From<&'a LockEvent> for LockRecord<'a> {
    fn from(inner: &'a LockEvent) -> Self {
        LockRecord {
            event: "lock",
            inner,
        }
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

/// An `execute_command` decision or outcome.
#[derive(Debug, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum ExecuteRecord<'a> {
    /// Refused before anything ran; `args` are the caller's, unresolved.
    ExecuteRefused {
        #[serde(flatten)]
        call: &'a ExecuteCall,
        args: &'a [String],
        reason: &'a str,
    },
    /// Checked and shown, not run.
    ExecuteDryRun {
        #[serde(flatten)]
        call: &'a ExecuteCall,
        argv: &'a [String],
    },
    /// Allowed: written before the child is spawned, so a crash mid-run still shows it.
    ExecuteStarted {
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
    ExecuteFinished {
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
        /// Bytes the child wrote, including any dropped beyond the cap.
        stdout_bytes: u64,
        stderr_bytes: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<&'a str>,
    },
}

impl ExecuteCall {
    /// Who asks for what, from the request.
    pub fn new(
        who: &crate::auth::ClientIdentity,
        session: Option<&crate::locks::SessionId>,
        command: &str,
    ) -> Self {
        ExecuteCall {
            client: who.name.clone(),
            session: session.map(|s| s.0.clone()),
            command: command.to_string(),
        }
    }
}

/// The audit trail of one allowed run: `execute_started` is written when the trail is
/// created (before the spawn), `execute_finished` by [`RunTrail::finished`] or
/// [`RunTrail::failed`]. Both carry the same `run_id`.
pub struct RunTrail {
    audit: Audit,
    call: ExecuteCall,
    run_id: String,
}

impl RunTrail {
    /// Records that `result`'s command was allowed and is about to start.
    pub fn start(audit: &Audit, call: ExecuteCall, result: &ExecuteResult) -> RunTrail {
        let run_id = uuid::Uuid::new_v4().simple().to_string();
        audit.record(&ExecuteRecord::ExecuteStarted {
            call: &call,
            run_id: &run_id,
            argv: &result.argv,
            device: result.device.as_deref(),
            lock_keys: &result.lock_keys,
            timeout_secs: result.timeout_secs,
        });
        RunTrail {
            audit: audit.clone(),
            call,
            run_id,
        }
    }

    /// Records how the run ended; `result` must already be filled from `outcome`.
    pub fn finished(&self, result: &ExecuteResult, outcome: &Outcome) {
        let ended = match outcome.stopped {
            Some(StopReason::Timeout) => "timed_out",
            Some(StopReason::Cancelled) => "cancelled",
            Some(StopReason::Shutdown) => "shutdown",
            None if outcome.exit_code.is_some() => "exited",
            None => "signalled",
        };
        self.write(
            result,
            ended,
            outcome.stdout.len() as u64 + outcome.stdout_dropped,
            outcome.stderr.len() as u64 + outcome.stderr_dropped,
            None,
        );
    }

    /// Records that the run could not start or its task failed.
    pub fn failed(&self, result: &ExecuteResult, error: &str) {
        self.write(result, "failed", 0, 0, Some(error));
    }

    fn write(
        &self,
        r: &ExecuteResult,
        outcome: &str,
        stdout_bytes: u64,
        stderr_bytes: u64,
        error: Option<&str>,
    ) {
        self.audit.record(&ExecuteRecord::ExecuteFinished {
            call: &self.call,
            run_id: &self.run_id,
            argv: &r.argv,
            device: r.device.as_deref(),
            lock_keys: &r.lock_keys,
            outcome,
            exit_code: r.exit_code,
            signal: r.signal,
            duration_ms: r.duration_ms,
            timed_out: r.timed_out,
            cancelled: r.cancelled,
            stdout_bytes,
            stderr_bytes,
            error,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::locks::{LeaseRequest, LockManager, LockSettings};
    use std::time::Duration;

    fn settings(max_bytes: u64, keep: u32) -> AuditSettings {
        AuditSettings { max_bytes, keep }
    }

    fn lines(path: &Path) -> Vec<Value> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("every line is whole JSON"))
            .collect()
    }

    #[test]
    fn records_are_json_lines_with_ts_in_an_owner_only_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state");
        let audit = Audit::open(&state, &AuditSettings::default()).expect("open");
        audit.record(&serde_json::json!({"event": "a", "n": 1}));
        audit.clone().record(&serde_json::json!({"event": "b"}));
        let path = state.join(FILE_NAME);
        let got = lines(&path);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0]["event"], "a");
        assert_eq!(got[1]["event"], "b");
        assert!(got[0]["ts"].as_str().is_some_and(|t| t.ends_with('Z')));
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn an_existing_lax_file_is_tightened_and_appended_to() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(FILE_NAME);
        std::fs::write(&path, "{\"event\":\"old\"}\n").expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let audit = Audit::open(dir.path(), &AuditSettings::default()).expect("open");
        audit.record(&serde_json::json!({"event": "new"}));
        let got = lines(&path);
        assert_eq!(got[0]["event"], "old");
        assert_eq!(got[1]["event"], "new");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn rotation_shifts_files_and_keeps_at_most_keep() {
        let dir = tempfile::tempdir().expect("tempdir");
        // Each record is about 50 bytes: two fit under 120, the third rotates.
        let audit = Audit::open(dir.path(), &settings(120, 2)).expect("open");
        for n in 0..10 {
            audit.record(&serde_json::json!({"event": "x", "n": n}));
        }
        let base = dir.path().join(FILE_NAME);
        let cur = lines(&base);
        let one = lines(&dir.path().join("audit.log.1"));
        let two = lines(&dir.path().join("audit.log.2"));
        assert!(!dir.path().join("audit.log.3").exists());
        assert_eq!(cur.last().expect("current")["n"], 9);
        // Newest in audit.log, older ones shifted up, nothing out of order.
        let all: Vec<i64> = two
            .iter()
            .chain(&one)
            .chain(&cur)
            .filter_map(|v| v["n"].as_i64())
            .collect();
        assert!(all.windows(2).all(|w| w[1] == w[0] + 1), "{all:?}");
        for p in [&base, &dir.path().join("audit.log.1")] {
            assert!(std::fs::metadata(p).expect("meta").len() <= 120);
            let mode = std::fs::metadata(p).expect("meta").permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn a_line_longer_than_the_limit_is_still_written_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        let audit = Audit::open(dir.path(), &settings(10, 1)).expect("open");
        audit.record(&serde_json::json!({"event": "long", "pad": "x".repeat(100)}));
        audit.record(&serde_json::json!({"event": "next"}));
        assert_eq!(lines(&dir.path().join("audit.log.1"))[0]["event"], "long");
        assert_eq!(lines(&dir.path().join(FILE_NAME))[0]["event"], "next");
    }

    #[test]
    fn disabled_records_nothing_and_non_objects_are_dropped() {
        Audit::disabled().record(&serde_json::json!({"event": "x"}));
        let dir = tempfile::tempdir().expect("tempdir");
        let audit = Audit::open(dir.path(), &AuditSettings::default()).expect("open");
        audit.record(&"just a string");
        assert!(lines(&dir.path().join(FILE_NAME)).is_empty());
    }

    #[test]
    fn an_unwritable_state_dir_is_a_clear_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("not-a-dir");
        std::fs::write(&file, "").expect("write");
        let err = Audit::open(&file.join("state"), &AuditSettings::default())
            .err()
            .expect("must fail");
        assert!(err.to_string().contains("state_dir"), "{err}");
    }

    #[test]
    fn execute_records_have_the_documented_shape() {
        let dir = tempfile::tempdir().expect("tempdir");
        let audit = Audit::open(dir.path(), &AuditSettings::default()).expect("open");
        let call = ExecuteCall {
            client: "vm-a".into(),
            session: None,
            command: "flash".into(),
        };
        audit.record(&ExecuteRecord::ExecuteRefused {
            call: &call,
            args: &["wl".into(), "../x".into()],
            reason: "no",
        });
        audit.record(&ExecuteRecord::ExecuteFinished {
            call: &call,
            run_id: "r1",
            argv: &["/bin/true".into()],
            device: None,
            lock_keys: &[],
            outcome: "exited",
            exit_code: Some(0),
            signal: None,
            duration_ms: 3,
            timed_out: false,
            cancelled: false,
            stdout_bytes: 0,
            stderr_bytes: 0,
            error: None,
        });
        let got = lines(&dir.path().join(FILE_NAME));
        assert_eq!(got[0]["event"], "execute_refused");
        assert_eq!(got[0]["client"], "vm-a");
        assert_eq!(got[0]["args"][1], "../x");
        assert_eq!(got[0]["reason"], "no");
        assert!(got[0].get("session").is_none());
        assert_eq!(got[1]["event"], "execute_finished");
        assert_eq!(got[1]["exit_code"], 0);
        assert_eq!(got[1]["run_id"], "r1");
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
}
