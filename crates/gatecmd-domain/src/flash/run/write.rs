//! Phase 5, write and verify: the engine runs the image onto the Loader (journalled
//! chunks the board still holds skipped) and reads it back, on its own thread. A loader
//! this server sent, whose reads an earlier flash found unsound from some LBA, is not read
//! from there; a stalled large transfer is recovered once (`recover`).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::context::{Run, StepResult};
use super::loader::Loaded;
use super::progress::progress_sink;
use super::recover::{recover, worth_it};
use super::verify::verified;
use crate::flash::failure::FlashFailure;
use crate::flash::step::{Event, Step, mib};
use gatecmd_flash::{
    Control, FlashError, FlashOptions, FlashReport, Image, LoaderTarget, Phase, Progress,
};

/// What the engine did: its report, the target and image it ran with (for the re-entry
/// and the reset), and the verification's share of its time.
pub(super) struct Engined {
    pub report: FlashReport,
    pub target: LoaderTarget,
    pub img: Image,
    pub opts: FlashOptions,
    pub verify_ms: u64,
}

/// One run of the engine, with what it was given back.
struct Attempt {
    target: LoaderTarget,
    img: Image,
    t_write: Instant,
    /// When the verification's first report came (the `verify` step's start).
    verify_started: Arc<Mutex<Option<Instant>>>,
}

impl Attempt {
    fn verify_started(&self) -> Option<Instant> {
        *self
            .verify_started
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }
}

/// The `write` and `verify` steps (and a `recover` between two attempts).
pub(super) async fn write_and_verify(
    run: &mut Run<'_>,
    target: LoaderTarget,
    img: Image,
    loaded: &Loaded,
    pair_follows: bool,
) -> StepResult<Engined> {
    let mut opts = FlashOptions::new(run.board.name.clone(), run.journal_dir.clone());
    opts.reads_unsound_from_lba = loaded.memory.reads_unsound_from_lba;
    let (mut target, mut img, mut recovered) = (target, img, false);
    let (report, attempt) = loop {
        let (result, a) = engine(run, target, img, &opts).await?;
        match result {
            Ok(report) => break (report, a),
            Err(e) if !recovered && worth_it(run, &a.target, &e, loaded).await => {
                target = recover(run, a.target, e, a.t_write, loaded).await?;
                img = a.img;
                recovered = true;
            }
            Err(e) => {
                let step = if a.verify_started().is_some() {
                    Step::Verify
                } else {
                    Step::Write
                };
                if let FlashError::Write { bytes_written, .. }
                | FlashError::Cancelled { bytes_written, .. } = &e
                {
                    run.bytes_written = *bytes_written;
                }
                return Err((step, run.stop.as_stop(step, e.into())));
            }
        }
    };
    // The steps by the wall clock: the write from the engine's start (its journal opened)
    // to the verification's first report, the verification from there to the engine's end.
    let engine_end = Instant::now();
    let verify_at = attempt.verify_started().unwrap_or(engine_end);
    run.bytes_written = report.write.bytes_written;
    let w = &report.write;
    run.done_ms(
        Step::Write,
        verify_at.duration_since(attempt.t_write).as_millis() as u64,
        format!(
            "{} written, {} skipped (journal), at {:.1} MB/s",
            mib(w.bytes_written),
            mib(w.bytes_skipped),
            rate(w.bytes_written, w.secs)
        ),
    );
    let verify_ms = engine_end.duration_since(verify_at).as_millis() as u64;
    verified(run, &report, verify_ms, loaded, pair_follows);
    Ok(Engined {
        report,
        target: attempt.target,
        img: attempt.img,
        opts,
        verify_ms,
    })
}

/// One run of the engine on its own thread: the `write` step started, and the `verify`
/// step at its first report.
async fn engine(
    run: &Run<'_>,
    target: LoaderTarget,
    img: Image,
    opts: &FlashOptions,
) -> StepResult<(Result<FlashReport, FlashError>, Attempt)> {
    let t_write = run.started(Step::Write);
    let flag = run.stop.flag.clone();
    let events = run.events.clone();
    let verify_started = Arc::new(Mutex::new(None::<Instant>));
    let opts = opts.clone();
    let started = verify_started.clone();
    let outcome = tokio::task::spawn_blocking(move || {
        let mut img = img;
        let mut target = target;
        let mut inner = progress_sink(events.clone());
        let mut sink = |p: Progress| {
            if p.phase == Phase::Verify {
                let mut v = started.lock().unwrap_or_else(|p| p.into_inner());
                if v.is_none() {
                    *v = Some(Instant::now());
                    events(Event::Started(Step::Verify));
                }
            }
            inner(p)
        };
        let r = gatecmd_flash::flash(
            &mut target,
            &mut img,
            &opts,
            &mut Control::new(&mut sink, &flag),
        );
        (r, target, img)
    })
    .await;
    match outcome {
        Err(e) => Err((Step::Write, FlashFailure::Lost(e.to_string()))),
        Ok((r, target, img)) => Ok((
            r,
            Attempt {
                target,
                img,
                t_write,
                verify_started,
            },
        )),
    }
}

/// MB/s, to one decimal.
pub(super) fn rate(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        ((bytes as f64 / secs / 1e6) * 10.0).round() / 10.0
    } else {
        0.0
    }
}
