//! The flash as a job: started (its `job_started` line, the bench page's row with its
//! percentage), run on a task of its own with the board's key, the client's slot and the
//! row held until the work is over, then audited (a `flash` line: flashed, failed or
//! cancelled) and ended with the surface's answer, which `wait_job`, `tasks/get` and a
//! detached call's client read.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use super::prepare::Prepared;
use super::request::Ask;
use crate::audit::{self, Ended, FlashOutcome, FlashRecord, JobRecord, StepMs};
use crate::flash::{Event, Events, Failed, FlashFailure, Flashed, Inputs, Step, StepRecord};
use crate::jobs::running::NewRun;
use crate::jobs::{Job, JobEnd, JobSpec, JobState, Origin, Transfer};
use crate::state::AppState;

/// A sink of progress lines, callable from any thread.
pub type LineSink = Box<dyn Fn(&str) + Send + Sync>;

/// Where a running flash's progress lines go besides the job's output (the surface's
/// progress notifications).
#[derive(Default)]
pub struct Progress {
    /// Each line (from any thread: the USB work runs on its own).
    pub line: Option<LineSink>,
    /// Awaited once the flash is over and `line` dropped, before the job ends: delivers
    /// what `line` held back, so the last progress reaches the client ahead of the answer.
    pub flushed: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
}

/// The surface's answer to a flash that ended: as the job keeps it (a tool result, as
/// JSON) and its text (whose first line goes to the job's output).
pub struct Answer {
    pub result: Option<serde_json::Value>,
    pub text: String,
}

/// Starts the flash as a job and returns it; `render` words its end. `origin`: how the
/// call waits for it.
pub fn launch<R>(
    state: &Arc<AppState>,
    ask: &Ask,
    origin: Origin,
    prepared: Prepared,
    progress: Progress,
    render: R,
) -> Arc<Job>
where
    R: FnOnce(&Job, JobState, Result<Flashed, Failed>) -> Answer + Send + 'static,
{
    let timeout = prepared.timeout();
    let Prepared {
        config,
        secs,
        wait_for,
        slot,
        taken,
        files,
        known,
        approval,
    } = prepared;
    let policy = &config.flash;
    let image_path = files.image.path.display().to_string();
    let inputs = Inputs {
        board: taken.board.clone(),
        console: taken.console.clone(),
        image: files.image,
        bmap: files.bmap,
        loader: files.loader,
        usbplug: files.usbplug,
        wait_for,
        timeout,
        journal_dir: policy.journal_dir(&config.state_dir),
        transfer_blocks: policy.transfer_blocks(),
        device_wait: Duration::from_secs(policy.device_wait_secs),
        received: ask.received,
        client: ask.client.clone(),
    };
    let device = Some(taken.board.usb.to_string());
    let job = state.jobs.start(JobSpec {
        client: ask.client.clone(),
        command: ask.tool.into(),
        argv: vec![ask.tool.into(), ask.board.clone(), ask.image.clone()],
        lock_keys: vec![taken.key.to_string()],
        device: device.clone(),
        board: Some(ask.board.clone()),
        timeout_secs: secs,
        uncancellable: false,
        origin,
    });
    // The bench page's "running" row, with the flash's percentage.
    let row = Arc::new(state.running.start(NewRun {
        client: ask.client.clone(),
        command: ask.tool.into(),
        argv: vec![ask.tool.into(), ask.board.clone(), image_path],
        device,
        board: Some(ask.board.clone()),
        progress: None,
    }));
    row.set_job(&job.id.0);
    state
        .audit
        .record(&JobRecord::started(&ask.client, &job.id.0, origin.as_str()));
    let events: Events = {
        let (job, jobs, row, line) = (job.clone(), state.jobs.clone(), row.clone(), progress.line);
        Arc::new(move |e: Event| {
            let text = match &e {
                Event::Started(s) => format!("step {s} ..."),
                Event::Done(r) => format!("step {} done in {} ms: {}", r.step, r.ms, r.detail),
                Event::Bytes(b) => {
                    let t = Transfer {
                        step: b.step.as_str().to_string(),
                        bytes_done: b.done,
                        bytes_total: b.total,
                        rate_bytes_per_s: b.rate.round(),
                        eta_secs: b.eta_secs.map(|s| (s * 10.0).round() / 10.0),
                    };
                    row.set_transfer(t.clone());
                    job.set_transfer(t);
                    row.set_progress(b.overall_percent());
                    if job.set_progress(b.overall_percent()) {
                        jobs.changed(&job.id);
                    }
                    b.line()
                }
            };
            job.push_line(false, &text);
            if let Some(line) = &line {
                line(&text);
            }
        })
    };
    let (task_state, task_job, client) = (state.clone(), job.clone(), ask.client.clone());
    let handle = tokio::spawn(async move {
        let state = task_state;
        let config = state.config();
        let (board, image) = (inputs.board.name.clone(), inputs.image.path.clone());
        let outcome = crate::flash::flash_known(
            &state,
            &config,
            inputs,
            known,
            task_job.cancel_token(),
            events.clone(),
        )
        .await;
        // The board key, the client's slot and the page's row go once the work is over.
        drop((taken, events, row, slot));
        if let Some(flushed) = progress.flushed {
            flushed.await;
        }
        let image = image.display().to_string();
        let flash = Flash {
            client: &client,
            job: &task_job,
            board: &board,
            image: &image,
            approval: approval.as_deref(),
        };
        end(&state, &flash, outcome, render);
    });
    // A task that panicked leaves no outcome: the job is `lost`, not running forever.
    let (watched, jobs) = (job.clone(), state.jobs.clone());
    tokio::spawn(async move {
        if let Err(e) = handle.await {
            let stop_reason = Some(format!("the flash's task ended without an outcome: {e}"));
            let end = JobEnd {
                stop_reason,
                ..JobEnd::default()
            };
            jobs.finish(&watched, JobState::Lost, end);
        }
    });
    job
}

/// Which flash ended: what its audit line names besides the outcome.
struct Flash<'a> {
    client: &'a str,
    job: &'a Arc<Job>,
    board: &'a str,
    image: &'a str,
    approval: Option<&'a str>,
}

/// The flash's end: its audit line, the answer, the job ended with it (its `job_ended`
/// line and count).
fn end<R>(state: &AppState, flash: &Flash, outcome: Result<Flashed, Failed>, render: R)
where
    R: FnOnce(&Job, JobState, Result<Flashed, Failed>) -> Answer,
{
    let job = flash.job;
    let (job_state, stop_reason) = match &outcome {
        Ok(f) => {
            audit_flash(state, flash, f);
            (JobState::Succeeded, None)
        }
        Err(failed) => {
            audit_failure(state, flash, failed);
            let st = match &failed.failure {
                FlashFailure::Cancelled { .. } => JobState::Cancelled,
                FlashFailure::TimedOut { .. } => JobState::TimedOut,
                _ => JobState::Failed,
            };
            (st, Some(failed.failure.to_string()))
        }
    };
    let answer = render(job, job_state, outcome);
    job.push_line(false, answer.text.lines().next().unwrap_or_default());
    let end = JobEnd {
        duration_ms: job.view().elapsed_ms,
        stop_reason,
        ended_by: (job_state == JobState::TimedOut).then(|| "timeout".to_string()),
        result: answer.result,
        ..JobEnd::default()
    };
    crate::usecases::job::end_job(&state.jobs, &state.audit, job, job_state, end);
}

fn timings(steps: &[StepRecord]) -> Vec<StepMs<Step>> {
    (steps.iter())
        .map(|s| StepMs {
            step: s.step,
            ms: s.ms,
        })
        .collect()
}

/// The audit line of a flash that ended: what was written where, verified, and how long
/// each step took.
fn audit_flash(state: &AppState, flash: &Flash, f: &Flashed) {
    state.audit.record(&FlashRecord {
        client: flash.client,
        board: &f.board,
        image: &f.image.path,
        outcome: FlashOutcome::Flashed(Box::new(audit::Flashed {
            job: &flash.job.id.0,
            approval: flash.approval,
            image_sha256: f.image.sha256.as_deref(),
            bmap: f.bmap.as_ref().map(|b| b.path.as_str()),
            loader: f.loader.as_ref().map(|l| l.path.as_str()),
            loader_sha256: f.loader.as_ref().and_then(|l| l.sha256.as_deref()),
            ranges: &f.written.ranges,
            ranges_total: f.written.ranges_total,
            bytes_written: f.written.bytes_written,
            bytes_skipped: f.written.bytes_skipped,
            verified: f.verified,
            verification: &f.verification,
            verified_bytes: f.verified_bytes,
            unverified_bytes: f.unverified_bytes,
            bmap_sha256: f.bmap.as_ref().and_then(|b| b.sha256.as_deref()),
            steps: timings(&f.steps),
            took_ms: f.took_ms,
            board_state: &f.board_state,
            boot: f.boot.as_ref().and_then(|b| serde_json::to_value(b).ok()),
        })),
    });
}

fn audit_failure(state: &AppState, flash: &Flash, f: &Failed) {
    let ended = Ended {
        job: &flash.job.id.0,
        approval: flash.approval,
        step: f.step,
        message: f.failure.to_string(),
        bytes_written: f.bytes_written,
        verified: false,
        board_state: &f.board_state,
        steps: timings(&f.steps),
    };
    state.audit.record(&FlashRecord {
        client: flash.client,
        board: flash.board,
        image: flash.image,
        outcome: if f.failure.is_cancel() {
            FlashOutcome::Cancelled(ended)
        } else {
            FlashOutcome::Failed(ended)
        },
    });
}
