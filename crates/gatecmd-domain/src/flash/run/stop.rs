//! Why and when a flash stops: the engine's flag (read by the USB thread between chunks),
//! raised by a cancel, the call's time limit, the server's shutdown, or the flash's future
//! dropped; and a token the async waits watch for the same reasons.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::flash::failure::FlashFailure;
use crate::flash::step::Step;
use gatecmd_flash::FlashError;

/// Why the engine's flag went up.
#[derive(Clone)]
pub(super) struct Stop {
    pub flag: Arc<AtomicBool>,
    timed_out: Arc<AtomicBool>,
    cancel: CancellationToken,
    /// The call's time limit, in seconds.
    pub secs: u64,
}

impl Stop {
    /// The failure for a stop noticed during `step`.
    pub fn failure(&self, step: Step, detail: String) -> FlashFailure {
        if self.timed_out() {
            FlashFailure::TimedOut {
                step,
                secs: self.secs,
                detail,
            }
        } else {
            FlashFailure::Cancelled { step, detail }
        }
    }

    /// Whether the flag is up (a cancel, the time limit, the shutdown).
    pub fn raised(&self) -> bool {
        self.flag.load(Ordering::Relaxed)
    }

    /// Whether the call's time limit raised it.
    pub fn timed_out(&self) -> bool {
        self.timed_out.load(Ordering::Relaxed)
    }

    /// The engine's cancel, reported as the call's stop (cancel or time limit).
    pub fn as_stop(&self, step: Step, e: FlashFailure) -> FlashFailure {
        match e {
            FlashFailure::Engine(inner) if matches!(*inner, FlashError::Cancelled { .. }) => {
                self.failure(step, inner.to_string())
            }
            other => other,
        }
    }
}

/// A flash's stop, armed: the flag and the waits' token, and the tasks that raise them.
pub(super) struct Armed {
    pub stop: Stop,
    /// Cancelled by a cancel, the deadline or the shutdown: the waits watch it.
    pub waits: CancellationToken,
    raiser: JoinHandle<()>,
    waits_guard: JoinHandle<()>,
    _raise_on_drop: RaiseOnDrop,
}

/// Arms a flash's stop. The engine reads a flag; the call's token, its deadline and the
/// server's shutdown raise it, and so does the drop of what this returns (a runtime that
/// shuts down drops the flash's future, then waits for the blocking thread that reads the
/// flag).
pub(super) fn arm(
    cancel: CancellationToken,
    timeout: Duration,
    deadline: tokio::time::Instant,
    stopping: CancellationToken,
) -> Armed {
    let stop = Stop {
        flag: Arc::new(AtomicBool::new(false)),
        timed_out: Arc::new(AtomicBool::new(false)),
        cancel,
        secs: timeout.as_secs(),
    };
    let raise_on_drop = RaiseOnDrop(stop.flag.clone());
    let raiser = {
        let (stop, stopping) = (stop.clone(), stopping.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = stop.cancel.cancelled() => {}
                _ = stopping.cancelled() => {}
                _ = tokio::time::sleep_until(deadline) => stop.timed_out.store(true, Ordering::Relaxed),
            }
            stop.flag.store(true, Ordering::Relaxed);
        })
    };
    let waits = CancellationToken::new();
    let waits_guard = {
        let (waits, stop) = (waits.clone(), stop.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = stop.cancel.cancelled() => {}
                _ = stopping.cancelled() => {}
                _ = tokio::time::sleep_until(deadline) => {}
            }
            waits.cancel();
        })
    };
    Armed {
        stop,
        waits,
        raiser,
        waits_guard,
        _raise_on_drop: raise_on_drop,
    }
}

impl Armed {
    /// The phases are over: the raising tasks stop (the flag still goes up on drop).
    pub fn disarm(&self) {
        self.raiser.abort();
        self.waits_guard.abort();
    }
}

/// Raises the engine's flag when dropped.
struct RaiseOnDrop(Arc<AtomicBool>);

impl Drop for RaiseOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}
