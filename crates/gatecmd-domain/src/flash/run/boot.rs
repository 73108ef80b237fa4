//! Phase 6, the boot: the board reset to boot from its flash, then (if asked) the console
//! watched for `wait_for`, with the boot log since the reset kept. A board back in
//! MaskROM did not boot: no prompt will come, so the wait ends then.

use std::time::{Duration, Instant};

use regex::Regex;

use super::context::{Run, StepResult, blocking};
use crate::boards::PowerState;
use crate::boards::boot_reports::{BootSummary, Trigger};
use crate::console::Console;
use crate::console::session::{TalkError, Wait, watch};
use crate::flash::device;
use crate::flash::failure::FlashFailure;
use crate::flash::step::Step;
use gatecmd_flash::LoaderTarget;

/// Bytes of boot log a result carries at most (the newest).
pub const BOOT_LOG_BYTES: usize = 64 * 1024;

/// Longest wait, after wait_for matched, for the boot recorder to confirm what it saw
/// (its prompt quiet time and a tick or two of the ticker, with room for a loaded host).
const BOOT_SETTLE: Duration = Duration::from_secs(2);

/// The boot the reset started, and what the console showed of it.
pub(super) struct Booted {
    /// The boot recorder's number for it.
    pub boot: Option<u64>,
    /// The console's end at the reset.
    pub cursor: Option<u64>,
    pub boot_log: Option<String>,
    /// `booted` once wait_for matched, `reset` otherwise.
    pub board_state: String,
}

/// The `reset` and `await_console` steps.
pub(super) async fn reset_and_watch(
    run: &mut Run<'_>,
    target: LoaderTarget,
    wait_for: Option<&Regex>,
) -> StepResult<Booted> {
    let cursor = run.console.map(|c| c.bounds().1);
    run.console_cursor = cursor;
    let t = run.started(Step::Reset);
    let trigger = Trigger::action("flash_board", &run.client, "reset after write");
    let boot = run.state.boots.power_on(&run.board.name, trigger);
    blocking(Step::Reset, move || Ok(target.reset_and_boot()?)).await?;
    run.state
        .boards
        .set_power_state(&run.board.name, PowerState::On);
    run.done(Step::Reset, t, "reset to boot from flash".into());
    let mut booted = Booted {
        boot,
        cursor,
        boot_log: None,
        board_state: "reset".to_string(),
    };
    match (wait_for, run.console) {
        (Some(re), Some(c)) => {
            let log = await_console(run, c, re, cursor.unwrap_or(0)).await?;
            booted.boot_log = Some(log);
            booted.board_state = "booted".into();
        }
        _ => run.skipped(Step::AwaitConsole, "no wait_for"),
    }
    Ok(booted)
}

/// The `await_console` step: the boot log since `from` once `re` is seen.
async fn await_console(
    run: &mut Run<'_>,
    c: &Console,
    re: &Regex,
    from: u64,
) -> StepResult<String> {
    let t = run.started(Step::AwaitConsole);
    let wait = Wait {
        deadline: run.deadline,
        cancel: &run.waits,
    };
    let awaited = format!("/{}/ on the console after the reset", re.as_str());
    let prompt = watch(c, &wait, &awaited, || {
        let s = c.slice(from, usize::MAX);
        re.is_match(&String::from_utf8_lossy(&s.bytes))
            .then_some(())
    });
    let board = run.board;
    let seen = tokio::select! {
        seen = prompt => seen,
        () = device::maskrom_arrives(run.state, &board.usb) => {
            return Err((
                Step::AwaitConsole,
                FlashFailure::BackInMaskrom {
                    board: board.name.clone(),
                    port: board.usb.to_string(),
                    secs: t.elapsed().as_secs(),
                    pattern: re.as_str().to_string(),
                },
            ));
        }
    };
    let log = log_since(c, from);
    match seen {
        Ok(()) => {
            run.done(Step::AwaitConsole, t, format!("/{}/ seen", re.as_str()));
            Ok(log)
        }
        Err(e) => Err((Step::AwaitConsole, console_failure(run, t, re, e))),
    }
}

/// Why the console wait ended without the pattern.
fn console_failure(run: &Run<'_>, t: Instant, re: &Regex, e: TalkError) -> FlashFailure {
    match e {
        TalkError::Timeout { last, .. } => FlashFailure::ConsoleTimeout {
            pattern: re.as_str().to_string(),
            secs: if run.stop.timed_out() {
                run.stop.secs
            } else {
                t.elapsed().as_secs()
            },
            last,
        },
        TalkError::Cancelled { .. } => run.stop.failure(
            Step::AwaitConsole,
            "the image was written, verified and the board reset".into(),
        ),
        _ => FlashFailure::ConsoleGone {
            board: run.board.name.clone(),
            pattern: re.as_str().to_string(),
        },
    }
}

/// The console's output since `from` (the newest [`BOOT_LOG_BYTES`]), as text.
fn log_since(c: &Console, from: u64) -> String {
    let (_, end) = c.bounds();
    let at = from.max(end.saturating_sub(BOOT_LOG_BYTES as u64));
    let s = c.slice(at, BOOT_LOG_BYTES);
    gatecmd_core::output::clean(&s.bytes)
}

/// The boot the reset started, as boot_report tells it: once wait_for matched, when the
/// recorder has confirmed what it saw (a prompt is taken after it stayed quiet), never the
/// moment before.
pub(super) async fn boot_summary(run: &Run<'_>, booted: &Booted) -> Option<BootSummary> {
    let n = booted.boot?;
    if booted.board_state == "booted" {
        run.state
            .boots
            .settled(&run.board.name, n, BOOT_SETTLE)
            .await
    } else {
        run.state.boots.summary(&run.board.name, Some(n)).ok()
    }
}
