//! The engine's progress, from its thread to the flash's events: rate and ETA per step.

use std::time::{Duration, Instant};

use super::inputs::Events;
use crate::flash::step::{Bytes, Event, Step};
use gatecmd_flash::{Phase, Progress};

/// Progress from the engine's thread: rate and ETA per step, at most ten a second.
pub(super) fn progress_sink(events: Events) -> impl FnMut(Progress) + Send {
    let mut phase: Option<(Phase, Instant)> = None;
    let mut last = Instant::now() - Duration::from_secs(1);
    move |p: Progress| {
        let began = match phase {
            Some((ph, t)) if ph == p.phase => t,
            _ => {
                let t = Instant::now();
                phase = Some((p.phase, t));
                t
            }
        };
        let end = p.done >= p.total;
        if !end && last.elapsed() < Duration::from_millis(100) {
            return;
        }
        last = Instant::now();
        let secs = began.elapsed().as_secs_f64();
        let rate = if secs > 0.0 {
            p.done as f64 / secs
        } else {
            0.0
        };
        let eta_secs = (rate > 0.0).then(|| p.total.saturating_sub(p.done) as f64 / rate);
        let step = match p.phase {
            Phase::Check => Step::CheckImage,
            Phase::Write => Step::Write,
            Phase::Verify => Step::Verify,
        };
        events(Event::Bytes(Bytes {
            step,
            done: p.done,
            total: p.total,
            rate,
            eta_secs,
        }));
    }
}
