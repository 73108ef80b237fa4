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
    let mut at = 0usize;
    while at < buf.len() {
        let piece = (target.next_transfer_blocks(false).max(1) as usize * bs).min(buf.len() - at);
        target.read_blocks(lba + (at / bs) as u64, &mut buf[at..at + piece])?;
        at += piece;
    }
    Ok(())
}

/// Writes `data` at `lba` in pieces the target accepts.
pub(crate) fn write_chunk(
    target: &mut dyn BlockTarget,
    lba: u64,
    data: &[u8],
) -> Result<(), TargetError> {
    write_pieces(target, lba, data).map_err(|(_, e)| e)
}

/// As [`write_chunk`]; a failure also says how many bytes from the start were written
/// before it (every transfer of them acknowledged).
pub(crate) fn write_pieces(
    target: &mut dyn BlockTarget,
    lba: u64,
    data: &[u8],
) -> Result<(), (usize, TargetError)> {
    let bs = target.block_size() as usize;
    let mut at = 0usize;
    while at < data.len() {
        let piece = (target.next_transfer_blocks(true).max(1) as usize * bs).min(data.len() - at);
        target
            .write_blocks(lba + (at / bs) as u64, &data[at..at + piece])
            .map_err(|e| (at, e))?;
        at += piece;
    }
    Ok(())
}

/// A chunk written in this run: image offset, length, hash.
pub(crate) type Written = (u64, u64, ChunkHash);

/// Reads back every chunk written and compares. Returns the report and the chunks that
/// differ (image offset, length). The reads (USB, on this thread) and the hashing (a second
/// thread) overlap: a chunk is hashed while the next one is read.
/// Chunks that end past `sound_below` (an LBA from which the loader's reads are known not
/// to follow writes) are not read: they count as unverified.
pub(crate) fn verify(
    target: &mut dyn BlockTarget,
    start_lba: u64,
    all_written: &[Written],
    key: &ChunkKey,
    ctl: &mut Control,
    sound_below: Option<u64>,
) -> Result<(VerifyReport, Vec<(u64, u64)>), FlashError> {
    let t0 = Instant::now();
    let bs = target.block_size() as u64;
    let readable = |w: &&Written| sound_below.is_none_or(|l| start_lba + (w.0 + w.1) / bs <= l);
    let written: Vec<Written> = all_written.iter().filter(readable).copied().collect();
    let written = &written[..];
    let unread: u64 =
        all_written.iter().map(|w| w.1).sum::<u64>() - written.iter().map(|w| w.1).sum::<u64>();
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
    let bad_bytes: u64 = bad.iter().map(|b| b.1).sum();
    Ok((
        VerifyReport {
            chunks: written.len() as u64,
            bytes: done,
            verified_bytes: done - bad_bytes,
            unverified_bytes: unread,
            reads_unsound_from_lba: sound_below.filter(|_| unread > 0),
            limit_found_now: false,
            fill: None,
            secs: t0.elapsed().as_secs_f64(),
        },
        bad,
    ))
}

/// What a probe found where a chunk read back wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Probe {
    /// The reads follow the writes: the chunk was really wrong (or the link corrupts).
    Genuine,
    /// From this LBA on, a read answers the same whatever was written: the loader's reads
    /// are not sound there (the blocks before it read back both writes exactly).
    Unsound {
        /// The first such block.
        from_lba: u64,
        /// The byte every position read as from there, when it was one (0xCC: the stock
        /// RK3588 loader).
        fill: Option<u8>,
    },
}

/// Tells a bad write from a loader whose reads do not show what it wrote: the chunk's
/// complement is written and read back, then the chunk itself is written (it stays on the
/// flash) and read back. Block by block, a sound read answers the complement the first time
/// and the chunk the second; a read that answers the same both times does not follow the
/// writes (a fill such as the stock RK3588 loader's 0xCC, or stale data).
pub(crate) fn probe(
    target: &mut dyn BlockTarget,
    lba: u64,
    data: &[u8],
) -> Result<Probe, TargetError> {
    let bs = target.block_size() as usize;
    let inverse: Vec<u8> = data.iter().map(|b| !b).collect();
    write_chunk(target, lba, &inverse)?;
    let mut first = vec![0u8; data.len()];
    read_chunk(target, lba, &mut first)?;
    write_chunk(target, lba, data)?;
    let mut second = vec![0u8; data.len()];
    read_chunk(target, lba, &mut second)?;
    let blocks = first
        .chunks(bs)
        .zip(second.chunks(bs))
        .zip(inverse.chunks(bs).zip(data.chunks(bs)));
    for (k, ((a, b), (wrote_a, wrote_b))) in blocks.enumerate() {
        if a == b {
            let rest = &second[k * bs..];
            return Ok(Probe::Unsound {
                from_lba: lba + k as u64,
                fill: rest.iter().all(|&x| x == rest[0]).then_some(rest[0]),
            });
        }
        if a != wrote_a || b != wrote_b {
            return Ok(Probe::Genuine);
        }
    }
    Ok(Probe::Genuine)
}
