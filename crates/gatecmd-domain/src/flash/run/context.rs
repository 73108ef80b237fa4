//! The flash as it goes: what every phase reads (the board, the call's settings, its
//! stop) and what it records (the steps done, the bytes written, the console's cursor).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::inputs::Events;
use super::stop::Stop;
use crate::config::{BoardConfig, Config};
use crate::console::Console;
use crate::console::session::last_line_since;
use crate::flash::device;
use crate::flash::failure::{Failed, FlashFailure, Seen};
use crate::flash::step::{Event, Step, StepRecord};
use crate::state::AppState;

/// A phase's result: on failure, the step it failed in.
pub(super) type StepResult<T> = Result<T, (Step, FlashFailure)>;

/// One flash's context, handed from phase to phase.
pub(super) struct Run<'a> {
    pub state: &'a AppState,
    pub config: &'a Config,
    pub board: &'a BoardConfig,
    pub console: Option<&'a Console>,
    pub events: Events,
    /// The calling client (the trigger of the boot the reset starts).
    pub client: String,
    pub stop: Stop,
    /// Cancelled by a cancel, the deadline or the shutdown: the async waits watch it.
    pub waits: CancellationToken,
    pub deadline: tokio::time::Instant,
    /// Where the resume journals (and what was learnt of loaders) live.
    pub journal_dir: PathBuf,
    /// Blocks of 512 bytes per USB write command, as the call asked.
    pub transfer_blocks: u32,
    /// How long the rockusb device (and the Loader after the download) is awaited.
    pub device_wait: Duration,
    /// When the call arrived.
    pub received: Instant,
    /// The record: steps done so far.
    pub steps: Vec<StepRecord>,
    pub bytes_written: u64,
    pub console_cursor: Option<u64>,
}

impl Run<'_> {
    pub fn started(&self, step: Step) -> Instant {
        (self.events)(Event::Started(step));
        Instant::now()
    }

    pub fn done(&mut self, step: Step, since: Instant, detail: String) {
        self.done_ms(step, since.elapsed().as_millis() as u64, detail);
    }

    pub fn done_ms(&mut self, step: Step, ms: u64, detail: String) {
        let r = StepRecord { step, ms, detail };
        (self.events)(Event::Done(r.clone()));
        self.steps.push(r);
    }

    pub fn skipped(&mut self, step: Step, why: &str) {
        self.done_ms(step, 0, format!("skipped: {why}"));
    }

    /// The call's stop as a failure of `step`, if it was raised.
    pub fn stopped(&self, step: Step, detail: &str) -> StepResult<()> {
        if self.stop.raised() {
            return Err((step, self.stop.failure(step, detail.into())));
        }
        Ok(())
    }

    /// The failure as the call reports it: the steps done and where the board is.
    pub fn fail(self, step: Step, failure: FlashFailure) -> Failed {
        let seen = Seen {
            device: device::at_port(self.state, &self.board.usb),
            console_last_line: self
                .console
                .map(|c| last_line_since(c, c.bounds().1.saturating_sub(4096))),
        };
        Failed {
            step,
            failure,
            steps: self.steps,
            seen,
            board_state: device::board_state(self.state, self.board),
            bytes_written: self.bytes_written,
            console_cursor: self.console_cursor,
        }
    }
}

/// Runs a blocking piece of USB or file work on its own thread.
pub(super) async fn blocking<T: Send + 'static>(
    step: Step,
    f: impl FnOnce() -> Result<T, FlashFailure> + Send + 'static,
) -> StepResult<T> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(|e| (step, e)),
        Err(e) => Err((step, FlashFailure::Lost(e.to_string()))),
    }
}
