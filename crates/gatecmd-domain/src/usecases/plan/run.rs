//! The plan as a job: started (its `job_started` and `test_plan_started` lines), each step
//! run at the board's shell on a task of its own with the board's key and the client's slot
//! held throughout, the console watched for faults meanwhile, each step's verdict audited
//! and pushed as the job's progress, then the plan's verdict audited and the job ended with
//! the surface's answer (`wait_job`, `tasks/get` and a detached call's client read it).

use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use super::format::Step;
use super::junit::junit;
use super::monitor::Monitor;
use super::prepare::{Ask, Prepared};
use super::verdict::{Fault, StepResult, Verdict, plan_verdict};
use super::watched::{Board, Halt, one_step};
use crate::audit::{JobRecord, PlanRecord};
use crate::jobs::running::{NewRun, RunGuard};
use crate::jobs::{Job, JobEnd, JobSpec, JobState, Origin};
use crate::state::AppState;
use crate::usecases::flash::Answer;

/// Most bytes of one step's output kept in the answer.
pub const MAX_STEP_OUTPUT_BYTES: usize = 16 * 1024;
/// Most bytes of output kept in the answer over the whole plan.
pub const MAX_PLAN_OUTPUT_BYTES: usize = 256 * 1024;
/// Most faults kept (the first ones).
pub const MAX_FAULTS: usize = 32;

/// A plan run, as the job keeps it and the surface renders it. Field names are part of
/// the interface (docs/TESTPLANS.md).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Report {
    /// The job the run is (wait_job, cancel_job, list_jobs).
    pub job: String,
    /// The plan's name.
    pub plan: String,
    pub board: String,
    /// `pass`, `fail` or `error`; null while the plan runs.
    pub verdict: Option<Verdict>,
    /// The job's state: `running`, `succeeded` (verdict pass), `failed` (fail or error),
    /// `cancelled`, `timed_out` (the plan's timeout_secs).
    pub state: JobState,
    /// Every step of the plan, in order, each with its verdict.
    pub steps: Vec<StepResult>,
    /// Console lines that failed the plan (boot report faults, fail_on matches).
    pub faults: Vec<Fault>,
    /// A JUnit XML report of the run (empty while it runs).
    pub junit: String,
    pub ms: u64,
}

impl Report {
    /// The frame of a run that has not ended.
    pub fn running(job: &Job, plan: &str) -> Report {
        Report {
            job: job.id.0.clone(),
            plan: plan.to_string(),
            board: job.spec.board.clone().unwrap_or_default(),
            verdict: None,
            state: JobState::Running,
            steps: vec![],
            faults: vec![],
            junit: String::new(),
            ms: 0,
        }
    }
}

/// Starts the plan as a job and returns it; `render` words its end.
pub fn launch<R>(
    state: &Arc<AppState>,
    ask: &Ask,
    origin: Origin,
    prepared: Prepared,
    render: R,
) -> Arc<Job>
where
    R: FnOnce(&Job, &Report) -> Answer + Send + 'static,
{
    let job = state.jobs.start(JobSpec {
        client: ask.client.clone(),
        command: ask.tool.into(),
        argv: vec![
            ask.tool.into(),
            ask.board.clone(),
            prepared.plan.name.clone(),
        ],
        lock_keys: vec![prepared.taken.key.to_string()],
        device: Some(prepared.taken.board.usb.to_string()),
        board: Some(ask.board.clone()),
        timeout_secs: prepared.secs,
        uncancellable: false,
        origin,
    });
    // The bench page's "running" row, with the share of steps done.
    let row = state.running.start(NewRun {
        client: ask.client.clone(),
        command: ask.tool.into(),
        argv: vec![
            ask.tool.into(),
            ask.board.clone(),
            prepared.plan.name.clone(),
        ],
        device: Some(prepared.taken.board.usb.to_string()),
        board: Some(ask.board.clone()),
        progress: None,
    });
    row.set_job(&job.id.0);
    state
        .audit
        .record(&JobRecord::started(&ask.client, &job.id.0, origin.as_str()));
    state.audit.record(&PlanRecord::Started {
        client: &ask.client,
        job: &job.id.0,
        board: &ask.board,
        plan: &prepared.plan.name,
        plan_sha256: &prepared.sha256,
        steps: prepared.plan.steps.len(),
        approval: prepared.approval.as_deref(),
    });
    let (task_state, task_job, client) = (state.clone(), job.clone(), ask.client.clone());
    let handle = tokio::spawn(async move {
        let report = run(&task_state, &task_job, &client, prepared, &row).await;
        drop(row);
        let answer = render(&task_job, &report);
        task_job.push_line(false, answer.text.lines().next().unwrap_or_default());
        let end = JobEnd {
            duration_ms: report.ms,
            stop_reason: (report.verdict != Some(Verdict::Pass))
                .then(|| format!("plan verdict {}", verdict_word(report.verdict))),
            ended_by: (report.state == JobState::TimedOut).then(|| "timeout".to_string()),
            result: answer.result,
            ..JobEnd::default()
        };
        crate::usecases::job::end_job(
            &task_state.jobs,
            &task_state.audit,
            &task_job,
            report.state,
            end,
        );
    });
    // A task that panicked leaves no outcome: the job is `lost`, not running forever.
    let (watched, jobs) = (job.clone(), state.jobs.clone());
    tokio::spawn(async move {
        if let Err(e) = handle.await {
            let end = JobEnd {
                stop_reason: Some(format!("the plan's task ended without an outcome: {e}")),
                ..JobEnd::default()
            };
            jobs.finish(&watched, JobState::Lost, end);
        }
    });
    job
}

fn verdict_word(v: Option<Verdict>) -> &'static str {
    v.map_or("none", Verdict::as_str)
}

/// Runs every step; the board's key and the slot go when it returns.
async fn run(
    state: &AppState,
    job: &Arc<Job>,
    client: &str,
    prepared: Prepared,
    row: &RunGuard,
) -> Report {
    let started = Instant::now();
    let Prepared {
        plan,
        secs,
        slot,
        taken,
        prompts,
        ..
    } = prepared;
    let board_name = taken.board.name.clone();
    let mut report = Report::running(job, &plan.name);
    let cancel = job.cancel_token();
    let Some(console) = taken.console.clone() else {
        // Checked when the board was taken; a board without a console cannot run a step.
        report.verdict = Some(Verdict::Error);
        report.state = JobState::Failed;
        return report;
    };
    let board = Board {
        console: &console,
        prompts: &prompts,
        login: taken.board.shell.login.as_ref(),
        cancel: &cancel,
        deadline: started + Duration::from_secs(secs),
    };
    let mut monitor = Monitor::new(&taken.board.shell, plan.fail_on.clone(), console.bounds().1);
    let mut halt: Option<(Halt, String)> = None;
    let mut kept = 0usize;
    let n = plan.steps.len();
    for (i, s) in plan.steps.iter().enumerate() {
        if halt.is_none() && cancel.is_cancelled() {
            halt = Some((Halt::Cancelled, "the plan was cancelled".into()));
        }
        if let Some((_, why)) = &halt {
            report.steps.push(StepResult::skipped(&s.name, why));
            continue;
        }
        job.push_line(false, &format!("step {}/{n} {} ...", i + 1, s.name));
        let (mut result, faults, stop) = one_step(&board, &mut monitor, s).await;
        bound_output(&mut result, &mut kept);
        audit_step(state, client, job, &board_name, &plan.name, s, &result);
        job.push_line(
            false,
            &format!(
                "step {}/{n} {}: {} in {} ms{}",
                i + 1,
                s.name,
                result.verdict.as_str(),
                result.ms,
                result
                    .message
                    .as_deref()
                    .map(|m| format!(" ({m})"))
                    .unwrap_or_default()
            ),
        );
        let done = ((i + 1) * 100) as f64 / n as f64;
        row.set_progress(done);
        if job.set_progress(done) {
            state.jobs.changed(&job.id);
        }
        let fault_line = faults.first().map(|f| format!("{}: {}", f.kind, f.line));
        add_faults(&mut report.faults, faults, &s.name);
        halt = match (stop, fault_line) {
            (Some(h), _) if h != Halt::StepDidNotPass => {
                Some((h, format!("step {} was stopped", s.name)))
            }
            (_, Some(line)) => Some((Halt::Fault, format!("a fault was seen: {line}"))),
            _ if result.verdict != Verdict::Pass && !s.keep_going => Some((
                Halt::StepDidNotPass,
                format!("step {} did not pass", s.name),
            )),
            _ => None,
        };
        report.steps.push(result);
    }
    // Lines completed after the last step ended count too.
    add_faults(&mut report.faults, monitor.scan(&console, None), "");
    drop((taken, slot));
    let verdict = plan_verdict(&report.steps, &report.faults);
    report.verdict = Some(verdict);
    report.state = match halt.map(|(h, _)| h) {
        Some(Halt::Cancelled) => JobState::Cancelled,
        Some(Halt::TimedOut) => JobState::TimedOut,
        _ if verdict == Verdict::Pass => JobState::Succeeded,
        _ => JobState::Failed,
    };
    report.ms = started.elapsed().as_millis() as u64;
    report.junit = junit(&plan.name, &board_name, &report.steps, &report.faults);
    audit_end(state, client, &report);
    report
}

/// Keeps at most [`MAX_STEP_OUTPUT_BYTES`] of the step's output, and nothing past
/// [`MAX_PLAN_OUTPUT_BYTES`] over the plan (`kept` so far).
fn bound_output(r: &mut StepResult, kept: &mut usize) {
    let room = MAX_STEP_OUTPUT_BYTES.min(MAX_PLAN_OUTPUT_BYTES.saturating_sub(*kept));
    if r.output.len() > room {
        let mut at = room;
        while !r.output.is_char_boundary(at) {
            at -= 1;
        }
        r.output.truncate(at);
        r.output_truncated = true;
    }
    *kept += r.output.len();
}

fn add_faults(all: &mut Vec<Fault>, found: Vec<Fault>, step: &str) {
    for mut f in found {
        if all.len() >= MAX_FAULTS {
            return;
        }
        f.step = (!step.is_empty()).then(|| step.to_string());
        all.push(f);
    }
}

fn audit_step(
    state: &AppState,
    client: &str,
    job: &Job,
    board: &str,
    plan: &str,
    s: &Step,
    r: &StepResult,
) {
    let sha = hex::encode(Sha256::digest(r.output.as_bytes()));
    state.audit.record(&PlanRecord::Step {
        client,
        job: &job.id.0,
        board,
        plan,
        step: &s.name,
        run: &s.run,
        verdict: r.verdict.as_str(),
        exit_code: r.exit_code,
        output_bytes: r.output.len(),
        output_sha256: &sha,
        ms: r.ms,
        message: r.message.as_deref(),
    });
}

fn audit_end(state: &AppState, client: &str, r: &Report) {
    let count = |v: Verdict| r.steps.iter().filter(|s| s.verdict == v).count();
    state.audit.record(&PlanRecord::Ended {
        client,
        job: &r.job,
        board: &r.board,
        plan: &r.plan,
        verdict: verdict_word(r.verdict),
        passed: count(Verdict::Pass),
        failed: count(Verdict::Fail),
        errors: count(Verdict::Error),
        skipped: count(Verdict::Skipped),
        faults: r
            .faults
            .iter()
            .map(|f| format!("{}: {}", f.kind, f.line))
            .collect(),
        ms: r.ms,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn output_is_bounded_per_step_and_per_plan() {
        let mut kept = 0;
        let mut r = StepResult::skipped("a", "");
        r.output = "é".repeat(MAX_STEP_OUTPUT_BYTES);
        bound_output(&mut r, &mut kept);
        assert!(r.output_truncated && r.output.len() <= MAX_STEP_OUTPUT_BYTES);
        kept = MAX_PLAN_OUTPUT_BYTES - 3;
        let mut r = StepResult::skipped("b", "");
        r.output = "abcdef".into();
        bound_output(&mut r, &mut kept);
        assert_eq!((r.output.as_str(), r.output_truncated), ("abc", true));
        let mut r = StepResult::skipped("c", "");
        r.output = "x".into();
        bound_output(&mut r, &mut kept);
        assert_eq!((r.output.as_str(), r.output_truncated), ("", true));
    }
}
