//! The steps of a flash, named once: in progress messages, in the result (each with its
//! duration) and in a failure ("step `await_loader` failed").

use schemars::JsonSchema;
use serde::Serialize;

gatecmd_core::named_enum! {
    /// One step of `flash_board`, in the order they run. Serialised in snake_case; part of
    /// the interface (docs/TOOLS.md).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
    #[serde(rename_all = "snake_case")]
    pub enum Step {
        /// The request checked (policy, lease, files opened beneath the roots) and the job
        /// started: from the call's arrival to the flash's first step.
        Accept => "accept",
        /// The image (and bmap) read and checked before the board is touched: a bmap that
        /// does not match, a damaged compressed file, are refused here.
        CheckImage => "check_image",
        /// The board's `power.maskrom` action (button held, reset, or power on into MaskROM).
        Maskrom => "maskrom",
        /// The rockusb device awaited at the board's USB port.
        AwaitRockusb => "await_rockusb",
        /// The loader sent to the mask ROM (0x471/0x472); never cancelled half-way.
        DownloadBoot => "download_boot",
        /// The board awaited in Loader mode at the same port.
        AwaitLoader => "await_loader",
        /// The loader asked for the flash's id and size.
        FlashInfo => "flash_info",
        /// The image written (journalled chunks the board still holds are skipped), from the
        /// engine's start (its journal opened) to the last chunk.
        Write => "write",
        /// Everything written read back and compared, chunk by chunk (keyed XXH3-128), as far
        /// as the loader's reads are sound (a chunk that reads back wrong is probed).
        Verify => "verify",
        /// A loader that stalled or failed a large transfer brought back: `power.maskrom`, the
        /// loader sent again, the flash going on at the default transfer size (the outcome
        /// remembered by the loader's SHA-256).
        Recover => "recover",
        /// A packed loader's reads were unsound past some LBA: `power.maskrom`, the board's
        /// DDR + usbplug pair sent, and the whole image verified (resumed from the journal)
        /// through the usbplug's rockusb.
        Usbplug => "usbplug",
        /// The board reset to boot from its flash.
        Reset => "reset",
        /// The console awaited for `wait_for`.
        AwaitConsole => "await_console",
        /// The wait, at the end, for the input files' SHA-256 taken beside the flash (what
        /// of it the flash did not hide).
        HashFiles => "hash_files",
    }
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A step that ran to its end, with how long it took and what it did.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct StepRecord {
    pub step: Step,
    pub ms: u64,
    /// What it did, in a few words (`skipped: already in Loader mode`, `64.0 MiB at
    /// 21.3 MB/s`).
    pub detail: String,
}

/// What a running flash reports as it goes: a step begins or ends, or bytes moved.
#[derive(Debug, Clone)]
pub enum Event {
    Started(Step),
    Done(StepRecord),
    Bytes(Bytes),
}

/// Bytes moved in the step that moves them (`check_image`, `write`, `verify`).
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
pub struct Bytes {
    pub step: Step,
    pub done: u64,
    pub total: u64,
    /// Bytes per second since the step began.
    pub rate: f64,
    /// Seconds left at that rate (`None` before anything moved).
    pub eta_secs: Option<f64>,
}

impl Bytes {
    /// The whole flash as one rising percentage, for progress notifications: the image
    /// check counts 5 %, the write 80 %, the verification 15 %.
    pub fn overall_percent(&self) -> f64 {
        let part = if self.total == 0 {
            1.0
        } else {
            (self.done as f64 / self.total as f64).min(1.0)
        };
        let (from, span) = match self.step {
            Step::CheckImage => (0.0, 5.0),
            Step::Write => (5.0, 80.0),
            Step::Verify => (85.0, 15.0),
            _ => (0.0, 0.0),
        };
        ((from + span * part) * 10.0).floor() / 10.0
    }

    /// `write 12.0 MiB of 64.0 MiB (23.4%) at 20.1 MB/s, 3 s left`.
    pub fn line(&self) -> String {
        format!(
            "{} {} of {} ({}%) at {:.1} MB/s{}",
            self.step,
            mib(self.done),
            mib(self.total),
            self.overall_percent(),
            self.rate / 1e6,
            self.eta_secs
                .map(|s| format!(", {s:.0} s left"))
                .unwrap_or_default()
        )
    }
}

/// Bytes in MiB, one decimal.
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_overall_percentage_rises_across_steps() {
        let b = |step, done| Bytes {
            step,
            done,
            total: 100,
            rate: 1.0,
            eta_secs: None,
        };
        let seq = [
            b(Step::CheckImage, 0),
            b(Step::CheckImage, 100),
            b(Step::Write, 50),
            b(Step::Write, 100),
            b(Step::Verify, 100),
        ];
        let p: Vec<f64> = seq.iter().map(Bytes::overall_percent).collect();
        assert_eq!(p, vec![0.0, 5.0, 45.0, 85.0, 100.0]);
        assert!(b(Step::Write, 50).line().contains("(45%)"));
    }

    #[test]
    fn every_step_is_serialised_by_its_name() {
        assert_eq!(Step::ALL.len(), 14);
        for &s in Step::ALL {
            assert_eq!(serde_json::to_value(s).ok(), Some(s.as_str().into()));
            assert_eq!(Step::named(s.as_str()), Some(s));
        }
    }
}
