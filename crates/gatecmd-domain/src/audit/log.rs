//! The audit file: one bounded JSON line per record, appended, rotated and expired.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant, SystemTime};

use nix::fcntl::{Flock, FlockArg};
use serde::Serialize;
use serde_json::{Map, Value};
use tokio::sync::Notify;

use super::bound;
use super::chain::{self, CHAIN_BYTES, GENESIS, KeyError, Signer};
use super::refusals::{Admit, RefusalClass, Refusals};
use super::writer::{Sink, Writer};
use crate::config::AuditSettings;

/// The file name inside the state directory.
pub const FILE_NAME: &str = "audit.log";

/// How long after a failed rotation the next one is tried.
const ROTATE_RETRY: Duration = Duration::from_secs(10);
/// How often expiry by age runs while the server is up (besides at start and rotation).
const RETENTION_CHECK: Duration = Duration::from_secs(3600);

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
    #[error("cannot rotate the audit log {path}: {source}; records keep going to the current file")]
    Rotate {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("an audit record is not a JSON object: {0}")]
    NotAnObject(String),
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error(
        "another process writes the audit log in {dir} (it holds a lock on audit.key): one gatecmd per state directory, or the two would interleave the log's chain; stop the other, or give this one its own `state_dir`"
    )]
    InUse { dir: PathBuf },
    #[error("cannot read the audit log {path} to continue its chain: {source}")]
    ChainStart {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A cheap-to-clone handle to the audit log (or to nothing, when auditing is off).
///
/// A caller serializes and bounds its record (hashing a cut argument) and enqueues the
/// line; the writer thread (`writer`) seals it (`prev`, `sig`) and writes it under the
/// log's `std::sync::Mutex`, in enqueue order, with one `write(2)` per line. So a signature
/// costs the caller nothing; [`Audit::flush`] (the server's stop) returns once every line
/// enqueued before it is written and synced, and a `SIGKILL` can lose only the lines still
/// queued at that instant (docs/AUDIT.md "Writing").
#[derive(Clone)]
pub struct Audit {
    inner: Option<Arc<Shared>>,
    /// The last decisions for the bench page; kept also when the file is off.
    recent: super::recent::Recent,
}

struct Shared {
    /// Takes the lines to `log` off the callers' path.
    writer: Writer<Log>,
    log: Arc<Mutex<Log>>,
    /// `min(max_record_bytes, max_bytes)`, read without the lock.
    record_limit: AtomicUsize,
    /// Bytes a record gives up to the chain's `prev` and `sig` (0 when unsigned).
    chain_bytes: usize,
    /// Wakes the task that closes refusal windows: a window opened, or the log is gone.
    wake: Arc<Notify>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.wake.notify_one();
    }
}

struct Log {
    path: PathBuf,
    file: File,
    /// Bytes in the current file, to decide rotation without a `stat` per line.
    size: u64,
    settings: AuditSettings,
    refusals: Refusals,
    /// Set after a write error was logged, so a full disk does not flood the log.
    failing: bool,
    /// After a failed rotation (records then keep going to the current file), the next
    /// attempt waits until this instant instead of costing an fsync on every line.
    rotate_retry_at: Option<Instant>,
    last_retention: Instant,
    /// The key and the hash of the last line written (None: the bench's unsigned baseline).
    chain: Option<Chain>,
    /// The lock on `audit.key` that keeps a second process off this log while it lives.
    claim: Option<Flock<File>>,
}

/// What the next line is sealed with (docs/AUDIT.md "Chain and signatures").
struct Chain {
    signer: Signer,
    /// The hex SHA-256 of the last line written: the next line's `prev`.
    last: String,
}

impl Audit {
    /// Opens (creating if needed) `<state_dir>/audit.log`, owner-only, for appending, and
    /// deletes rotated files beyond `keep` or `max_age_days`. Inside a tokio runtime it also
    /// starts the task that writes refusal summaries when their window closes.
    ///
    /// Every line is chained and signed with the host's key, `<state_dir>/audit.key`,
    /// made here at the first start (owner-only).
    pub fn open(state_dir: &Path, settings: &AuditSettings) -> Result<Audit, AuditError> {
        create_state_dir(state_dir)?;
        let signer = Signer::load_or_create(state_dir)?;
        let claim = claim(state_dir)?;
        let audit = Audit::open_with(state_dir, settings, Some(signer))?;
        if let Some(s) = &audit.inner {
            lock(&s.log).claim = Some(claim);
        }
        Ok(audit)
    }

    /// A log whose lines carry no `prev` and `sig`: the bench's baseline only (what
    /// signing costs); nothing in gatecmd opens one.
    #[doc(hidden)]
    pub fn open_unsigned(state_dir: &Path, settings: &AuditSettings) -> Result<Audit, AuditError> {
        create_state_dir(state_dir)?;
        Audit::open_with(state_dir, settings, None)
    }

    fn open_with(
        state_dir: &Path,
        settings: &AuditSettings,
        signer: Option<Signer>,
    ) -> Result<Audit, AuditError> {
        let path = state_dir.join(FILE_NAME);
        let mut file = open_append(&path)?;
        let chain = match signer {
            Some(signer) => {
                let last = chain_start(&path, &mut file)?;
                tracing::info!(public_key = %signer.public_hex(), "audit log: lines are chained and signed");
                Some(Chain { signer, last })
            }
            None => None,
        };
        let chain_bytes = if chain.is_some() { CHAIN_BYTES } else { 0 };
        let size = file
            .metadata()
            .map(|m| m.len())
            .map_err(|source| AuditError::Open {
                path: path.clone(),
                source,
            })?;
        let mut log = Log {
            path,
            file,
            size,
            settings: settings.clone(),
            refusals: Refusals::new(
                settings.refusal_burst,
                Duration::from_secs(settings.refusal_window_secs),
            ),
            failing: false,
            rotate_retry_at: None,
            last_retention: Instant::now(),
            chain,
            claim: None,
        };
        log.retain();
        let log = Arc::new(Mutex::new(log));
        let shared = Arc::new(Shared {
            writer: Writer::start(log.clone()),
            log,
            record_limit: AtomicUsize::new(record_limit(settings)),
            chain_bytes,
            wake: Arc::new(Notify::new()),
        });
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(window_closer(Arc::downgrade(&shared), shared.wake.clone()));
        }
        Ok(Audit {
            inner: Some(shared),
            recent: Default::default(),
        })
    }

    /// A handle that records nothing (stdio without a writable state directory, unit tests).
    pub fn disabled() -> Audit {
        Audit {
            inner: None,
            recent: Default::default(),
        }
    }

    /// The last decisions (for the bench page), whether or not the file is on.
    pub fn recent(&self) -> &super::recent::Recent {
        &self.recent
    }

    /// Whether records go anywhere.
    pub fn is_enabled(&self) -> bool {
        self.inner.is_some()
    }

    /// The file records go to, when enabled.
    pub fn path(&self) -> Option<PathBuf> {
        self.inner.as_ref().map(|s| lock(&s.log).path.clone())
    }

    /// Applies new limits (after a configuration reload). The file itself stays: a changed
    /// `state_dir` takes effect at the next restart.
    pub fn configure(&self, settings: &AuditSettings) {
        if let Some(s) = &self.inner {
            let mut log = lock(&s.log);
            log.settings = settings.clone();
            log.refusals.configure(
                settings.refusal_burst,
                Duration::from_secs(settings.refusal_window_secs),
            );
            s.record_limit
                .store(record_limit(settings), Ordering::Relaxed);
            s.wake.notify_one();
        }
    }

    /// Appends `record` (which must serialize to a JSON object) with a `ts` field, cut to
    /// `audit.max_record_bytes` if it is longer (see `bound`).
    ///
    /// Never fails the caller: the decision already happened, and refusing service because
    /// the disk is full would turn an audit problem into an outage. A failure is logged
    /// once (until a write succeeds again).
    pub fn record(&self, record: &impl Serialize) {
        self.recent.push_record(record);
        self.write(record);
    }

    fn write(&self, record: &impl Serialize) {
        let Some(s) = &self.inner else { return };
        let max = s.record_limit.load(Ordering::Relaxed);
        let line = match to_line(record, max.saturating_sub(s.chain_bytes)) {
            Ok(line) => line,
            Err(e) => {
                tracing::error!(error = %e, "audit record dropped");
                gatecmd_core::metrics::audit_record(gatecmd_core::metrics::AuditResult::Invalid);
                return;
            }
        };
        s.writer.push(line);
    }

    /// Appends a refusal of `class` from `client`: in full for the first
    /// `audit.refusal_burst` of its class from that client in a window, only counted after
    /// that (the window's `refusals_summarized` record gives the counts).
    pub fn refusal(&self, client: &str, class: RefusalClass, record: &impl Serialize) {
        // The page's ring takes what the file takes: a client's refusal flood is summarized
        // there too, instead of pushing every other decision off the page.
        let Some(s) = &self.inner else {
            self.recent.push_record(record);
            return;
        };
        let admit = {
            let mut log = lock(&s.log);
            let now = Instant::now();
            log.close_windows(now, false);
            log.refusals.admit(client, class, now)
        };
        match admit {
            Admit::Count => {
                gatecmd_core::metrics::audit_record(gatecmd_core::metrics::AuditResult::Aggregated)
            }
            Admit::Write { opened } => {
                if opened {
                    s.wake.notify_one();
                }
                self.recent.push_record(record);
                self.write(record);
            }
        }
    }

    /// Writes every line enqueued so far and the summaries of every open refusal window,
    /// and syncs the file to disk; for shutdown (a `SIGKILL` loses only the counts of
    /// windows still open and the lines still queued).
    pub fn flush(&self) {
        if let Some(s) = &self.inner {
            s.writer.drain();
            lock(&s.log).flush();
        }
    }
}

/// The longest line: `max_record_bytes`, but never more than a whole file.
fn record_limit(s: &AuditSettings) -> usize {
    usize::try_from(s.max_record_bytes.min(s.max_bytes)).unwrap_or(usize::MAX)
}

/// Writes refusal summaries when their window closes, and expires old files hourly. Holds
/// the log only weakly, so it ends once every `Audit` handle is gone.
async fn window_closer(shared: Weak<Shared>, wake: Arc<Notify>) {
    loop {
        let next = {
            let Some(s) = shared.upgrade() else { return };
            let mut log = lock(&s.log);
            let now = Instant::now();
            log.close_windows(now, false);
            if now.duration_since(log.last_retention) >= RETENTION_CHECK {
                log.retain();
            }
            log.refusals.next_close()
        };
        let sleep = next.map_or(RETENTION_CHECK, |t| {
            t.saturating_duration_since(Instant::now())
        });
        tokio::select! {
            _ = tokio::time::sleep(sleep.min(RETENTION_CHECK)) => {}
            _ = wake.notified() => {}
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

/// An exclusive `flock` on `<state_dir>/audit.key`, held while the log is open: a second
/// gatecmd on the same state directory (a `stdio` session started with the service's)
/// would write lines chained to its own idea of the last line.
fn claim(state_dir: &Path) -> Result<Flock<File>, AuditError> {
    let path = state_dir.join(chain::KEY_FILE);
    let file = File::open(&path).map_err(|source| AuditError::Open {
        path: path.clone(),
        source,
    })?;
    Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|(_, errno)| {
        if errno == nix::errno::Errno::EWOULDBLOCK {
            AuditError::InUse {
                dir: state_dir.to_path_buf(),
            }
        } else {
            AuditError::Open {
                path,
                source: errno.into(),
            }
        }
    })
}

/// The `prev` of the next line: the hash of the last line of `audit.log`, or of
/// `audit.log.1` when `audit.log` is empty (a start right after a rotation), or
/// [`GENESIS`]. A last line cut by a crash is ended with `\n` and chained to as it is
/// (`gatecmd audit verify` names it).
fn chain_start(path: &Path, file: &mut File) -> Result<String, AuditError> {
    let err = |p: &Path| {
        let path = p.to_path_buf();
        move |source| AuditError::ChainStart { path, source }
    };
    if let Some((line, cut)) = chain::last_line(path).map_err(err(path))? {
        if cut {
            tracing::warn!(path = %path.display(), "audit log: its last line was cut (a crash while writing); ended it");
            file.write_all(b"\n").map_err(err(path))?;
        }
        return Ok(chain::line_hash(&line));
    }
    let mut rotated = path.as_os_str().to_owned();
    rotated.push(".1");
    let rotated = PathBuf::from(rotated);
    Ok(match chain::last_line(&rotated).map_err(err(&rotated))? {
        Some((line, _)) => chain::line_hash(&line),
        None => GENESIS.to_string(),
    })
}

/// `{"ts": now, ...record}` as one line ending in `\n`, at most `max` bytes.
fn to_line(record: &impl Serialize, max: usize) -> Result<Vec<u8>, AuditError> {
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
    Ok(bound::line(out, max))
}

impl Log {
    /// Appends one line (sealed with `prev` and `sig` when chained), rotating first when
    /// it would take the file past `max_bytes`. Sealing happens here, under the log's lock:
    /// `prev` is the line written just before, whoever wrote it.
    fn write(&mut self, line: &[u8]) {
        let sealed = (self.chain.as_ref()).map(|c| {
            let body = line.strip_suffix(b"\n").unwrap_or(line);
            c.signer.seal(body, &c.last)
        });
        let line = sealed.as_deref().unwrap_or(line);
        let len = line.len() as u64;
        // Never leave a file empty: a line larger than the limit still gets written.
        let due = self.rotate_retry_at.is_none_or(|t| Instant::now() >= t);
        if self.size > 0 && self.size + len > self.settings.max_bytes && due {
            match self.rotate() {
                Ok(()) => self.rotate_retry_at = None,
                Err(e) => {
                    if self.rotate_retry_at.is_none() {
                        tracing::error!(error = %e, "audit log rotation failed");
                    }
                    self.rotate_retry_at = Some(Instant::now() + ROTATE_RETRY);
                }
            }
        }
        // One `write_all` of the whole line on an O_APPEND file: the kernel places it at
        // the end in one piece (for a regular file, short writes happen only on errors
        // such as a full disk).
        match self.file.write_all(line) {
            Ok(()) => {
                self.size += len;
                self.failing = false;
                if let Some(c) = &mut self.chain {
                    c.last = chain::line_hash(line.strip_suffix(b"\n").unwrap_or(line));
                }
                gatecmd_core::metrics::audit_record(gatecmd_core::metrics::AuditResult::Written);
            }
            Err(source) => {
                gatecmd_core::metrics::audit_record(gatecmd_core::metrics::AuditResult::Failed);
                if !self.failing {
                    let e = AuditError::Write {
                        path: self.path.clone(),
                        source,
                    };
                    tracing::error!(error = %e, "audit log write failed; decisions are not being recorded");
                }
                self.failing = true;
            }
        }
    }

    /// Writes the summaries of refusal windows closed by `now` (all of them with `all`).
    fn close_windows(&mut self, now: Instant, all: bool) {
        let chained = if self.chain.is_some() { CHAIN_BYTES } else { 0 };
        let max = record_limit(&self.settings).saturating_sub(chained);
        for summary in self.refusals.close(now, all) {
            match to_line(&summary, max) {
                Ok(line) => self.write(&line),
                Err(e) => tracing::error!(error = %e, "audit summary dropped"),
            }
        }
    }

    fn flush(&mut self) {
        self.close_windows(Instant::now(), true);
        if let Err(e) = self.file.sync_data() {
            tracing::warn!(error = %e, "audit log: fsync failed");
        }
    }

    fn numbered(&self, n: u32) -> PathBuf {
        let mut p = self.path.clone().into_os_string();
        p.push(format!(".{n}"));
        PathBuf::from(p)
    }

    /// `audit.log.{keep-1}` → `audit.log.{keep}` … `audit.log` → `audit.log.1`, then a new
    /// `audit.log`. Until the new file is open, lines keep going to the old one through its
    /// open descriptor (renaming does not close it), so a failed rotation loses nothing.
    fn rotate(&mut self) -> Result<(), AuditError> {
        let err = |source| AuditError::Rotate {
            path: self.path.clone(),
            source,
        };
        // The old file's lines reach the disk before its name changes: once per rotation.
        self.file.sync_data().map_err(err)?;
        let keep = self.settings.keep;
        ignore_missing(std::fs::remove_file(self.numbered(keep))).map_err(err)?;
        for n in (1..keep).rev() {
            ignore_missing(std::fs::rename(self.numbered(n), self.numbered(n + 1))).map_err(err)?;
        }
        // Missing only after an earlier rotation renamed it and then failed to reopen.
        ignore_missing(std::fs::rename(&self.path, self.numbered(1))).map_err(err)?;
        self.file = open_append(&self.path)?;
        self.size = 0;
        // The renames and the new file's entry survive a power loss from here on.
        if let Some(dir) = self.path.parent()
            && let Err(e) = File::open(dir).and_then(|d| d.sync_all())
        {
            tracing::warn!(error = %e, "audit log: fsync of the state directory failed");
        }
        self.retain();
        Ok(())
    }

    /// Deletes rotated files numbered beyond `keep` (left by a larger `keep`) and, with
    /// `max_age_days`, those whose newest line (their mtime) is older than that. The current
    /// file is never deleted by age.
    fn retain(&mut self) {
        self.last_retention = Instant::now();
        let (Some(dir), Some(name)) = (self.path.parent(), self.path.file_name()) else {
            return;
        };
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let prefix = format!("{}.", name.to_string_lossy());
        let max_age = Duration::from_secs(u64::from(self.settings.max_age_days) * 86_400);
        for e in entries.flatten() {
            let file_name = e.file_name();
            let Some(n) = file_name
                .to_str()
                .and_then(|f| f.strip_prefix(&prefix))
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let age = e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| SystemTime::now().duration_since(t).ok());
            let too_old = self.settings.max_age_days > 0 && age.is_some_and(|a| a > max_age);
            if n > self.settings.keep || too_old {
                match std::fs::remove_file(e.path()) {
                    Ok(()) => {
                        tracing::info!(file = %e.path().display(), too_old, "audit log: old file deleted")
                    }
                    Err(err) => {
                        tracing::warn!(file = %e.path().display(), error = %err, "audit log: cannot delete an old file")
                    }
                }
            }
        }
    }
}

impl Sink for Log {
    /// The writer thread's one line: the windows closed by now first, as a caller's line
    /// used to do.
    fn write_line(&mut self, line: &[u8]) {
        self.close_windows(Instant::now(), false);
        self.write(line);
    }
}

impl Drop for Log {
    /// The last handle is gone: the open windows' counts are written, not lost.
    fn drop(&mut self) {
        self.flush();
    }
}

fn ignore_missing(r: std::io::Result<()>) -> std::io::Result<()> {
    match r {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(max_bytes: u64, keep: u32) -> AuditSettings {
        AuditSettings {
            max_bytes,
            keep,
            ..AuditSettings::default()
        }
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
        audit.flush();
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
        audit.flush();
        let got = lines(&path);
        assert_eq!(got[0]["event"], "old");
        assert_eq!(got[1]["event"], "new");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn rotation_shifts_files_and_keeps_at_most_keep() {
        let dir = tempfile::tempdir().expect("tempdir");
        // Each record is about 270 bytes with its chain: two fit under 600, the third rotates.
        let audit = Audit::open(dir.path(), &settings(600, 2)).expect("open");
        for n in 0..10 {
            audit.record(&serde_json::json!({"event": "x", "n": n}));
        }
        audit.flush();
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
            assert!(std::fs::metadata(p).expect("meta").len() <= 600);
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
        audit.flush();
        assert_eq!(lines(&dir.path().join("audit.log.1"))[0]["event"], "long");
        assert_eq!(lines(&dir.path().join(FILE_NAME))[0]["event"], "next");
    }

    #[test]
    fn a_failed_rotation_loses_no_record() {
        let dir = tempfile::tempdir().expect("tempdir");
        let audit = Audit::open(dir.path(), &settings(600, 2)).expect("open");
        // `audit.log.1` cannot be replaced by a file while it is a non-empty directory.
        let blocker = dir.path().join("audit.log.2");
        std::fs::create_dir(&blocker).expect("mkdir");
        std::fs::write(blocker.join("x"), "").expect("write");
        for n in 0..6 {
            audit.record(&serde_json::json!({"event": "x", "n": n}));
        }
        audit.flush();
        std::fs::remove_dir_all(&blocker).expect("rmdir");
        audit.record(&serde_json::json!({"event": "x", "n": 6}));
        audit.flush();
        let mut all: Vec<i64> = Vec::new();
        for name in ["audit.log.2", "audit.log.1", FILE_NAME] {
            all.extend(
                lines(&dir.path().join(name))
                    .iter()
                    .filter_map(|v| v["n"].as_i64()),
            );
        }
        assert_eq!(all, (0..7).collect::<Vec<_>>());
    }

    #[test]
    fn files_beyond_keep_or_max_age_are_deleted_at_open() {
        let dir = tempfile::tempdir().expect("tempdir");
        let old = SystemTime::now() - Duration::from_secs(3 * 86_400);
        for name in ["audit.log.1", "audit.log.2", "audit.log.9", "audit.log.x"] {
            std::fs::write(dir.path().join(name), "{}\n").expect("write");
        }
        let f = File::options()
            .write(true)
            .open(dir.path().join("audit.log.2"))
            .expect("open");
        f.set_modified(old).expect("mtime");
        let s = AuditSettings {
            keep: 5,
            max_age_days: 2,
            ..AuditSettings::default()
        };
        let _audit = Audit::open(dir.path(), &s).expect("open");
        let exists = |n: &str| dir.path().join(n).exists();
        assert!(exists("audit.log.1"), "young and within keep");
        assert!(!exists("audit.log.2"), "older than max_age_days");
        assert!(!exists("audit.log.9"), "beyond keep");
        assert!(exists("audit.log.x"), "not a rotated file");
    }

    #[test]
    fn a_flood_of_refusals_writes_a_few_and_a_summary() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = AuditSettings {
            refusal_burst: 2,
            ..AuditSettings::default()
        };
        let audit = Audit::open(dir.path(), &s).expect("open");
        let class = RefusalClass {
            event: "execute_refused",
            kind: "policy",
        };
        for n in 0..50 {
            audit.refusal(
                "vm-b",
                class,
                &serde_json::json!({"event": "execute_refused", "n": n, "pad": "y".repeat(20_000)}),
            );
        }
        audit.flush();
        let got = lines(&dir.path().join(FILE_NAME));
        assert_eq!(got.len(), 3, "{got:?}");
        assert!(got[0]["truncated_fields"][0]["bytes"] == 20_000);
        assert_eq!(got[2]["event"], "refusals_summarized");
        assert_eq!(got[2]["suppressed"], 48);
        assert_eq!(got[2]["suppressed_by_reason"]["execute_refused/policy"], 48);
        // The bench page's last decisions take what the file took, not the flood.
        assert_eq!(audit.recent().newest_first().len(), 2);
        let size = std::fs::metadata(dir.path().join(FILE_NAME))
            .expect("meta")
            .len();
        assert!(size < 3 * 8192, "{size}");
    }

    #[tokio::test]
    async fn a_summary_is_written_when_its_window_closes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = AuditSettings {
            refusal_burst: 1,
            refusal_window_secs: 1,
            ..AuditSettings::default()
        };
        let audit = Audit::open(dir.path(), &s).expect("open");
        let class = RefusalClass {
            event: "execute_refused",
            kind: "policy",
        };
        for _ in 0..3 {
            audit.refusal(
                "vm-b",
                class,
                &serde_json::json!({"event": "execute_refused"}),
            );
        }
        let path = dir.path().join(FILE_NAME);
        let deadline = Instant::now() + Duration::from_secs(5);
        while lines(&path).len() < 2 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let got = lines(&path);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[1]["event"], "refusals_summarized");
        assert_eq!(got[1]["suppressed"], 2);
    }

    #[test]
    fn disabled_records_nothing_and_non_objects_are_dropped() {
        Audit::disabled().record(&serde_json::json!({"event": "x"}));
        let dir = tempfile::tempdir().expect("tempdir");
        let audit = Audit::open(dir.path(), &AuditSettings::default()).expect("open");
        audit.record(&"just a string");
        audit.flush();
        assert!(lines(&dir.path().join(FILE_NAME)).is_empty());
    }

    #[test]
    fn a_second_writer_on_one_state_dir_is_refused_until_the_first_is_gone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = Audit::open(dir.path(), &AuditSettings::default()).expect("open");
        let second = Audit::open(dir.path(), &AuditSettings::default());
        assert!(
            matches!(second, Err(AuditError::InUse { .. })),
            "a second writer"
        );
        drop(first);
        Audit::open(dir.path(), &AuditSettings::default()).expect("free again");
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
}
