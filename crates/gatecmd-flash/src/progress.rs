//! What the caller sees while a flash runs: the phase and bytes done out of a total (the
//! caller computes rate and ETA), and the cancel flag it may raise at any time.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;

/// The phases of a flash, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// The pre-pass over the image before any write: the bmap's range checksums, the
    /// decompressed size of a compressed image, a compressed sparse image's structure.
    Check,
    /// Writing the chunks (and reading back the journal's chunks to skip the unchanged).
    Write,
    /// Reading back every chunk written and comparing its SHA-256.
    Verify,
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Phase::Check => "check",
            Phase::Write => "write",
            Phase::Verify => "verify",
        })
    }
}

/// One progress report: `done` of `total` bytes in `phase`. Reported after each chunk (and
/// once with `done == 0` when a phase starts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Progress {
    /// The phase.
    pub phase: Phase,
    /// Bytes handled so far in this phase (written or skipped, in `Write`).
    pub done: u64,
    /// Bytes this phase handles in all.
    pub total: u64,
}

/// The caller's hooks: a progress callback and a cancel flag, checked between chunks.
pub struct Control<'a> {
    progress: Option<&'a mut dyn FnMut(Progress)>,
    cancel: Option<&'a AtomicBool>,
    /// The same flag, shareable: given to the decoders, which then stop inside a read that
    /// consumes input without producing output (a stream of empty gzip members).
    shared: Option<Arc<AtomicBool>>,
}

impl<'a> Control<'a> {
    /// No progress reports, no cancellation.
    pub fn none() -> Control<'static> {
        Control {
            progress: None,
            cancel: None,
            shared: None,
        }
    }

    /// Reports to `progress`; stops between chunks once `cancel` is true.
    pub fn new(progress: &'a mut dyn FnMut(Progress), cancel: &'a AtomicBool) -> Control<'a> {
        Control {
            progress: Some(progress),
            cancel: Some(cancel),
            shared: None,
        }
    }

    /// As [`new`](Self::new) with a shared flag: the decoders also read it between input
    /// buffers (256 KiB of the file), so a stop ends even a read that produces nothing.
    pub fn with_flag(
        progress: &'a mut dyn FnMut(Progress),
        cancel: Arc<AtomicBool>,
    ) -> Control<'a> {
        Control {
            progress: Some(progress),
            cancel: None,
            shared: Some(cancel),
        }
    }

    /// The shared flag, if the control has one.
    pub(crate) fn shared_flag(&self) -> Option<Arc<AtomicBool>> {
        self.shared.clone()
    }

    pub(crate) fn report(&mut self, phase: Phase, done: u64, total: u64) {
        if let Some(p) = self.progress.as_mut() {
            p(Progress { phase, done, total });
        }
    }

    pub(crate) fn cancelled(&self) -> bool {
        self.cancel.is_some_and(|c| c.load(Ordering::Relaxed))
            || self
                .shared
                .as_ref()
                .is_some_and(|c| c.load(Ordering::Relaxed))
    }
}
