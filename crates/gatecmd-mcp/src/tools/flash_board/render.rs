//! A flash that ended, in words and as the answer its job keeps (`wait_job`'s `result`,
//! `tasks/get`, a waiting call's answer).

use gatecmd_domain::flash::{Failed, Flashed, Step};
use gatecmd_domain::jobs::{Job, JobState};
use gatecmd_domain::usecases::flash::Answer;

use super::{FailureView, FlashResult};
use crate::calls::answer::{structured, structured_error};
use crate::calls::boot_log::tail as boot_log_tail;

/// The answer of a flash that ended, as its job keeps it.
pub(super) fn render(job: &Job, state: JobState, outcome: Result<Flashed, Failed>) -> Answer {
    let mut r = FlashResult::of(job, state);
    let text = match outcome {
        Ok(f) => {
            let verify = (f.steps.iter()).find(|s| s.step == Step::Verify);
            let verified = match f.verification.as_str() {
                "read_back" => "verified it".to_string(),
                _ => format!(
                    "verified {} of {} bytes ({}: {})",
                    f.verified_bytes,
                    f.verified_bytes + f.unverified_bytes,
                    f.verification,
                    verify.map(|s| s.detail.as_str()).unwrap_or_default()
                ),
            };
            let text = format!(
                "flashed {} to board {} and {verified}: {} written, {} skipped (resumed), \
                 verify {} ms, {} in all ({} ms)\nsteps: {}{}",
                f.image.path,
                f.board,
                f.written.bytes_written,
                f.written.bytes_skipped,
                f.verify_ms,
                f.board_state,
                f.took_ms,
                steps_line(&f.steps),
                (f.boot_log.as_deref())
                    .map(boot_log_tail)
                    .unwrap_or_default()
            );
            (r.steps, r.verified) = (f.steps.clone(), f.verified);
            r.flashed = Some(f);
            text
        }
        Err(f) => {
            let console = (f.seen.console_last_line.as_ref()).map(|l| format!(", console: {l:?}"));
            let text = format!(
                "flash_board {} failed at step {}: {}\nseen: {}{}\nthe board is left: {}\nnext: {}",
                r.board,
                f.step,
                f.failure,
                f.seen.device,
                console.unwrap_or_default(),
                f.board_state,
                f.failure.next_action()
            );
            r.failure = Some(FailureView {
                step: f.step,
                message: f.failure.to_string(),
                seen: f.seen,
                board_state: f.board_state,
                bytes_written: f.bytes_written,
                next_action: f.failure.next_action(),
                console_cursor: f.console_cursor,
            });
            r.steps = f.steps;
            text
        }
    };
    let call = match state {
        JobState::Succeeded => structured(&r, text.clone()),
        _ => structured_error(&r, text.clone()),
    };
    let result = serde_json::to_value(&call).ok();
    Answer { result, text }
}

/// The steps on one line, each with its duration (`accept 2 ms, maskrom 1204 ms, …`).
fn steps_line(steps: &[gatecmd_domain::flash::StepRecord]) -> String {
    let each: Vec<String> = steps
        .iter()
        .map(|s| format!("{} {} ms", s.step, s.ms))
        .collect();
    each.join(", ")
}
