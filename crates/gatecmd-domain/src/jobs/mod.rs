//! Jobs: commands that run apart from the call that started them (`execute_command
//! {background: true}`, a `cancel: detach` command whose client gave up, a task-augmented
//! call). A job belongs to its client by name, not to a session, so a VM whose connection
//! dropped finds it again.
//!
//! The table is a cheap-to-clone handle on one `std` mutex (held for a map operation,
//! never across an await: a tokio mutex would only add cost), like mini-redis's `db.rs`.
//! Finished jobs are kept per client up to `jobs.keep_finished` and for
//! `jobs.keep_finished_secs` ([`expiry`]); running ones are bounded by the client's
//! command slots (`limits.max_concurrent_per_client`), so the table cannot grow without
//! bound whatever a client sends.
//!
//! `running`: the commands running now (jobs and calls alike), for the bench page.

pub mod expiry;
pub mod job;
pub mod running;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{Notify, broadcast, watch};

pub use job::{Job, JobEnd, JobId, JobSpec, JobState, JobView, Origin, Transfer};

use crate::config::JobSettings;

/// Why a job call was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobError {
    /// Unknown, forgotten, or another client's (not told apart: a client cannot probe
    /// for other clients' jobs).
    #[error(
        "no job {id} of client {client:?}: it never existed, belongs to another client, or was \
         forgotten (finished jobs are kept {keep} per client for {secs} s: jobs.keep_finished, \
         jobs.keep_finished_secs). list_jobs shows yours"
    )]
    Unknown {
        id: String,
        client: String,
        keep: usize,
        secs: u64,
    },
    #[error(
        "job {id} runs a command marked `cancel: never` (e.g. a bootloader write): it cannot be \
         cancelled and runs to its end; wait_job waits for it"
    )]
    Uncancellable { id: String },
}

/// The job table; cheap to clone.
#[derive(Clone)]
pub struct Jobs {
    shared: Arc<Shared>,
}

struct Shared {
    table: Mutex<Table>,
    /// The id of a job whose state, progress or detach changed (resources, notifications).
    events: broadcast::Sender<JobId>,
    /// Moves on every such change (the bench page waits on it).
    version: watch::Sender<u64>,
    /// Wakes the expiry task: a job ended, or the settings changed.
    expiry: Notify,
}

struct Table {
    next: u64,
    jobs: BTreeMap<u64, Arc<Job>>,
    settings: JobSettings,
}

impl Jobs {
    pub fn new(settings: JobSettings) -> Jobs {
        let jobs = Jobs {
            shared: Arc::new(Shared {
                table: Mutex::new(Table {
                    next: 0,
                    jobs: BTreeMap::new(),
                    settings,
                }),
                events: broadcast::channel(256).0,
                version: watch::channel(0).0,
                expiry: Notify::new(),
            }),
        };
        // Without a runtime (unit tests of the state) finished jobs still go when the
        // table is touched; the task only makes the retention time exact.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(expiry::run(Arc::downgrade(&jobs.shared)));
        }
        jobs
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.shared.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The settings in force.
    pub fn settings(&self) -> JobSettings {
        self.table().settings
    }

    /// Replaces the settings (config reload); a lower bound applies at once.
    pub fn set_settings(&self, settings: JobSettings) {
        let mut t = self.table();
        t.settings = settings;
        sweep(&mut t, None);
        drop(t);
        self.shared.expiry.notify_one();
    }

    /// Adds a running job for `spec.client`.
    pub fn start(&self, spec: JobSpec) -> Arc<Job> {
        self.add(spec, JobState::Running)
    }

    /// Adds a job for `spec.client` that waits for an approval before anything runs
    /// ([`Job::approved`] starts it).
    pub fn start_awaiting(&self, spec: JobSpec) -> Arc<Job> {
        self.add(spec, JobState::AwaitingApproval)
    }

    fn add(&self, spec: JobSpec, state: JobState) -> Arc<Job> {
        let mut t = self.table();
        t.next += 1;
        let n = t.next;
        let id = JobId(format!("job-{n}"));
        let job = Arc::new(Job::new(id, spec, t.settings.output_bytes.max(1), state));
        t.jobs.insert(n, job.clone());
        sweep(&mut t, Some(&job.spec.client));
        drop(t);
        self.changed(&job.id);
        job
    }

    /// Records the end of `job` and applies the retention bounds to its client.
    pub fn finish(&self, job: &Job, state: JobState, end: JobEnd) {
        // Under the table's lock (then the job's: the order every reader takes), so that
        // no reader sees one finished job more than the bound.
        let mut t = self.table();
        job.finish(state, end);
        sweep(&mut t, Some(&job.spec.client));
        drop(t);
        self.shared.expiry.notify_one();
        self.changed(&job.id);
    }

    /// Takes a job out of the table at once (a foreground call that was answered: nobody
    /// needs its handle).
    pub fn forget(&self, id: &JobId) {
        let mut t = self.table();
        t.jobs.retain(|_, j| &j.id != id);
        drop(t);
        self.changed(id);
    }

    /// `client`'s job `id`.
    pub fn get(&self, client: &str, id: &str) -> Result<Arc<Job>, JobError> {
        let t = self.table();
        let found = id
            .strip_prefix("job-")
            .and_then(|n| n.parse::<u64>().ok())
            .and_then(|n| t.jobs.get(&n))
            .filter(|j| j.spec.client == client && !expired(j, &t.settings));
        found.cloned().ok_or_else(|| JobError::Unknown {
            id: id.to_string(),
            client: client.to_string(),
            keep: t.settings.keep_finished,
            secs: t.settings.keep_finished_secs,
        })
    }

    /// `client`'s jobs, oldest first.
    pub fn list(&self, client: &str) -> Vec<JobView> {
        let t = self.table();
        t.jobs
            .values()
            .filter(|j| j.spec.client == client && !expired(j, &t.settings))
            .map(|j| j.view())
            .collect()
    }

    /// Every job, oldest first (the bench page, metrics, an admin).
    pub fn all(&self) -> Vec<JobView> {
        let t = self.table();
        t.jobs
            .values()
            .filter(|j| !expired(j, &t.settings))
            .map(|j| j.view())
            .collect()
    }

    /// Asks `client`'s running job `id` to stop (its process group gets SIGTERM, then
    /// SIGKILL); the job's task records the end. An ended job is returned as it is.
    pub fn cancel(&self, client: &str, id: &str) -> Result<Arc<Job>, JobError> {
        let job = self.get(client, id)?;
        if job.state().is_running() {
            // Nothing runs while a job awaits its approval: withdrawing it is always allowed.
            if job.spec.uncancellable && job.state() != JobState::AwaitingApproval {
                return Err(JobError::Uncancellable { id: id.to_string() });
            }
            job.note_cancel(client);
            job.cancel.cancel();
        }
        Ok(job)
    }

    /// The detached jobs `client` has not been told about yet; telling is taking.
    pub fn take_notices(&self, client: &str) -> Vec<JobView> {
        let jobs: Vec<Arc<Job>> = {
            let t = self.table();
            t.jobs
                .values()
                .filter(|j| j.spec.client == client)
                .cloned()
                .collect()
        };
        jobs.iter()
            .filter(|j| j.take_untold())
            .map(|j| j.view())
            .collect()
    }

    /// Ids of jobs whose state, progress or detach changed.
    pub fn subscribe(&self) -> broadcast::Receiver<JobId> {
        self.shared.events.subscribe()
    }

    /// Moves on every change [`Jobs::subscribe`] reports.
    pub fn version(&self) -> watch::Receiver<u64> {
        self.shared.version.subscribe()
    }

    /// Says that `id` changed (a job's task calls it on progress and detach).
    pub fn changed(&self, id: &JobId) {
        let _ = self.shared.events.send(id.clone());
        self.shared.version.send_modify(|v| *v = v.wrapping_add(1));
    }
}

fn expired(job: &Job, s: &JobSettings) -> bool {
    job.ended_at()
        .is_some_and(|t| t.elapsed() >= Duration::from_secs(s.keep_finished_secs))
}

/// Forgets finished jobs past the retention time, and for `client` (or every client)
/// the oldest finished ones past `jobs.keep_finished`.
fn sweep(t: &mut Table, client: Option<&str>) {
    let settings = t.settings;
    t.jobs.retain(|_, j| !expired(j, &settings));
    let clients: Vec<String> = match client {
        Some(c) => vec![c.to_string()],
        None => {
            let c: std::collections::BTreeSet<String> =
                t.jobs.values().map(|j| j.spec.client.clone()).collect();
            c.into_iter().collect()
        }
    };
    for c in clients {
        let finished: Vec<u64> = t
            .jobs
            .iter()
            .filter(|(_, j)| j.spec.client == c && !j.state().is_running())
            .map(|(n, _)| *n)
            .collect();
        let excess = finished.len().saturating_sub(settings.keep_finished);
        // Ids grow with the start: the oldest started go first.
        for n in finished.into_iter().take(excess) {
            t.jobs.remove(&n);
        }
    }
}

#[cfg(test)]
mod tests;
