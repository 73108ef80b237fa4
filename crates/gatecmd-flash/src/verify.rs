//! Read-back: a chunk read from the target in transfer-sized pieces and hashed. Used to
//! decide whether a journalled chunk can be skipped, and by the verification after the
//! write, which reads back every chunk written and compares its SHA-256 with the one taken
//! as it was written (no second staged copy of the image is kept or re-read).

use std::time::Instant;

use sha2::{Digest, Sha256};

use crate::error::FlashError;
use crate::progress::{Control, Phase};
use crate::report::VerifyReport;
use crate::target::{BlockTarget, TargetError};
use crate::units::human;

/// Reads `buf.len()` bytes from `lba` in pieces the target accepts.
pub(crate) fn read_chunk(
    target: &mut dyn BlockTarget,
    lba: u64,
    buf: &mut [u8],
) -> Result<(), TargetError> {
    let bs = target.block_size() as usize;
    let piece = target.max_transfer_blocks() as usize * bs;
    for (i, p) in buf.chunks_mut(piece).enumerate() {
        target.read_blocks(lba + (i * piece / bs) as u64, p)?;
    }
    Ok(())
}

/// Writes `data` at `lba` in pieces the target accepts.
pub(crate) fn write_chunk(
    target: &mut dyn BlockTarget,
    lba: u64,
    data: &[u8],
) -> Result<(), TargetError> {
    let bs = target.block_size() as usize;
    let piece = target.max_transfer_blocks() as usize * bs;
    for (i, p) in data.chunks(piece).enumerate() {
        target.write_blocks(lba + (i * piece / bs) as u64, p)?;
    }
    Ok(())
}

/// SHA-256 of the target's bytes at `lba` (`buf` sized to the chunk).
pub(crate) fn hash_back(
    target: &mut dyn BlockTarget,
    lba: u64,
    buf: &mut [u8],
) -> Result<[u8; 32], TargetError> {
    read_chunk(target, lba, buf)?;
    Ok(Sha256::digest(&*buf).into())
}

/// A chunk written in this run: image offset, length, SHA-256.
pub(crate) type Written = (u64, u64, [u8; 32]);

/// Reads back every chunk written and compares. Returns the report and the chunks that
/// differ (image offset, length).
pub(crate) fn verify(
    target: &mut dyn BlockTarget,
    start_lba: u64,
    written: &[Written],
    ctl: &mut Control,
) -> Result<(VerifyReport, Vec<(u64, u64)>), FlashError> {
    let t0 = Instant::now();
    let bs = target.block_size() as u64;
    let total: u64 = written.iter().map(|w| w.1).sum();
    let mut buf = Vec::new();
    let mut done = 0;
    let mut bad = Vec::new();
    ctl.report(Phase::Verify, 0, total);
    for &(offset, len, sha) in written {
        if ctl.cancelled() {
            return Err(FlashError::Cancelled {
                phase: Phase::Verify,
                done: human(done),
                total: human(total),
                at: offset,
                after: "the image was written whole but not verified to the end; the journal resumes a later flash of it (reading back what is there)".into(),
            });
        }
        buf.resize(len as usize, 0);
        let lba = start_lba + offset / bs;
        let got = hash_back(target, lba, &mut buf).map_err(|e| FlashError::Read {
            phase: Phase::Verify,
            lba,
            len,
            reason: e.to_string(),
            written: "the image was written whole; verification could not finish: check the board's connection and flash the same image again (unchanged chunks are read back and skipped)".into(),
        })?;
        if got != sha {
            bad.push((offset, len));
        }
        done += len;
        ctl.report(Phase::Verify, done, total);
    }
    Ok((
        VerifyReport {
            chunks: written.len() as u64,
            bytes: done,
            secs: t0.elapsed().as_secs_f64(),
        },
        bad,
    ))
}
