//! The commands running now, for the bench page: who runs what on which board, since when,
//! and how far along (the command's `progress:` regex on its output).
//!
//! An entry lives exactly as long as its [`RunGuard`]: the run holds the guard with its
//! locks, so a command that ends, fails or is cancelled leaves the table with them. Every
//! change moves a version on a `watch` channel; readers (the page's event stream) wait on
//! it and read the whole table, so a burst of progress lines costs them one read.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use chrono::{DateTime, Utc};
use regex::Regex;
use serde::Serialize;
use tokio::sync::watch;

/// One running command as the page shows it.
#[derive(Debug, Clone, Serialize)]
pub struct RunningCommand {
    /// Unique while the server runs; the page keys its rows by it.
    pub id: u64,
    pub client: String,
    pub command: String,
    /// The command line as it runs (resolved file arguments included).
    pub argv: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub board: Option<String>,
    pub started_at: DateTime<Utc>,
    /// The highest percentage the output reported so far (0–100); none without a
    /// `progress:` regex or before the first match.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<f64>,
    /// Bytes moving now, for a run that moves them (flash_board): step, bytes done and
    /// total, rate, seconds left.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transfer: Option<crate::jobs::Transfer>,
    /// The job this run is (src/jobs/), when it runs apart from its call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
}

/// What a run tells the table when it starts.
pub struct NewRun {
    pub client: String,
    pub command: String,
    pub argv: Vec<String>,
    pub device: Option<String>,
    pub board: Option<String>,
    /// The command's `progress:` regex.
    pub progress: Option<Regex>,
}

/// The table of running commands; cheap to clone.
#[derive(Clone)]
pub struct Running {
    inner: Arc<Inner>,
}

struct Inner {
    // A std mutex: held for one map operation, never across an await.
    table: Mutex<Table>,
    changed: watch::Sender<u64>,
}

#[derive(Default)]
struct Table {
    next_id: u64,
    runs: BTreeMap<u64, RunningCommand>,
}

impl Default for Running {
    fn default() -> Self {
        Running {
            inner: Arc::new(Inner {
                table: Mutex::new(Table::default()),
                changed: watch::channel(0).0,
            }),
        }
    }
}

impl Running {
    /// Adds a run; it stays listed until the returned guard is dropped.
    pub fn start(&self, run: NewRun) -> RunGuard {
        let id = {
            let mut t = self.lock();
            t.next_id += 1;
            let id = t.next_id;
            t.runs.insert(
                id,
                RunningCommand {
                    id,
                    client: run.client,
                    command: run.command,
                    argv: run.argv,
                    device: run.device,
                    board: run.board,
                    started_at: Utc::now(),
                    progress: None,
                    transfer: None,
                    job: None,
                },
            );
            id
        };
        self.tick();
        RunGuard {
            running: self.clone(),
            id,
            regex: run.progress,
        }
    }

    /// Every running command, oldest first.
    pub fn list(&self) -> Vec<RunningCommand> {
        self.lock().runs.values().cloned().collect()
    }

    /// Moves each time a run starts, ends or reports a higher percentage.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.changed.subscribe()
    }

    fn tick(&self) {
        self.inner.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        match self.inner.table.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }
}

/// A run's place in the table; dropping it removes the run.
pub struct RunGuard {
    running: Running,
    id: u64,
    regex: Option<Regex>,
}

impl RunGuard {
    /// Whether this run's output is worth splitting into lines (it has a regex).
    pub fn watches_output(&self) -> bool {
        self.regex.is_some()
    }

    /// Names the job this run is, for the page's row.
    pub fn set_job(&self, job: &str) {
        if let Some(r) = self.running.lock().runs.get_mut(&self.id) {
            r.job = Some(job.to_string());
        }
        self.running.tick();
    }

    /// Records `p` (0-100) when it is higher than the run's percentage so far: for a run
    /// that knows its progress without output lines (flash_board counts bytes).
    pub fn set_progress(&self, p: f64) {
        let raised = {
            let mut t = self.running.lock();
            match t.runs.get_mut(&self.id) {
                Some(r) if p.is_finite() && r.progress.is_none_or(|h| p > h) => {
                    r.progress = Some(p.clamp(0.0, 100.0));
                    true
                }
                _ => false,
            }
        };
        if raised {
            self.running.tick();
        }
    }

    /// Records the bytes moving now (flash_board), for the page's row.
    pub fn set_transfer(&self, t: crate::jobs::Transfer) {
        if let Some(r) = self.running.lock().runs.get_mut(&self.id) {
            r.transfer = Some(t);
        }
        self.running.tick();
    }

    /// Looks for a percentage in an output line; a higher one is recorded. Returns whether
    /// the line reported one (the `LineTap::Latest` contract).
    pub fn offer(&self, line: &str) -> bool {
        let Some(re) = &self.regex else { return false };
        let Some(p) = crate::exec::progress::parse_percent(re, line) else {
            return false;
        };
        let raised = {
            let mut t = self.running.lock();
            match t.runs.get_mut(&self.id) {
                Some(r) if r.progress.is_none_or(|h| p > h) => {
                    r.progress = Some(p);
                    true
                }
                _ => false,
            }
        };
        if raised {
            self.running.tick();
        }
        true
    }
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        self.running.lock().runs.remove(&self.id);
        self.running.tick();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_run(re: Option<&str>) -> NewRun {
        NewRun {
            client: "vm-a".into(),
            command: "flash".into(),
            argv: vec!["/bin/flash".into(), "wl".into()],
            device: Some("1-2".into()),
            board: Some("b1".into()),
            progress: re.map(|r| Regex::new(r).expect("re")),
        }
    }

    #[test]
    fn a_run_is_listed_until_its_guard_goes_and_progress_only_rises() {
        let running = Running::default();
        let mut rx = running.subscribe();
        let guard = running.start(new_run(Some(r"\((\d+)%\)")));
        assert!(rx.has_changed().expect("open"));
        rx.mark_unchanged();
        assert_eq!(running.list().len(), 1);
        assert!(guard.offer("Write (40%)"));
        assert!(rx.has_changed().expect("open"));
        rx.mark_unchanged();
        assert!(guard.offer("Write (30%)"));
        assert!(
            !rx.has_changed().expect("open"),
            "a lower value is no change"
        );
        assert!(!guard.offer("no percentage here"));
        assert_eq!(running.list()[0].progress, Some(40.0));
        drop(guard);
        assert!(running.list().is_empty());
        assert!(rx.has_changed().expect("open"));
    }

    #[test]
    fn without_a_regex_nothing_is_parsed() {
        let running = Running::default();
        let guard = running.start(new_run(None));
        assert!(!guard.watches_output());
        assert!(!guard.offer("Write (40%)"));
        assert_eq!(running.list()[0].progress, None);
    }
}
