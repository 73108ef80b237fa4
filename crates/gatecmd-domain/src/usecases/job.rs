//! Ending a job, the one way every job ends (a command's, an approval's that never ran, a
//! flash's): its state and end recorded (waking its waiters), the `job_ended` audit line,
//! the `gatecmd_jobs_finished` count.

use std::sync::Arc;

use crate::audit::{Audit, JobRecord};
use crate::jobs::{Job, JobEnd, JobState, Jobs};

/// Ends `job` as `state` with `end`.
pub fn end_job(jobs: &Jobs, audit: &Audit, job: &Arc<Job>, state: JobState, end: JobEnd) {
    jobs.finish(job, state, end);
    let v = job.view();
    audit.record(&JobRecord::ended(
        &v.spec.client,
        &v.id.0,
        v.state.as_str(),
        v.end.ended_by.as_deref(),
        v.end.stop_reason.as_deref(),
    ));
    gatecmd_core::metrics::job_done(v.state.as_str());
}
