//! The last phase: the files' SHA-256s joined, and what the flash did gathered into the
//! result the call returns ([`Flashed`]).

use super::boot::{Booted, boot_summary};
use super::context::Run;
use super::image::name_of;
use super::inventory::Inventory;
use super::write::rate;
use crate::flash::outcome::{FileFacts, FlashFacts, Flashed, MAX_RANGES, Written};
use gatecmd_flash::{FlashReport, ImageInfo};

/// What the phases found, for the result.
pub(super) struct Found {
    pub info: ImageInfo,
    pub loader: Option<FileFacts>,
    pub flash: FlashFacts,
    pub report: FlashReport,
    pub chunk_size: u64,
    pub verify_ms: u64,
    pub booted: Booted,
}

/// The `hash_files` step, then the result.
pub(super) async fn flashed(run: &mut Run<'_>, inventory: Inventory, found: Found) -> Flashed {
    let image_path = inventory.image_path.clone();
    let image_bytes = inventory.image_bytes;
    let hashed = inventory.join(run).await;
    let boot = boot_summary(run, &found.booted).await;
    let Found {
        info,
        loader,
        flash,
        report,
        chunk_size,
        verify_ms,
        booted,
    } = found;
    let v = report.verify.clone().unwrap_or_default();
    Flashed {
        boot,
        board: run.board.name.clone(),
        steps: std::mem::take(&mut run.steps),
        image: FileFacts {
            path: image_path,
            bytes: image_bytes,
            sha256: hashed.image,
            compression: Some(name_of(&info.compression)),
            layout: Some(name_of(&info.layout)),
            logical_bytes: report.image.logical_size,
            mapped_bytes: report.image.mapped_bytes,
        },
        bmap: hashed.bmap,
        loader,
        flash,
        written: written(&report, chunk_size),
        verified: report.verify.is_some() && v.unverified_bytes == 0,
        verification: if report.verify.is_some() {
            v.verification().to_string()
        } else {
            "none".into()
        },
        verified_bytes: v.verified_bytes,
        unverified_bytes: v.unverified_bytes,
        reads_unsound_from_lba: v.reads_unsound_from_lba,
        verify_bytes: v.bytes,
        verify_ms,
        journal: report.journal.display().to_string(),
        console_cursor: booted.cursor,
        boot_log: booted.boot_log,
        board_state: booted.board_state,
        took_ms: run.received.elapsed().as_millis() as u64,
    }
}

/// What the write did, from the engine's report.
fn written(report: &FlashReport, chunk_size: u64) -> Written {
    let w = &report.write;
    let start_lba = report.start_lba;
    let logical_bytes = report.image.logical_size.unwrap_or(0);
    Written {
        start_lba,
        end_lba: start_lba + logical_bytes.div_ceil(512),
        bytes_written: w.bytes_written,
        chunks_written: w.chunks_written,
        bytes_skipped: w.bytes_skipped,
        chunks_skipped: w.chunks_skipped,
        chunks_rewritten: w.chunks_rewritten,
        ranges: w
            .ranges
            .iter()
            .take(MAX_RANGES)
            .map(|&(a, b)| [a, b])
            .collect(),
        ranges_total: w.ranges.len(),
        chunk_bytes: chunk_size,
        transfer_bytes: report.transfer_size,
        write_ms: (w.secs * 1000.0) as u64,
        rate_mb_s: rate(w.bytes_written, w.secs),
    }
}
