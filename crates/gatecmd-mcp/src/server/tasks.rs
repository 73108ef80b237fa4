//! The MCP tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663, in rmcp 3.11) mapped
//! onto jobs: a task-augmented `execute_command` or `flash_board` is a job whose id is the
//! task id;
//! `tasks/get` reads the job, `tasks/cancel` is `cancel_job`, and the final result is
//! the tool result the command would have answered in the foreground.
//!
//! rmcp's own `TaskManager` is not used: it owns the future it runs and keys tasks by a
//! UUID per server, where a job must belong to a client across sessions and hold the
//! run's locks; the mapping below is the part of it gatecmd needs.

use rmcp::ErrorData as McpError;
use rmcp::model::{DetailedTask, GetTaskResult, JsonObject, Task, TaskPayload, TaskStatus};

use crate::calls::jobs::{TASK_POLL_MS, job_refusal};
use gatecmd_core::identity::ClientIdentity;
use gatecmd_domain::jobs::JobState;
use gatecmd_domain::state::AppState;

/// `tasks/get`: the job as a task; a finished one carries its tool result.
pub fn get(state: &AppState, who: &ClientIdentity, id: &str) -> Result<GetTaskResult, McpError> {
    let job = state
        .jobs
        .get(&who.name, id)
        .map_err(|e| McpError::invalid_params(job_refusal(e).message, None))?;
    let v = job.view();
    let at = v.started_at.to_rfc3339();
    let mut task = Task::new(
        v.id.0.clone(),
        TaskStatus::Working,
        at,
        chrono::Utc::now().to_rfc3339(),
    )
    .with_poll_interval_ms(TASK_POLL_MS)
    .with_ttl_ms(
        state
            .jobs
            .settings()
            .keep_finished_secs
            .saturating_mul(1000),
    );
    let payload = match v.state {
        JobState::AwaitingApproval => {
            task = task
                .with_status_message("awaiting approval: nothing runs until an approver says yes");
            TaskPayload::Working
        }
        JobState::Running => {
            let transfer = v
                .transfer
                .as_ref()
                .map(|t| format!(": {}", t.line()))
                .unwrap_or_default();
            task = task.with_status_message(match v.progress {
                Some(p) => format!("running, {p}%{transfer}"),
                None => format!("running{transfer}"),
            });
            TaskPayload::Working
        }
        // Stopped on request: the task was cancelled (`tasks/cancel` or `cancel_job`).
        JobState::Cancelled if v.end.ended_by.as_deref() == Some(who.name.as_str()) => {
            TaskPayload::Cancelled
        }
        JobState::Lost => TaskPayload::Failed {
            error: error_object(v.end.stop_reason.as_deref().unwrap_or("the job was lost")),
        },
        // A command that ran and ended (even non-zero, timed out) completed the call: its
        // result says how, with `isError`, as a foreground answer would.
        _ => match v.end.result.clone() {
            Some(serde_json::Value::Object(result)) => TaskPayload::Completed { result },
            _ => TaskPayload::Failed {
                error: error_object("the job ended without a result"),
            },
        },
    };
    Ok(GetTaskResult::new(DetailedTask::new(task, payload)))
}

/// `tasks/cancel`: `cancel_job` without waiting (the next `tasks/get` shows the end).
pub fn cancel(state: &AppState, who: &ClientIdentity, id: &str) -> Result<(), McpError> {
    let job = state
        .jobs
        .cancel(&who.name, id)
        .map_err(|e| McpError::invalid_params(job_refusal(e).message, None))?;
    state
        .audit
        .record(&gatecmd_domain::audit::JobRecord::cancel_requested(
            &job.spec.client,
            &job.id.0,
            &who.name,
        ));
    Ok(())
}

fn error_object(message: &str) -> JsonObject {
    let mut o = JsonObject::new();
    o.insert("code".into(), (-32603).into());
    o.insert("message".into(), message.into());
    o
}
