//! A flash that ended, in words and as the answer its job keeps (`wait_job`'s `result`,
//! `tasks/get`, a waiting call's answer).

use gatecmd_domain::flash::{Failed, Flashed, Step};
use gatecmd_domain::jobs::{Job, JobState};
use gatecmd_domain::usecases::flash::Answer;

use super::{FailureView, FlashResult};
use crate::calls::answer::{structured, structured_error};

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

/// Lines of the boot log the text shows; `flashed.boot_log` has all of it.
const BOOT_LOG_LINES: usize = 8;

/// The boot log's last lines (blank ones left out), saying how many more the structured
/// answer holds: the text does not repeat the whole log (issue 47, each fact once).
fn boot_log_tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    let from = lines.len().saturating_sub(BOOT_LOG_LINES);
    let head = if from == 0 {
        "\nboot log:".to_string()
    } else {
        format!(
            "\nboot log, its last {} of {} lines (flashed.boot_log has all):",
            lines.len() - from,
            lines.len()
        )
    };
    format!("{head}\n{}", lines[from..].join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_shows_the_boot_logs_last_lines_once() {
        let log: String = (1..=20).map(|i| format!("line {i}\n\r\n")).collect();
        let tail = boot_log_tail(&log);
        assert!(
            tail.starts_with("\nboot log, its last 8 of 20 lines"),
            "{tail}"
        );
        assert!(
            tail.ends_with(
                "line 13\nline 14\nline 15\nline 16\nline 17\nline 18\nline 19\nline 20"
            ),
            "{tail}"
        );
        assert!(!tail.contains("line 12\n"), "{tail}");
        assert_eq!(boot_log_tail("a\nb"), "\nboot log:\na\nb");
    }
}
