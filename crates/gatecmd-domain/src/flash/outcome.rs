//! What a finished flash reports: every step with its duration, the files (with their
//! SHA-256), what was written where, the verification, and the boot log.

use schemars::JsonSchema;
use serde::Serialize;

use super::step::StepRecord;

/// A flash that ran to its end: written, verified, reset (and, with `wait_for`, booted).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Flashed {
    /// The board (the answer around this says it: not serialised twice).
    #[serde(skip)]
    pub board: String,
    /// Every step in order, each with its duration; skipped ones say why. The answer
    /// around this carries them once (flash_board's `steps`): not serialised here.
    #[serde(skip)]
    pub steps: Vec<StepRecord>,
    pub image: FileFacts,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bmap: Option<FileFacts>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loader: Option<FileFacts>,
    /// What the loader said of the flash.
    pub flash: FlashFacts,
    pub written: Written,
    /// Every byte written in this call was read back and equal (`verification` is
    /// `read_back`). The answer around this carries it (flash_board's `verified`).
    #[serde(skip)]
    pub verified: bool,
    /// How far the read-back went: `read_back` (all of it), `partial` (up to
    /// `reads_unsound_from_lba`, where this loader's reads stop showing what the flash
    /// holds), `none` (nothing written could be read back soundly). Never a failure: the
    /// writes were acknowledged; what could not be read soundly is said, not guessed.
    pub verification: String,
    /// Bytes written in this call that were read back equal where the reads are sound.
    pub verified_bytes: u64,
    /// Bytes written in this call that could not be verified (past the loader's limit).
    pub unverified_bytes: u64,
    /// The first LBA from which the loader's reads do not follow its writes (found now by
    /// a probe, or remembered from an earlier flash with the same loader's SHA-256).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reads_unsound_from_lba: Option<u64>,
    /// Bytes read back.
    pub verify_bytes: u64,
    pub verify_ms: u64,
    /// The resume journal (one per board).
    pub journal: String,
    /// The console cursor just before the reset (console_read from here).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub console_cursor: Option<u64>,
    /// The console's output of this boot up to the `wait_for` match (at most 64 KiB, the
    /// newest kept).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boot_log: Option<String>,
    /// `booted` (wait_for seen), or `reset` (reset, not watched).
    pub board_state: String,
    /// The report of the boot the reset started, as it stood when the call ended
    /// (boot_report has its transcript; docs/BOARDS.md "Boot reports").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boot: Option<crate::boards::boot_reports::BootSummary>,
    pub took_ms: u64,
}

/// An input file as the flash used it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct FileFacts {
    /// Where it resolved beneath the file roots.
    pub path: String,
    pub bytes: u64,
    /// SHA-256 of the whole file (for the image: hashed beside the flash at low priority).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// `none`, `gzip`, `zstd`, `xz` (images only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compression: Option<String>,
    /// `raw`, `android_sparse` (images only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layout: Option<String>,
    /// Bytes of the disk image it expands to (images only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logical_bytes: Option<u64>,
    /// Bytes it maps: all of a raw image, a bmap's ranges, a sparse image's data.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mapped_bytes: Option<u64>,
}

/// The board's flash, as its loader reported it.
#[derive(Debug, Clone, Default, Serialize, JsonSchema)]
pub struct FlashFacts {
    pub flash_id: String,
    pub bytes: u64,
}

/// The most ranges a result and its audit line list: a bmap of a real root filesystem maps
/// thousands, and the line stays readable and bounded.
pub const MAX_RANGES: usize = 64;

/// What the write phase did.
#[derive(Debug, Clone, Default, Serialize, JsonSchema)]
pub struct Written {
    /// The image's LBA range on the flash, `[first, end)` in 512-byte sectors; only its
    /// mapped chunks were written.
    pub start_lba: u64,
    pub end_lba: u64,
    pub bytes_written: u64,
    pub chunks_written: u64,
    /// Chunks a previous, cut flash had written that the board still held (read back,
    /// equal): not written again.
    pub bytes_skipped: u64,
    pub chunks_skipped: u64,
    /// Journalled chunks the board no longer held, written again.
    pub chunks_rewritten: u64,
    /// The sector ranges written in this run, `[first, end)`, contiguous chunks merged (a
    /// bmap's mapped ranges; chunks read back and skipped are not in it); the first
    /// [`MAX_RANGES`] of them.
    pub ranges: Vec<[u64; 2]>,
    /// How many ranges there were (more than `ranges` holds when above [`MAX_RANGES`]).
    pub ranges_total: usize,
    pub chunk_bytes: u64,
    /// Bytes per USB write command (flash.transfer_kib).
    pub transfer_bytes: u64,
    pub write_ms: u64,
    /// Bytes written per second of the write phase, in MB/s.
    pub rate_mb_s: f64,
}
