//! The pre-pass over an image before any byte is written. It runs when the write alone could
//! not refuse a bad image in time:
//!
//! - a bmap: every mapped range is read and its checksum compared (and, compressed, the
//!   decompressed size compared with the bmap's `ImageSize`), so an image that does not
//!   match its bmap is refused with nothing written;
//! - a compressed image: it is decompressed once, to learn its size (so an image larger
//!   than the flash is refused before the first write) and to find a damaged or truncated
//!   file before it half-flashes a board; a compressed sparse image's structure and CRC32
//!   chunks are checked on the way.
//!
//! An uncompressed raw or sparse image without a bmap needs no pre-pass: its size is the
//! file's (or the sparse header's) and its structure was walked at open.

use std::fs::File;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::thread;
use std::time::Instant;

use serde::Serialize;

use super::bmap::Bmap;
use super::decompress::{Decoded, FileAt, discard, read_full};
use super::magic::{Compression, Layout};
use super::sparse::{SparseCounts, SparseReader};
use super::stream::{StreamError, sparse_err};
use crate::error::FlashError;
use crate::progress::{Control, Phase};
use crate::units::human;

/// What the pre-pass did.
#[derive(Debug, Clone, Serialize)]
pub struct CheckReport {
    /// Bytes of the file read.
    pub file_bytes_read: u64,
    /// Bytes of image data hashed or decompressed.
    pub image_bytes: u64,
    /// bmap ranges whose checksum was compared.
    pub ranges_checked: usize,
    /// Wall time, seconds.
    pub secs: f64,
}

/// The most image the pre-pass expands: the board's flash when it is known, else the
/// caller's bound. Past it the image is refused ([`FlashError::ImageOverLimit`]) as soon as
/// a header declares more or a decoder has produced more, before the rest is read.
#[derive(Debug, Clone)]
pub struct SizeLimit {
    /// Bytes of image at most.
    pub bytes: u64,
    /// What sets it, for the refusal (`the board's flash`, `flash.max_image_gib`).
    pub what: String,
}

impl SizeLimit {
    /// At most `bytes`, set by `what`.
    pub fn new(bytes: u64, what: impl Into<String>) -> SizeLimit {
        SizeLimit {
            bytes,
            what: what.into(),
        }
    }

    /// The refusal of an image `seen` (what told its size) past the limit.
    pub(crate) fn refuse(&self, seen: String) -> FlashError {
        FlashError::ImageOverLimit {
            limit: human(self.bytes),
            limit_bytes: self.bytes,
            what: self.what.clone(),
            seen,
        }
    }

    /// Refuses a size declared by the image's own header.
    pub(crate) fn declared(&self, by: &str, bytes: u64) -> Result<(), FlashError> {
        if bytes > self.bytes {
            return Err(self.refuse(format!("{by} declares {}", human(bytes))));
        }
        Ok(())
    }
}

/// What the pre-pass learnt.
pub(crate) struct Checked {
    pub logical_size: u64,
    pub mapped_bytes: u64,
    pub sparse: Option<SparseCounts>,
    pub report: CheckReport,
}

const BUF: usize = 1 << 20;

/// Runs the pre-pass. `file_size` is the file's length; `raw_size` the image's size when it
/// is already known (an uncompressed raw file).
pub(crate) fn run(
    file: &Arc<File>,
    compression: Compression,
    layout: Layout,
    bmap: Option<&Bmap>,
    file_size: u64,
    limit: &SizeLimit,
    ctl: &mut Control,
) -> Result<Checked, FlashError> {
    let consumed = Arc::new(AtomicU64::new(0));
    let source = Source {
        file,
        compression,
        layout,
        file_size,
    };
    let r = run_counted(&source, bmap, limit, ctl, &consumed);
    // A decoder stopped by the flag inside a read fails as a read: it was the stop.
    match r {
        Err(e) if ctl.cancelled() && !matches!(e, FlashError::Cancelled { .. }) => {
            cancel_point(ctl, consumed.load(Ordering::Relaxed), file_size)?;
            Err(e)
        }
        other => other,
    }
}

/// The file the pre-pass reads, and what it holds.
struct Source<'a> {
    file: &'a Arc<File>,
    compression: Compression,
    layout: Layout,
    /// The file's length.
    file_size: u64,
}

impl Source<'_> {
    /// The file decompressed as it is read, its bytes counted in `consumed`.
    fn decoded(&self, consumed: &Arc<AtomicU64>, ctl: &Control) -> Result<Decoded, FlashError> {
        Decoded::counted(
            self.file.clone(),
            self.compression,
            Some(consumed.clone()),
            ctl.shared_flag(),
        )
        .map_err(|e| decompress(self.compression, 0, e))
    }
}

/// [`run`], counting the file's bytes read in `consumed`.
fn run_counted(
    source: &Source<'_>,
    bmap: Option<&Bmap>,
    limit: &SizeLimit,
    ctl: &mut Control,
    consumed: &Arc<AtomicU64>,
) -> Result<Checked, FlashError> {
    let Source {
        file,
        compression,
        layout,
        file_size,
    } = *source;
    let t0 = Instant::now();
    if let Some(b) = bmap {
        limit.declared("its bmap's <ImageSize>", b.image_size)?;
    }
    let mut buf = vec![0u8; BUF];
    let mut ranges_checked = 0;
    let (logical_size, mapped_bytes, sparse, image_bytes) = match (bmap, compression, layout) {
        (Some(b), Compression::None, _) => {
            // Each range where it lies: only the mapped bytes are read.
            let (done, checked) = check_in_place(file, b, ctl)?;
            ranges_checked = checked;
            consumed.store(done, Ordering::Relaxed);
            (b.image_size, b.mapped_bytes(), None, done)
        }
        (Some(b), _, _) => {
            // Compressed: decompress it all, hashing the ranges on the way.
            let mut d = source.decoded(consumed, ctl)?;
            ctl.report(Phase::Check, 0, file_size);
            for (r, (start, end)) in b.ranges.iter().zip(b.byte_ranges()) {
                // The gap before the range, dropped a buffer at a time between looks at
                // the flag (it may be most of the image).
                while d.out < start {
                    cancel_point(ctl, consumed.load(Ordering::Relaxed), file_size)?;
                    let k = (start - d.out).min(BUF as u64);
                    let got =
                        discard(&mut d, k, &mut buf).map_err(|e| decompress(compression, 0, e))?;
                    if got < k {
                        return Err(size_mismatch(b, d.out));
                    }
                    ctl.report(Phase::Check, consumed.load(Ordering::Relaxed), file_size);
                }
                let mut h = b.checksum.hasher();
                let mut left = end - start;
                while left > 0 {
                    cancel_point(ctl, consumed.load(Ordering::Relaxed), file_size)?;
                    let k = left.min(BUF as u64) as usize;
                    let at = d.out;
                    let got = read_full(&mut d, &mut buf[..k])
                        .map_err(|e| decompress(compression, at, e))?;
                    if got < k {
                        return Err(size_mismatch(b, d.out));
                    }
                    h.update(&buf[..k]);
                    left -= k as u64;
                    ctl.report(Phase::Check, consumed.load(Ordering::Relaxed), file_size);
                }
                if let Some(want) = &r.checksum {
                    compare(b, r.first, r.last, want, h.finish())?;
                    ranges_checked += 1;
                }
            }
            // Past the bmap's ImageSize the image no longer matches it: stop there.
            let bound = SizeLimit::new(b.image_size, "");
            drain(
                &mut d,
                compression,
                &mut buf,
                ctl,
                consumed,
                file_size,
                &bound,
            )
            .map_err(|e| match e {
                FlashError::ImageOverLimit { .. } => size_mismatch(b, b.image_size + 1),
                other => other,
            })?;
            if d.out != b.image_size {
                return Err(size_mismatch(b, d.out));
            }
            (b.image_size, b.mapped_bytes(), None, d.out)
        }
        (None, _, Layout::Raw) => {
            let mut d = source.decoded(consumed, ctl)?;
            ctl.report(Phase::Check, 0, file_size);
            drain(
                &mut d,
                compression,
                &mut buf,
                ctl,
                consumed,
                file_size,
                limit,
            )?;
            (d.out, d.out, None, d.out)
        }
        (None, _, Layout::AndroidSparse) => {
            let d = source.decoded(consumed, ctl)?;
            ctl.report(Phase::Check, 0, file_size);
            let mut r =
                SparseReader::new(d).map_err(|e| stream_fault(sparse_err(compression, e), 0))?;
            // Every chunk must fit the header's blocks (the reader refuses one that claims
            // more), so the header bounds the whole image: judged before any chunk.
            limit.declared("its sparse header", r.header().logical_size())?;
            // One chunk header, or one buffer of a RAW run, between two looks at the flag;
            // a FILL run is gone past at once (its CRC combined, never expanded).
            loop {
                cancel_point(ctl, consumed.load(Ordering::Relaxed), file_size)?;
                match r.pass(&mut buf) {
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(e) => return Err(stream_fault(sparse_err(compression, e), 0)),
                }
                ctl.report(Phase::Check, consumed.load(Ordering::Relaxed), file_size);
            }
            let size = r.header().logical_size();
            (size, r.counts.mapped_bytes, Some(r.counts), size)
        }
    };
    let file_bytes_read = consumed.load(Ordering::Relaxed);
    ctl.report(Phase::Check, file_bytes_read, file_bytes_read.max(1));
    Ok(Checked {
        logical_size,
        mapped_bytes,
        sparse,
        report: CheckReport {
            file_bytes_read,
            image_bytes,
            ranges_checked,
            secs: t0.elapsed().as_secs_f64(),
        },
    })
}

/// What a range-hashing worker tells the caller's thread.
enum Msg {
    /// Bytes hashed.
    Progress(u64),
    /// A range did not match (its index, the error), or could not be read.
    Failed(usize, FlashError),
    /// The worker ran out of ranges.
    Done,
}

/// The bmap's ranges of an uncompressed image, hashed where they lie on up to four threads
/// at once (ranges are independent; one range's hash is sequential). The caller's thread
/// reports progress and watches the cancel flag. Returns the bytes hashed and the ranges
/// checked; a mismatch is the first one in the bmap's order.
fn check_in_place(
    file: &Arc<File>,
    b: &Bmap,
    ctl: &mut Control,
) -> Result<(u64, usize), FlashError> {
    let total = b.mapped_bytes();
    ctl.report(Phase::Check, 0, total);
    let jobs: Vec<Job> = b
        .ranges
        .iter()
        .zip(b.byte_ranges())
        .enumerate()
        .filter_map(|(i, (r, bytes))| {
            r.checksum.as_deref().map(|want| Job {
                index: i,
                bytes,
                blocks: (r.first, r.last),
                want,
            })
        })
        .collect();
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 4)
        .min(jobs.len().max(1));
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let (tx, rx) = channel::<Msg>();
    let mut done = 0u64;
    let mut failures: Vec<(usize, FlashError)> = Vec::new();
    thread::scope(|s| {
        for _ in 0..workers {
            let tx = tx.clone();
            let (jobs, next, stop) = (&jobs, &next, &stop);
            s.spawn(move || {
                let mut buf = vec![0u8; BUF];
                while !stop.load(Ordering::Relaxed) {
                    let Some(job) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) else {
                        break;
                    };
                    if let Err(e) = hash_range(file, b, job, &mut buf, &tx, stop) {
                        let _ = tx.send(Msg::Failed(job.index, e));
                    }
                }
                let _ = tx.send(Msg::Done);
            });
        }
        drop(tx);
        let mut finished = 0;
        while finished < workers {
            match rx.recv() {
                Ok(Msg::Progress(n)) => {
                    done += n;
                    ctl.report(Phase::Check, done, total);
                }
                Ok(Msg::Failed(i, e)) => {
                    stop.store(true, Ordering::Relaxed);
                    failures.push((i, e));
                }
                Ok(Msg::Done) => finished += 1,
                Err(_) => break,
            }
            if ctl.cancelled() {
                stop.store(true, Ordering::Relaxed);
            }
        }
    });
    failures.sort_by_key(|(i, _)| *i);
    if let Some((_, e)) = failures.into_iter().next() {
        return Err(e);
    }
    cancel_point(ctl, done, total)?;
    Ok((done, jobs.len()))
}

/// One range to check: its index in the bmap, its bytes `[start, end)`, its blocks
/// (inclusive) and its checksum.
struct Job<'a> {
    index: usize,
    bytes: (u64, u64),
    blocks: (u64, u64),
    want: &'a [u8],
}

/// Hashes one range of the file and compares it with the bmap's checksum.
fn hash_range(
    file: &Arc<File>,
    b: &Bmap,
    job: &Job,
    buf: &mut [u8],
    tx: &Sender<Msg>,
    stop: &AtomicBool,
) -> Result<(), FlashError> {
    let (start, end) = job.bytes;
    let mut at = FileAt::new(file.clone(), start);
    let mut h = b.checksum.hasher();
    let mut pos = start;
    while pos < end {
        if stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        let k = (end - pos).min(buf.len() as u64) as usize;
        let got = read_full(&mut at, &mut buf[..k]).map_err(|source| FlashError::ImageRead {
            what: "image (bmap check)",
            source,
            written: "nothing was written".into(),
        })?;
        if got < k {
            return Err(size_mismatch(b, pos + got as u64));
        }
        h.update(&buf[..k]);
        pos += k as u64;
        let _ = tx.send(Msg::Progress(k as u64));
    }
    compare(b, job.blocks.0, job.blocks.1, job.want, h.finish())
}

fn drain(
    d: &mut Decoded,
    compression: Compression,
    buf: &mut [u8],
    ctl: &mut Control,
    consumed: &AtomicU64,
    file_size: u64,
    limit: &SizeLimit,
) -> Result<(), FlashError> {
    loop {
        cancel_point(ctl, consumed.load(Ordering::Relaxed), file_size)?;
        let at = d.out;
        let n = read_full(d, buf).map_err(|e| decompress(compression, at, e))?;
        if d.out > limit.bytes {
            return Err(limit.refuse(format!(
                "its {} stream had expanded to more after {} of the file",
                compression.name(),
                human(consumed.load(Ordering::Relaxed))
            )));
        }
        ctl.report(Phase::Check, consumed.load(Ordering::Relaxed), file_size);
        if n < buf.len() {
            return Ok(());
        }
    }
}

/// The stop of a cancel noticed while the image was opened (the bmap read, the sparse
/// chunk headers walked): nothing was written.
pub(crate) fn cancelled_at_open() -> FlashError {
    FlashError::Cancelled {
        phase: Phase::Check,
        done: human(0),
        bytes_written: 0,
        total: human(0),
        at: 0,
        after: "nothing was written (stopped while the image was opened)".into(),
    }
}

fn cancel_point(ctl: &Control, done: u64, total: u64) -> Result<(), FlashError> {
    if ctl.cancelled() {
        return Err(FlashError::Cancelled {
            phase: Phase::Check,
            done: human(done),
            bytes_written: 0,
            total: human(total),
            at: 0,
            after: "nothing was written".into(),
        });
    }
    Ok(())
}

fn compare(b: &Bmap, first: u64, last: u64, want: &[u8], got: Vec<u8>) -> Result<(), FlashError> {
    if want != got.as_slice() {
        return Err(FlashError::BmapRangeMismatch {
            first,
            last,
            block_size: b.block_size,
            algorithm: b.checksum.name(),
            expected: hex::encode(want),
            got: hex::encode(got),
        });
    }
    Ok(())
}

fn size_mismatch(b: &Bmap, image: u64) -> FlashError {
    FlashError::BmapSizeMismatch {
        bmap: human(b.image_size),
        bmap_bytes: b.image_size,
        image: human(image),
        image_bytes: image,
    }
}

fn decompress(c: Compression, at: u64, e: std::io::Error) -> FlashError {
    stream_fault(
        StreamError::Decompress {
            format: c.name(),
            at,
            reason: e.to_string(),
        },
        0,
    )
}

/// A stream's failure as the agent reads it, with what had been written by then.
pub(crate) fn stream_fault(e: StreamError, written: u64) -> FlashError {
    use super::sparse::SparseFault;
    let note = crate::error::written_note(written);
    match e {
        StreamError::Decompress { format, at, reason } => FlashError::Decompress {
            format,
            at: if at == 0 {
                "".to_string()
            } else {
                format!(" after {} of output", human(at))
            },
            reason,
            written: note,
        },
        StreamError::Sparse(SparseFault::Invalid(reason)) => FlashError::SparseInvalid {
            reason,
            written: note,
        },
        StreamError::Sparse(SparseFault::Crc {
            chunk,
            expected,
            computed,
        }) => FlashError::SparseCrc {
            chunk,
            expected,
            computed,
            written: note,
        },
        StreamError::Sparse(SparseFault::Cancelled) => cancelled_at_open(),
        StreamError::Sparse(SparseFault::Io(source)) => FlashError::ImageRead {
            what: "sparse image",
            source,
            written: note,
        },
        StreamError::Read(source) => FlashError::ImageRead {
            what: "image",
            source,
            written: note,
        },
        StreamError::Stopped => FlashError::Cancelled {
            phase: Phase::Write,
            done: human(written),
            bytes_written: written,
            total: "the image".into(),
            at: 0,
            after: note,
        },
        StreamError::Short { at, expected } => FlashError::ImageChanged {
            at,
            expected,
            written: note,
        },
    }
}
