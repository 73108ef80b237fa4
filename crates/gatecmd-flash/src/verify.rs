//! Read-back: a chunk read from the target in transfer-sized pieces. Used to decide whether
//! a journalled chunk can be skipped (compared byte for byte with the image's chunk), and by
//! the verification after the write, which reads back every chunk written and compares its
//! keyed hash with the one taken as it was written (no second staged copy of the image is
//! kept or re-read).

use std::sync::mpsc::{channel, sync_channel};
use std::thread;
use std::time::Instant;

use crate::chunk_hash::{ChunkHash, ChunkKey};
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

/// A chunk written in this run: image offset, length, hash.
pub(crate) type Written = (u64, u64, ChunkHash);

/// Reads back every chunk written and compares. Returns the report and the chunks that
/// differ (image offset, length). The reads (USB, on this thread) and the hashing (a second
/// thread) overlap: a chunk is hashed while the next one is read.
pub(crate) fn verify(
    target: &mut dyn BlockTarget,
    start_lba: u64,
    written: &[Written],
    key: &ChunkKey,
    ctl: &mut Control,
) -> Result<(VerifyReport, Vec<(u64, u64)>), FlashError> {
    let t0 = Instant::now();
    let bs = target.block_size() as u64;
    let total: u64 = written.iter().map(|w| w.1).sum();
    let longest = written.iter().map(|w| w.1).max().unwrap_or(0) as usize;
    let mut bad = Vec::new();
    ctl.report(Phase::Verify, 0, total);
    let (to_hash, hashing) = sync_channel::<(usize, Vec<u8>, usize)>(1);
    let (to_check, hashed) = channel::<(usize, ChunkHash, Vec<u8>)>();
    let outcome = thread::scope(|s| {
        s.spawn(move || {
            for (i, buf, len) in hashing {
                let got = key.hash(&buf[..len]);
                if to_check.send((i, got, buf)).is_err() {
                    return;
                }
            }
        });
        let mut spare: Vec<Vec<u8>> = vec![vec![0u8; longest], vec![0u8; longest]];
        let mut done = 0;
        let mut in_flight = 0usize;
        let mut check = |(i, got, buf): (usize, ChunkHash, Vec<u8>),
                         spare: &mut Vec<Vec<u8>>,
                         done: &mut u64,
                         ctl: &mut Control| {
            let (offset, len, want) = written[i];
            if got != want {
                bad.push((offset, len));
            }
            *done += len;
            ctl.report(Phase::Verify, *done, total);
            spare.push(buf);
        };
        for (i, &(offset, len, _)) in written.iter().enumerate() {
            if ctl.cancelled() {
                return Err(FlashError::Cancelled {
                    phase: Phase::Verify,
                    done: human(done),
                    bytes_written: total,
                    total: human(total),
                    at: offset,
                    after: "the image was written whole but not verified to the end; the journal resumes a later flash of it (reading back what is there)".into(),
                });
            }
            let mut buf = match spare.pop() {
                Some(b) => b,
                None => match hashed.recv() {
                    Ok(r) => {
                        in_flight -= 1;
                        check(r, &mut spare, &mut done, ctl);
                        spare.pop().unwrap_or_else(|| vec![0u8; longest])
                    }
                    Err(_) => vec![0u8; longest],
                },
            };
            let lba = start_lba + offset / bs;
            read_chunk(target, lba, &mut buf[..len as usize]).map_err(|e| FlashError::Read {
                phase: Phase::Verify,
                lba,
                len,
                reason: e.to_string(),
                written: "the image was written whole; verification could not finish: check the board's connection and flash the same image again (unchanged chunks are read back and skipped)".into(),
            })?;
            if to_hash.send((i, buf, len as usize)).is_err() {
                break;
            }
            in_flight += 1;
        }
        drop(to_hash);
        while in_flight > 0 {
            let Ok(r) = hashed.recv() else { break };
            in_flight -= 1;
            check(r, &mut spare, &mut done, ctl);
        }
        Ok(done)
    });
    let done = outcome?;
    Ok((
        VerifyReport {
            chunks: written.len() as u64,
            bytes: done,
            secs: t0.elapsed().as_secs_f64(),
        },
        bad,
    ))
}
