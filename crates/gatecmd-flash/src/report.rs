//! What a flash did, phase by phase, for the caller to show (structured, serialisable).

use std::path::PathBuf;

use serde::Serialize;

use crate::image::ImageInfo;
use crate::image::check::CheckReport;

/// The outcome of a successful flash.
#[derive(Debug, Clone, Serialize)]
pub struct FlashReport {
    /// The image, with its sizes known.
    pub image: ImageInfo,
    /// LBA of image offset 0.
    pub start_lba: u64,
    /// The chunk size (bytes per hash and journal entry).
    pub chunk_size: u64,
    /// Bytes per USB command.
    pub transfer_size: u64,
    /// The pre-pass, when one ran.
    pub check: Option<CheckReport>,
    /// The write phase.
    pub write: WriteReport,
    /// The verification, unless it was turned off.
    pub verify: Option<VerifyReport>,
    /// The journal file.
    pub journal: PathBuf,
}

/// The write phase.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WriteReport {
    /// Bytes the image maps (written + skipped).
    pub bytes_total: u64,
    /// Chunks written.
    pub chunks_written: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Chunks the journal listed whose bytes the board still held (read back, equal): not
    /// written again.
    pub chunks_skipped: u64,
    /// Their bytes.
    pub bytes_skipped: u64,
    /// Chunks the journal listed that had to be written after all (the board's bytes
    /// differed).
    pub chunks_rewritten: u64,
    /// The LBA ranges written in this run, `[first, end)` in the target's blocks, in
    /// order, contiguous chunks merged (a bmap's mapped ranges; skipped chunks are not in
    /// it).
    pub ranges: Vec<(u64, u64)>,
    /// Wall time of the phase, seconds (reading, decompressing, hashing and writing overlap).
    pub secs: f64,
    /// Part of `secs` spent reading back journalled chunks.
    pub compare_secs: f64,
    /// Part of `secs` spent in the target's writes (USB commands): the board's share.
    pub target_secs: f64,
    /// Part of `secs` spent waiting for the next chunk from the decoding thread (reading,
    /// decompressing, hashing): the host's share, when it is the slower side.
    pub wait_secs: f64,
}

/// The verification: every chunk written in this run read back and hashed, as far as the
/// loader's reads are sound.
#[derive(Debug, Clone, Default, Serialize)]
pub struct VerifyReport {
    /// Chunks read back.
    pub chunks: u64,
    /// Bytes read back.
    pub bytes: u64,
    /// Bytes written in this run that were read back equal where the loader's reads are
    /// sound: the bytes this verification vouches for.
    pub verified_bytes: u64,
    /// Bytes written in this run that could not be verified: at or past
    /// `reads_unsound_from_lba` (taken by the loader, each write acknowledged, but its
    /// reads there do not show what the flash holds).
    pub unverified_bytes: u64,
    /// The first LBA from which this loader's reads were found (or known, from an earlier
    /// flash with the same loader) not to follow writes; `None`: sound everywhere read.
    pub reads_unsound_from_lba: Option<u64>,
    /// Whether that limit was found in this run (a probe) or known before.
    pub limit_found_now: bool,
    /// The byte every position of the first wrong read-back held, when it was a uniform
    /// fill (0xCC: the stock RK3588 loader's answer past 32 MiB).
    pub fill: Option<u8>,
    /// Wall time, seconds (the probe included).
    pub secs: f64,
}

impl VerifyReport {
    /// `read_back` (everything written was read back equal), `partial` (up to
    /// `reads_unsound_from_lba`), `none` (nothing written could be read back soundly).
    pub fn verification(&self) -> &'static str {
        if self.unverified_bytes == 0 {
            "read_back"
        } else if self.verified_bytes > 0 {
            "partial"
        } else {
            "none"
        }
    }
}
