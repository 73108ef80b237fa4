//! A job as every surface shows it: `wait_job`, `cancel_job`, `list_jobs` and the
//! `gatecmd://jobs` resources render these. A job is its client's by name: any session of
//! that client finds it, no other client does.

use schemars::JsonSchema;
use serde::Serialize;

use super::devices::DeviceLeft;
use gatecmd_core::identity::ClientIdentity;
use gatecmd_domain::jobs::{JobState, JobView, Origin};
use gatecmd_domain::state::AppState;

/// One job as `list_jobs`, `cancel_job` and the resources show it.
#[derive(Debug, Serialize, JsonSchema)]
pub struct JobSummary {
    pub job: String,
    pub client: String,
    pub command: String,
    pub argv: Vec<String>,
    pub state: JobState,
    pub origin: Origin,
    /// The highest percentage its output reported (the command's `progress:` regex).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<f64>,
    /// Bytes moving now, for a job that moves them (`flash_board`): the step, bytes done
    /// and total, rate, seconds left.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transfer: Option<gatecmd_domain::jobs::Transfer>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    pub lock_keys: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub board: Option<String>,
    pub started_at: String,
    /// Run time so far, or in all once ended.
    pub duration_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// Who ended it early: a client name, `timeout`, `server shutdown`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_by: Option<String>,
    /// The device left the bus while the job ran (unplugged, powered off, reset): as in
    /// `execute_command`'s result.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_left: Option<DeviceLeft>,
    /// The approval request the job waits for (state `awaiting_approval`) or waited for
    /// (docs/APPROVALS.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval: Option<String>,
}

impl JobSummary {
    pub fn of(v: &JobView) -> JobSummary {
        JobSummary {
            job: v.id.0.clone(),
            client: v.spec.client.clone(),
            command: v.spec.command.clone(),
            argv: v.spec.argv.clone(),
            state: v.state,
            origin: v.origin,
            approval: v.approval.clone(),
            progress: v.progress,
            transfer: v.transfer.clone().filter(|_| v.state.is_running()),
            exit_code: v.end.exit_code,
            lock_keys: v.spec.lock_keys.clone(),
            device: v.spec.device.clone(),
            board: v.spec.board.clone(),
            started_at: v.started_at.to_rfc3339(),
            duration_ms: v.elapsed_ms,
            stop_reason: v.end.stop_reason.clone(),
            ended_by: v.end.ended_by.clone(),
            device_left: v
                .end
                .device_left
                .clone()
                .and_then(|d| serde_json::from_value(d).ok()),
        }
    }
}

/// Result of `list_jobs`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct JobList {
    pub jobs: Vec<JobSummary>,
    /// Jobs of yours that continued after you gave up on their call (told once).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notices: Vec<String>,
}

/// `gatecmd://jobs`: the caller's jobs, oldest first.
pub fn jobs_view(state: &AppState, who: &ClientIdentity) -> JobList {
    JobList {
        jobs: state
            .jobs
            .list(&who.name)
            .iter()
            .map(JobSummary::of)
            .collect(),
        notices: vec![],
    }
}

/// `gatecmd://jobs/{id}`: one of the caller's jobs.
pub fn job_view(state: &AppState, who: &ClientIdentity, id: &str) -> Option<JobSummary> {
    let job = state.jobs.get(&who.name, id).ok()?;
    Some(JobSummary::of(&job.view()))
}
