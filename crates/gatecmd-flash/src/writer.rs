//! The flash itself: pre-pass, size check, then the chunks written in order with a keyed
//! hash each, the journal kept, and a read-back verification of everything written.
//!
//! Reading, decompressing and hashing run on a second thread, two chunks ahead of the USB
//! writes on the caller's thread, so a slow decoder and the board work side by side.

use std::path::PathBuf;
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel, sync_channel};
use std::thread;
use std::time::Instant;

use crate::chunk::{ChunkError, Chunker};
use crate::error::{FlashError, written_note};
use crate::image::Image;
use crate::image::check::stream_fault;
use crate::journal::{Geometry, Journal, State};
use crate::progress::{Control, Phase};
use crate::report::{FlashReport, VerifyReport, WriteReport};
use crate::target::BlockTarget;
use crate::units::{human, human_bin};
use crate::verify::{Probe, Written, probe, read_chunk, verify, write_pieces};

/// Default chunk size: see the README's measurements (larger chunks cost nothing in speed
/// and keep the journal short; smaller ones make cancel and resume finer).
pub const DEFAULT_CHUNK_SIZE: u64 = 4 << 20;
/// The largest chunk: a flash holds about five in memory at once (two queued, one being
/// built, one being written, one read back for a resume check), so 16 MiB chunks cost
/// 80 MiB; the speed does not depend on it (README).
pub const MAX_CHUNK_SIZE: u64 = 16 << 20;
/// Chunks decoded ahead of the writes.
const AHEAD: usize = 2;

/// How to flash.
#[derive(Debug, Clone)]
pub struct FlashOptions {
    /// The board's name: the journal's key.
    pub board: String,
    /// The directory of the journals (created 0700 if missing).
    pub state_dir: PathBuf,
    /// LBA where image offset 0 goes (0: a whole-disk image).
    pub start_lba: u64,
    /// Bytes per chunk (a multiple of the block size, at most [`MAX_CHUNK_SIZE`]).
    pub chunk_size: u64,
    /// Read back the journal's chunks and skip those the board still holds.
    pub resume: bool,
    /// Read back and compare everything written.
    pub verify: bool,
    /// The LBA from which this loader's reads are known not to show what the flash holds
    /// (found by an earlier flash with the same loader): nothing from there is read back
    /// to skip a chunk on resume or to verify one; the verification says so.
    pub reads_unsound_from_lba: Option<u64>,
}

impl FlashOptions {
    /// Defaults: LBA 0, [`DEFAULT_CHUNK_SIZE`], resume and verify on.
    pub fn new(board: impl Into<String>, state_dir: impl Into<PathBuf>) -> FlashOptions {
        FlashOptions {
            board: board.into(),
            state_dir: state_dir.into(),
            start_lba: 0,
            chunk_size: DEFAULT_CHUNK_SIZE,
            resume: true,
            verify: true,
            reads_unsound_from_lba: None,
        }
    }
}

/// Flashes `image` to `target`: the pre-pass if the image needs one, the size check, the
/// write (skipping journalled chunks the board still holds), the verification. Progress
/// goes to `ctl` after every chunk; its cancel flag is checked between chunks. Every stop
/// (error, cancel) leaves the journal describing what was written, so the same call again
/// resumes.
pub fn flash(
    target: &mut dyn BlockTarget,
    image: &mut Image,
    opts: &FlashOptions,
    ctl: &mut Control,
) -> Result<FlashReport, FlashError> {
    let bs = target.block_size() as u64;
    check_options(opts, image, bs)?;
    let capacity = target.capacity_blocks().saturating_mul(bs);
    let room = capacity.saturating_sub(opts.start_lba.saturating_mul(bs));
    let check = if image.needs_check() || image.check_report().is_some() {
        let limit = crate::image::SizeLimit::new(room, "the board's flash");
        Some(image.check(ctl, &limit)?)
    } else {
        None
    };
    let logical = image.logical_size().unwrap_or(0);
    let mapped = image.mapped_bytes().unwrap_or(logical);
    let need = opts
        .start_lba
        .saturating_mul(bs)
        .saturating_add(logical.div_ceil(bs) * bs);
    if need > capacity {
        return Err(FlashError::ImageTooLarge {
            image: human(logical),
            flash: human(capacity),
            offset: if opts.start_lba > 0 {
                format!(" from LBA 0x{:x}", opts.start_lba)
            } else {
                String::new()
            },
        });
    }
    let geometry = Geometry {
        block_size: bs as u32,
        start_lba: opts.start_lba,
        chunk_size: opts.chunk_size,
    };
    let described = serde_json::to_value(image.info()).unwrap_or_default();
    let mut journal = Journal::open(&opts.state_dir, &opts.board, geometry, described)?;
    if !opts.resume {
        journal.clear();
    }
    journal.set_state(State::Writing);
    // Written before the first chunk: a state directory that cannot take the journal is
    // found out while the board is still untouched.
    journal.flush()?;

    // Raised when the write phase ends whichever way: the decoding thread stops then even
    // in a long walk between two runs, so the phase never waits for it.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let segments = image.segments(&stop)?;
    let (write, written) = write_phase(target, segments, opts, mapped, &mut journal, ctl, &stop)?;
    journal.set_state(State::Written);
    journal.flush()?;

    let verify_report = if opts.verify {
        Some(verify_phase(
            target,
            image,
            opts,
            &written,
            &mut journal,
            ctl,
        )?)
    } else {
        None
    };
    Ok(FlashReport {
        image: image.info().clone(),
        start_lba: opts.start_lba,
        chunk_size: opts.chunk_size,
        transfer_size: target.largest_write_blocks() as u64 * bs,
        check,
        write,
        verify: verify_report,
        journal: journal.path().to_path_buf(),
    })
}

/// Refuses a chunk size the board's blocks do not divide (or above the largest), and an
/// image whose blocks they do not divide.
fn check_options(opts: &FlashOptions, image: &Image, bs: u64) -> Result<(), FlashError> {
    if opts.chunk_size < bs
        || !opts.chunk_size.is_multiple_of(bs)
        || opts.chunk_size > MAX_CHUNK_SIZE
    {
        return Err(FlashError::InvalidOption {
            what: "chunk size",
            reason: format!(
                "{} bytes; it must be a multiple of the board's {bs}-byte blocks, up to {}",
                opts.chunk_size,
                human_bin(MAX_CHUNK_SIZE)
            ),
        });
    }
    let align = image.alignment();
    if align > 1 && !align.is_multiple_of(bs) {
        return Err(FlashError::InvalidOption {
            what: "image block size",
            reason: format!(
                "the image's blocks are {align} bytes, not a multiple of the board's {bs}-byte blocks: convert it (img2simg -b 4096, bmaptool create)"
            ),
        });
    }
    Ok(())
}

/// The verification: everything written read back and compared; a chunk that reads back
/// wrong is probed (a bad write, or a loader whose reads do not show what it wrote?), and
/// the journal's state says what the board now holds.
fn verify_phase(
    target: &mut dyn BlockTarget,
    image: &Image,
    opts: &FlashOptions,
    written: &[Written],
    journal: &mut Journal,
    ctl: &mut Control,
) -> Result<VerifyReport, FlashError> {
    let bs = target.block_size() as u64;
    let key = journal.key().clone();
    let (mut report, bad) = verify(
        target,
        opts.start_lba,
        written,
        &key,
        ctl,
        opts.reads_unsound_from_lba,
    )
    .inspect_err(|_| {
        let _ = journal.flush();
    })?;
    let t_probe = Instant::now();
    let unsound = match bad.first() {
        None => None,
        Some(&(first, first_len)) => {
            // A bad write, or a loader whose reads do not show what it wrote? The
            // chunk's bytes again (the image streamed to it), then the probe.
            let lba = opts.start_lba + first / bs;
            let data = chunk_at(image, opts, bs, &key, first, first_len, ctl)?;
            let found = probe(target, lba, &data).map_err(|e| FlashError::Read {
                phase: Phase::Verify,
                lba,
                len: first_len,
                reason: e.to_string(),
                written: "the image was written whole; a chunk read back wrong and the check of the loader's reads could not finish: flash the same image again".into(),
            })?;
            match found {
                Probe::Genuine => {
                    for &(offset, _) in &bad {
                        journal.forget(offset);
                    }
                    journal.flush()?;
                    return Err(FlashError::VerifyMismatch {
                        count: bad.len(),
                        first_lba: lba,
                        first_len,
                        chunks: bad,
                    });
                }
                Probe::Unsound { from_lba, fill } => Some((from_lba, fill)),
            }
        }
    };
    if let Some((from_lba, fill)) = unsound {
        // What lies wholly below the limit was read back equal; the probe read the
        // first bad chunk's blocks below it back exactly; the rest is unverified.
        let below = |&(off, len, _): &crate::verify::Written| {
            let start = opts.start_lba + off / bs;
            let end = start + len / bs;
            end.min(from_lba).saturating_sub(start) * bs
        };
        let total: u64 = written.iter().map(|w| w.1).sum();
        report.verified_bytes = written.iter().map(below).sum();
        report.unverified_bytes = total - report.verified_bytes;
        report.reads_unsound_from_lba = Some(from_lba);
        report.limit_found_now = true;
        report.fill = fill;
        report.secs += t_probe.elapsed().as_secs_f64();
    }
    journal.set_state(if report.unverified_bytes == 0 {
        State::Verified
    } else {
        State::Written
    });
    journal.flush()?;
    Ok(report)
}

/// The bytes of the chunk at image offset `offset` (streamed again from the image's start:
/// only when a chunk read back wrong), checked against the hash it was written with.
fn chunk_at(
    image: &Image,
    opts: &FlashOptions,
    bs: u64,
    key: &crate::chunk_hash::ChunkKey,
    offset: u64,
    len: u64,
    ctl: &Control,
) -> Result<Vec<u8>, FlashError> {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut chunker = Chunker::new(image.segments(&stop)?, opts.chunk_size, bs, key.clone());
    let mut buf = Vec::new();
    loop {
        if ctl.cancelled() {
            return Err(FlashError::Cancelled {
                phase: Phase::Verify,
                done: human(0),
                bytes_written: 0,
                total: human(len),
                at: offset,
                after: "the image was written whole; a chunk read back wrong and was being checked: flash the same image again".into(),
            });
        }
        match chunker.next(buf) {
            Ok(Some(c)) if c.offset == offset && c.len as u64 == len => {
                return Ok(c.data().to_vec());
            }
            Ok(Some(c)) if c.offset < offset => buf = c.buf,
            Ok(_) => break,
            Err(ChunkError::Stream(e)) => return Err(stream_fault(e, 0)),
            Err(ChunkError::Unaligned { .. }) => break,
        }
    }
    Err(FlashError::SparseInvalid {
        reason: format!(
            "the chunk at image offset {offset} is no longer in the image (was the file changed during the flash?)"
        ),
        written: "the image was written whole; its verification could not finish".into(),
    })
}

/// What the decoding thread hands over.
type Fed = Result<crate::chunk::Chunk, ChunkError>;

fn write_phase(
    target: &mut dyn BlockTarget,
    segments: Box<dyn crate::image::stream::Segments>,
    opts: &FlashOptions,
    mapped: u64,
    journal: &mut Journal,
    ctl: &mut Control,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<(WriteReport, Vec<Written>), FlashError> {
    let bs = target.block_size() as u64;
    let chunk_size = opts.chunk_size;
    let (tx, rx) = sync_channel::<Fed>(AHEAD);
    let (back_tx, back_rx) = channel::<Vec<u8>>();
    let key = journal.key().clone();
    thread::scope(|s| {
        s.spawn(move || {
            let mut chunker = Chunker::new(segments, chunk_size, bs, key);
            loop {
                let buf = back_rx.try_recv().unwrap_or_default();
                match chunker.next(buf) {
                    Ok(Some(c)) => {
                        if tx.send(Ok(c)).is_err() {
                            return; // the writer stopped
                        }
                    }
                    Ok(None) => return,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                }
            }
        });
        let r = consume(target, rx, back_tx, opts, mapped, journal, ctl);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        // Whatever happened, the journal on disk says what the board holds.
        let _ = journal.flush();
        r
    })
}

/// The write phase's stop by the cancel flag, before the chunk at image offset `at` (or,
/// while the next chunk was being decoded, after the last one received).
fn cancelled_write(
    done: u64,
    r: &WriteReport,
    mapped: u64,
    at: u64,
    journal: &Journal,
) -> FlashError {
    FlashError::Cancelled {
        phase: Phase::Write,
        done: human(done),
        bytes_written: r.bytes_written,
        total: human(mapped),
        at,
        after: if r.bytes_written == 0 {
            "nothing was written".into()
        } else {
            format!(
                "{} were written; the journal {} lists them: flash the same image again to resume",
                human(r.bytes_written),
                journal.path().display()
            )
        },
    }
}

/// The next chunk from the decoding thread (`None`: it is done), waited for in slices
/// between looks at the cancel flag (`Err`: cancelled while waiting).
fn receive(rx: &Receiver<Fed>, ctl: &Control) -> Result<Option<Fed>, ()> {
    loop {
        match rx.recv_timeout(std::time::Duration::from_millis(100)) {
            Ok(fed) => return Ok(Some(fed)),
            Err(RecvTimeoutError::Timeout) if ctl.cancelled() => return Err(()),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return Ok(None),
        }
    }
}

/// The `len` bytes the board holds at `lba`, read into `scratch` (allocated, one chunk
/// large, at the first read: most flashes never read back), for a resume to compare.
fn read_back<'s>(
    target: &mut dyn BlockTarget,
    scratch: &'s mut Vec<u8>,
    opts: &FlashOptions,
    lba: u64,
    len: u64,
    bytes_written: u64,
) -> Result<&'s [u8], FlashError> {
    if (scratch.len() as u64) < len {
        *scratch = vec![0u8; opts.chunk_size as usize];
    }
    let held = &mut scratch[..len as usize];
    read_chunk(target, lba, held).map_err(|e| FlashError::Read {
        phase: Phase::Write,
        lba,
        len,
        reason: e.to_string(),
        written: format!(
            "{}; the journal keeps what was written: flash the same image again to resume",
            written_note(bytes_written)
        ),
    })?;
    Ok(held)
}

/// The write phase: each chunk from the decoding thread skipped (the board holds it, as
/// the journal says and a read-back shows), finished (a cut write's first bytes still
/// there), or written and journalled.
fn consume(
    target: &mut dyn BlockTarget,
    rx: Receiver<Fed>,
    back: std::sync::mpsc::Sender<Vec<u8>>,
    opts: &FlashOptions,
    mapped: u64,
    journal: &mut Journal,
    ctl: &mut Control,
) -> Result<(WriteReport, Vec<Written>), FlashError> {
    let bs = target.block_size() as u64;
    let key = journal.key().clone();
    let t0 = Instant::now();
    let mut r = WriteReport {
        bytes_total: mapped,
        ..WriteReport::default()
    };
    let mut written: Vec<Written> = Vec::new();
    // Allocated at the first journalled chunk: most flashes never read back.
    let mut scratch: Vec<u8> = Vec::new();
    let mut done = 0u64;
    let mut after_last = 0u64;
    ctl.report(Phase::Write, 0, mapped);
    // `rx` is dropped on every return, which stops the decoding thread at its next send.
    loop {
        // Before waiting for the next chunk, and in slices while waiting: a cancel is seen
        // while the decoder walks a long gap (its own flag then stops the walk).
        if ctl.cancelled() {
            return Err(cancelled_write(done, &r, mapped, after_last, journal));
        }
        let tw = Instant::now();
        let Ok(fed) = receive(&rx, ctl) else {
            return Err(cancelled_write(done, &r, mapped, after_last, journal));
        };
        let Some(fed) = fed else {
            break;
        };
        r.wait_secs += tw.elapsed().as_secs_f64();
        let chunk = match fed {
            Ok(c) => c,
            Err(ChunkError::Stream(e)) => return Err(stream_fault(e, r.bytes_written)),
            Err(ChunkError::Unaligned { offset, block }) => {
                return Err(FlashError::SparseInvalid {
                    reason: format!(
                        "data at image offset {offset} do not start on a {block}-byte block"
                    ),
                    written: written_note(r.bytes_written),
                });
            }
        };
        after_last = chunk.offset + chunk.len as u64;
        if ctl.cancelled() {
            return Err(cancelled_write(done, &r, mapped, chunk.offset, journal));
        }
        let len = chunk.len as u64;
        let lba = opts.start_lba + chunk.offset / bs;
        // Never skipped on a read the loader does not answer soundly.
        let readable = opts
            .reads_unsound_from_lba
            .is_none_or(|l| lba + len / bs <= l);
        if opts.resume && readable && journal.lists(chunk.offset, len, &chunk.hash) {
            let tc = Instant::now();
            let held = read_back(target, &mut scratch, opts, lba, len, r.bytes_written)?;
            // Equal bytes, not an equal hash: the journal only said it was worth a look.
            let same = held == chunk.data();
            r.compare_secs += tc.elapsed().as_secs_f64();
            if same {
                r.chunks_skipped += 1;
                r.bytes_skipped += len;
                done += len;
                ctl.report(Phase::Write, done.min(mapped), mapped);
                let _ = back.send(chunk.buf);
                continue;
            }
            r.chunks_rewritten += 1;
        }
        // The first bytes of this chunk a cut write left (their transfers acknowledged),
        // when they are still on the board: only the rest is written.
        let mut from = 0usize;
        if opts.resume
            && readable
            && let Some((plen, phash)) = journal.prefix(chunk.offset, len)
            && key.hash(&chunk.data()[..plen as usize]) == phash
        {
            let tc = Instant::now();
            let held = read_back(target, &mut scratch, opts, lba, plen, r.bytes_written)?;
            r.compare_secs += tc.elapsed().as_secs_f64();
            if held == &chunk.data()[..plen as usize] {
                from = plen as usize;
                r.bytes_skipped += plen;
            }
        }
        let tt = Instant::now();
        let wrote = write_pieces(target, lba + from as u64 / bs, &chunk.data()[from..]);
        r.target_secs += tt.elapsed().as_secs_f64();
        if let Err((done_here, e)) = wrote {
            // What of this chunk is on the board, kept: a resume reads it back and writes
            // only the rest.
            let kept = (from + done_here) as u64;
            if kept > 0 {
                let kh = key.hash(&chunk.data()[..kept as usize]);
                journal.record(chunk.offset, kept, kh);
            }
            r.bytes_written += done_here as u64;
            return Err(FlashError::Write {
                lba: lba + kept / bs,
                len: len - kept,
                reason: e.to_string(),
                done: human(r.bytes_written),
                bytes_written: r.bytes_written,
                total: human(mapped),
                journal: journal.path().display().to_string(),
            });
        }
        journal.record(chunk.offset, len, chunk.hash);
        journal.flush_if_due()?;
        let (start, end) = (lba + from as u64 / bs, lba + len / bs);
        match r.ranges.last_mut() {
            Some(last) if last.1 == start => last.1 = end,
            _ => r.ranges.push((start, end)),
        }
        written.push((chunk.offset, len, chunk.hash));
        r.chunks_written += 1;
        r.bytes_written += len - from as u64;
        done += len;
        ctl.report(Phase::Write, done.min(mapped), mapped);
        let _ = back.send(chunk.buf);
    }
    r.secs = t0.elapsed().as_secs_f64();
    Ok((r, written))
}

#[cfg(test)]
#[path = "writer_tests.rs"]
mod tests;
