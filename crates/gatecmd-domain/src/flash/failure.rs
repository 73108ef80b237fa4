//! Why a flash stopped, as values: the step it stopped in, what went wrong (an enum whose
//! messages are written for the agent), what the board showed (the device at its port,
//! its console's last line), where the board was left, and the next thing to do.

use schemars::JsonSchema;
use serde::Serialize;

use super::step::{Step, StepRecord};
use crate::boards::boot::Unreachable;
use gatecmd_flash::FlashError;

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum FlashFailure {
    /// The board is not on USB in a rockusb mode and has no `power.maskrom` to put it there.
    #[error("{0}")]
    Unreachable(#[from] Unreachable),
    /// The MaskROM action ran and failed.
    #[error("the MaskROM action `{argv}` exited with {exit_code:?}: {output}")]
    PowerFailed {
        argv: String,
        exit_code: Option<i32>,
        output: String,
    },
    /// The MaskROM action could not run.
    #[error("the MaskROM action `{argv}` could not run: {error}")]
    PowerStart { argv: String, error: String },
    /// Nothing in MaskROM or Loader mode came to the board's port.
    #[error(
        "no rockusb device (MaskROM or Loader) came to board {board}'s USB port {port} within \
         {secs} s; the port shows {shows}"
    )]
    NoRockusb {
        board: String,
        port: String,
        secs: u64,
        shows: String,
    },
    /// The board is in MaskROM and no loader was given.
    #[error("board {board} is in MaskROM mode, which has no flash driver, and no loader was given")]
    NeedsLoader {
        board: String,
        /// The loader files the operator allows, in words (`flash.loaders`).
        allowed: String,
    },
    /// The loader could not be read as a boot file, or was sent and did not start.
    #[error("the loader {loader} (sha256 {sha256}) did not start: {source}")]
    Loader {
        loader: String,
        sha256: String,
        #[source]
        source: Box<FlashError>,
    },
    /// The engine's own failure: its message names what was seen and what reached the board.
    #[error("{0}")]
    Engine(Box<FlashError>),
    /// `cancel_job`, a task cancel or the server's shutdown.
    #[error("cancelled during {step}: {detail}")]
    Cancelled { step: Step, detail: String },
    /// The call's `timeout_secs` ran out.
    #[error("the flash's time limit ({secs} s) ran out during {step}: {detail}")]
    TimedOut {
        step: Step,
        secs: u64,
        detail: String,
    },
    /// `wait_for` did not appear on the console after the reset.
    #[error(
        "the board was reset, but /{pattern}/ did not appear on its console within {secs} s \
         (last line: {last:?})"
    )]
    ConsoleTimeout {
        pattern: String,
        secs: u64,
        last: String,
    },
    /// The board came back in MaskROM after the reset to boot from flash, while
    /// `wait_for` was awaited: its boot ROM found nothing it could start in the flash.
    #[error(
        "the image was written and verified and board {board} was reset to boot from it, but \
         {secs} s later it came back in MaskROM mode at USB port {port}: its boot ROM started \
         no loader from the flash, so /{pattern}/ will not appear (a Rockchip SoC reads its \
         first-stage loader, idbloader, at LBA 0x40 = byte offset 32 KiB of a whole-disk \
         image, which flash_board writes from LBA 0; a MaskROM button or recovery line still \
         held after power.maskrom does the same)"
    )]
    BackInMaskrom {
        board: String,
        port: String,
        secs: u64,
        pattern: String,
    },
    /// The console's capture ended while it was awaited.
    #[error("the console of board {board} stopped while /{pattern}/ was awaited")]
    ConsoleGone { board: String, pattern: String },
    /// The blocking USB work ended without an outcome (a panic: a bug).
    #[error("the flash's USB thread ended without an outcome: {0}")]
    Lost(String),
}

impl From<FlashError> for FlashFailure {
    fn from(e: FlashError) -> FlashFailure {
        FlashFailure::Engine(Box::new(e))
    }
}

impl FlashFailure {
    /// The next thing the agent should do.
    pub fn next_action(&self) -> String {
        match self {
            FlashFailure::Unreachable(_) => "configure power.maskrom for the board (docs/BOARDS.md), or put it into MaskROM or Loader mode by hand, then call flash_board again".into(),
            FlashFailure::PowerFailed { .. } | FlashFailure::PowerStart { .. } => "check the board's power switch and power.maskrom command (power_board, gatecmd check), then call flash_board again".into(),
            FlashFailure::NoRockusb { .. } => "check that the board's flashing cable is on the configured usb port (list_devices shows what is attached there), that power.maskrom really enters MaskROM, then call flash_board again".into(),
            FlashFailure::NeedsLoader { allowed, .. } => format!("pass loader: the loader for this SoC, one the bench operator allows: {allowed} (list_boards shows them per board); or loader: {{ddr, usbplug}}, the DDR init blob and usbplug pair the operator allows"),
            FlashFailure::Loader { .. } => "pass the loader made for this SoC (rkbin's *_spl_loader_*.bin); the board stays in MaskROM until then, and nothing was written to its flash".into(),
            FlashFailure::Engine(e) => match e.as_ref() {
                FlashError::ImageTooLarge { .. } => "flash an image that fits the board's flash; nothing was written".into(),
                FlashError::ImageOverLimit { .. } => "flash an image that fits the board's flash (an operator raises flash.max_image_gib for a larger flash); nothing was written".into(),
                FlashError::BmapRangeMismatch { .. } | FlashError::BmapSizeMismatch { .. } | FlashError::BmapFileChecksum { .. } | FlashError::BmapInvalid { .. } | FlashError::BmapWithSparse { .. } => "pass the bmap made for this image (bmaptool create); nothing was written".into(),
                FlashError::Write { .. } | FlashError::Read { .. } | FlashError::VerifyMismatch { .. } => "call flash_board again with the same image: the chunks the journal lists are read back and skipped, the rest is written".into(),
                _ => "read the error: it names what was seen and what to do; call flash_board again once it is fixed".into(),
            },
            FlashFailure::Cancelled { .. } | FlashFailure::TimedOut { .. } => "call flash_board again with the same image to go on: what was written and verified is read back and skipped".into(),
            FlashFailure::ConsoleTimeout { .. } | FlashFailure::ConsoleGone { .. } => "the image was written and verified; read the boot log (boot_log, console_read from console_cursor) to see why the board did not print the pattern".into(),
            FlashFailure::BackInMaskrom { .. } => "flash a whole-disk image that the SoC can boot (its idbloader at LBA 0x40, as rkbin and the board's vendor build it), or check the one written, and that power.maskrom releases the MaskROM button or line: console_read from console_cursor shows what the board printed before it fell back to MaskROM; the board is in MaskROM now, so flash_board can be called again at once".into(),
            FlashFailure::Lost(_) => "call flash_board again; the journal resumes what was written".into(),
        }
    }

    /// Whether it was `cancel_job` (or the server's shutdown) that stopped it.
    pub fn is_cancel(&self) -> bool {
        matches!(self, FlashFailure::Cancelled { .. })
    }
}

/// What the board showed when the flash stopped.
#[derive(Debug, Clone, Default, Serialize, JsonSchema)]
pub struct Seen {
    /// The device at the board's USB port (`2207:350b in MaskROM mode`), or `nothing`.
    pub device: String,
    /// The console's last line, for a board with a console.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub console_last_line: Option<String>,
}

/// A flash that stopped: the step, the failure, what was seen, and what to do.
#[derive(Debug)]
pub struct Failed {
    pub step: Step,
    pub failure: FlashFailure,
    /// The steps that ended before it, with their durations.
    pub steps: Vec<StepRecord>,
    pub seen: Seen,
    /// Where the board was left (`maskrom`, `loader`, `off`, `not_on_usb`, `booted`).
    pub board_state: String,
    /// Bytes written in this call before it stopped (the journal lists them).
    pub bytes_written: u64,
    /// The console cursor where this call's console output begins.
    pub console_cursor: Option<u64>,
}
