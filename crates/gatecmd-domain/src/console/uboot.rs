//! U-Boot over the console: stopping autoboot, and one framed command at its prompt.
//!
//! U-Boot's parsers (hush and the simple one) both split on `;`, so a command and its
//! marker go out as one line, `CMD; echo 'gc…''…':$?`: U-Boot reads its UART by polling
//! and may lose a second line typed while the first runs. Hush prints the status after
//! the marker; without `$?` the marker ends with the literal text and `exit_code` is null.
//! A U-Boot whose `echo` prints no marker still answers: the wait then ends at its next
//! prompt, and the output is everything up to it.

use regex::Regex;
use tokio::time::Instant;

use super::board::Console;
use super::session::{Frame, Ran, Stopped, TalkError, Wait, last_line_since, run_framed, watch};
use super::shell::{Marker, Prompts, Seen};
use gatecmd_core::output::clean;

/// What U-Boot prints while it counts down to autoboot (mainline and Rockchip's).
pub const AUTOBOOT: &str = r"(?i)hit any key to stop autoboot|stop autoboot|hit key to stop";
/// Most interrupts sent during one boot (a countdown that keeps restarting is not U-Boot).
const MAX_INTERRUPTS: usize = 20;

/// Runs `command` at U-Boot's prompt.
pub async fn run(
    console: &Console,
    prompts: &Prompts,
    command: &str,
    cap: usize,
    wait: &Wait<'_>,
) -> Result<Ran, Box<Stopped>> {
    let marker = Marker::random();
    let uboot_prompt = prompts.uboot.clone();
    let cut = move |region: &[u8]| {
        let mut text = clean(region);
        let last = text.rfind('\n').map_or(0, |i| i + 1);
        if text[last..].ends_with(uboot_prompt.as_str()) {
            text.truncate(last);
        }
        text
    };
    let frame = Frame {
        typed: format!("{command}; {}\n", marker.status_line()),
        marker: &marker,
        cut: &cut,
        prompt_ends: Some(prompts),
    };
    run_framed(console, prompts, frame, cap, wait).await
}

/// Watches a boot from cursor `from`: sends `interrupt` whenever the autoboot countdown
/// shows, until U-Boot's prompt is the last line.
pub async fn stop_autoboot(
    console: &Console,
    prompts: &Prompts,
    interrupt: &str,
    from: u64,
    wait: &Wait<'_>,
) -> Result<(), TalkError> {
    static RE: std::sync::LazyLock<Regex> =
        std::sync::LazyLock::new(|| Regex::new(AUTOBOOT).expect("a constant regex"));
    let autoboot = &*RE;
    let mut look_from = from;
    let awaited = format!(
        "U-Boot's autoboot countdown (/{AUTOBOOT}/) and then its prompt {:?}",
        prompts.uboot
    );
    for _ in 0..MAX_INTERRUPTS {
        let lf = look_from;
        let at_prompt = watch(console, wait, &awaited, || {
            if matches!(
                prompts.classify(&last_line_since(console, lf)),
                Some(Seen::Uboot)
            ) {
                return Some(true);
            }
            let (_, end) = console.bounds();
            let s = console.slice(lf.max(end.saturating_sub(8192)), 8192);
            autoboot.is_match(&clean(&s.bytes)).then_some(false)
        })
        .await?;
        if at_prompt {
            return Ok(());
        }
        look_from = console.bounds().1;
        console.write(interrupt.as_bytes()).await?;
        // Give U-Boot a moment to print its prompt before the countdown is looked for
        // again (the countdown line is still the last line until it does).
        let settle = Wait {
            deadline: (Instant::now() + std::time::Duration::from_millis(300)).min(wait.deadline),
            cancel: wait.cancel,
        };
        let lf = look_from;
        if watch(console, &settle, "", || {
            matches!(
                prompts.classify(&last_line_since(console, lf)),
                Some(Seen::Uboot)
            )
            .then_some(())
        })
        .await
        .is_ok()
        {
            return Ok(());
        }
    }
    Err(TalkError::Timeout {
        awaited: format!(
            "U-Boot's prompt {:?} after {MAX_INTERRUPTS} interrupts",
            prompts.uboot
        ),
        secs: 0,
        last: last_line_since(console, from),
    })
}
