//! The audit lines of jobs (docs/AUDIT.md): who started one and how, who ended it and
//! why, and a foreground call that left its command running when its client gave up.
//! Plain data: the log imports no tool or job type.

use serde::Serialize;

/// One job event; serialised with `"event": "job_…"`.
#[derive(Debug, Serialize)]
#[serde(tag = "event")]
pub enum JobRecord<'a> {
    #[serde(rename = "job_started")]
    Started {
        client: &'a str,
        job: &'a str,
        /// `background`, `task` or `foreground` (a `cancel: detach` call).
        origin: &'a str,
    },
    /// A foreground call's client gave up; the command continues as the job.
    #[serde(rename = "job_detached")]
    Detached {
        client: &'a str,
        job: &'a str,
        why: &'a str,
    },
    /// `cancel_job` (or `tasks/cancel`) asked by `by`.
    #[serde(rename = "job_cancel_requested")]
    CancelRequested {
        client: &'a str,
        job: &'a str,
        by: &'a str,
    },
    #[serde(rename = "job_ended")]
    Ended {
        client: &'a str,
        job: &'a str,
        /// `succeeded`, `failed`, `timed_out`, `cancelled` or `lost`.
        state: &'a str,
        /// Who ended it early: a client name, `timeout`, `server shutdown`.
        #[serde(skip_serializing_if = "Option::is_none")]
        ended_by: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        why: Option<&'a str>,
    },
}

impl<'a> JobRecord<'a> {
    pub fn started(client: &'a str, job: &'a str, origin: &'a str) -> Self {
        JobRecord::Started {
            client,
            job,
            origin,
        }
    }

    pub fn detached(client: &'a str, job: &'a str, why: &'a str) -> Self {
        JobRecord::Detached { client, job, why }
    }

    pub fn cancel_requested(client: &'a str, job: &'a str, by: &'a str) -> Self {
        JobRecord::CancelRequested { client, job, by }
    }

    pub fn ended(
        client: &'a str,
        job: &'a str,
        state: &'a str,
        ended_by: Option<&'a str>,
        why: Option<&'a str>,
    ) -> Self {
        JobRecord::Ended {
            client,
            job,
            state,
            ended_by,
            why,
        }
    }
}
