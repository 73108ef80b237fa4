//! The image as the writer reads it: runs of bytes at image offsets, in increasing order,
//! with gaps where nothing is written (a bmap's unmapped blocks, a sparse image's
//! DONT_CARE chunks). One implementation per layout.

use std::fs::File;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::decompress::{Decoded, FileAt, discard, read_full};
use super::magic::Compression;
use super::sparse::{SparseFault, SparseReader};

/// Why the stream stopped. The writer turns it into a [`crate::FlashError`] that also says
/// what had reached the board by then.
#[derive(Debug)]
pub enum StreamError {
    /// The decoder failed (damaged or truncated compressed file).
    Decompress {
        /// The format.
        format: &'static str,
        /// Decompressed bytes before the failure.
        at: u64,
        /// The decoder's words.
        reason: String,
    },
    /// The sparse structure is wrong.
    Sparse(SparseFault),
    /// Reading the (uncompressed) file failed.
    Read(std::io::Error),
    /// The stream ended before the size measured earlier (the file changed underneath).
    Short {
        /// Where it ended.
        at: u64,
        /// Where it should have.
        expected: u64,
    },
    /// The writer stopped (cancel, or an error of its own) while the stream was between
    /// two runs (a long gap of a compressed bmap image, sparse chunks without data).
    Stopped,
}

/// Bytes of a gap dropped between two looks at the stop flag.
const GAP_PIECE: u64 = 1 << 20;

/// Runs of image bytes, in increasing offset order.
pub trait Segments: Send {
    /// Image offset of the next byte to write, or `None` at the end.
    fn next_offset(&mut self) -> Result<Option<u64>, StreamError>;
    /// Reads up to `buf.len()` bytes from that offset, never past the end of its run; at
    /// least one after `next_offset` returned `Some`.
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, StreamError>;
}

/// A read error of the stream: the decoder's, or the file's when it is not compressed.
fn decode_err(format: Compression, at: u64, e: std::io::Error) -> StreamError {
    if format == Compression::None {
        return StreamError::Read(e);
    }
    StreamError::Decompress {
        format: format.name(),
        at,
        reason: e.to_string(),
    }
}

/// A raw image: one run from 0 to its size.
pub struct RawSegments {
    src: Decoded,
    compression: Compression,
    pos: u64,
    size: u64,
}

impl RawSegments {
    /// The whole stream of `file`, `size` bytes once decompressed.
    pub fn new(
        file: Arc<File>,
        compression: Compression,
        size: u64,
        stop: Arc<AtomicBool>,
    ) -> Result<RawSegments, StreamError> {
        let src = Decoded::counted(file, compression, None, Some(stop))
            .map_err(|e| decode_err(compression, 0, e))?;
        Ok(RawSegments {
            src,
            compression,
            pos: 0,
            size,
        })
    }
}

impl Segments for RawSegments {
    fn next_offset(&mut self) -> Result<Option<u64>, StreamError> {
        Ok((self.pos < self.size).then_some(self.pos))
    }

    fn read(&mut self, buf: &mut [u8]) -> Result<usize, StreamError> {
        let k = (self.size - self.pos).min(buf.len() as u64) as usize;
        let got = read_full(&mut self.src, &mut buf[..k])
            .map_err(|e| decode_err(self.compression, self.src.out, e))?;
        if got == 0 && k > 0 {
            return Err(StreamError::Short {
                at: self.pos,
                expected: self.size,
            });
        }
        self.pos += got as u64;
        Ok(got)
    }
}

/// A raw image through its bmap: only the mapped byte ranges.
pub struct BmapSegments {
    source: BmapSource,
    ranges: Vec<(u64, u64)>,
    next: usize,
    /// Position in the image of the next byte `read` returns.
    pos: u64,
    /// Raised when the writer stopped: a gap being dropped stops at the next MiB.
    stop: Arc<AtomicBool>,
}

enum BmapSource {
    /// An uncompressed file: each range is read where it lies.
    File(Arc<File>, Option<FileAt>),
    /// A compressed stream: the gaps are decompressed and dropped.
    Stream(Decoded, Compression, Vec<u8>),
}

impl BmapSegments {
    /// The mapped `ranges` (image byte offsets `[start, end)`, sorted) of `file`.
    pub fn new(
        file: Arc<File>,
        compression: Compression,
        ranges: Vec<(u64, u64)>,
        stop: Arc<AtomicBool>,
    ) -> Result<BmapSegments, StreamError> {
        let source = if compression == Compression::None {
            BmapSource::File(file, None)
        } else {
            let d = Decoded::counted(file, compression, None, Some(stop.clone()))
                .map_err(|e| decode_err(compression, 0, e))?;
            BmapSource::Stream(d, compression, vec![0u8; 256 << 10])
        };
        Ok(BmapSegments {
            source,
            ranges,
            next: 0,
            pos: 0,
            stop,
        })
    }
}

impl Segments for BmapSegments {
    fn next_offset(&mut self) -> Result<Option<u64>, StreamError> {
        while let Some(&(start, end)) = self.ranges.get(self.next) {
            if self.pos >= end {
                self.next += 1;
                continue;
            }
            if self.pos < start {
                match &mut self.source {
                    BmapSource::File(f, at) => *at = Some(FileAt::new(f.clone(), start)),
                    BmapSource::Stream(d, c, scratch) => {
                        // A gap may be most of the image: dropped a piece at a time.
                        while self.pos < start {
                            if self.stop.load(Ordering::Relaxed) {
                                return Err(StreamError::Stopped);
                            }
                            let gap = (start - self.pos).min(GAP_PIECE);
                            let got =
                                discard(d, gap, scratch).map_err(|e| decode_err(*c, d.out, e))?;
                            if got < gap {
                                return Err(StreamError::Short {
                                    at: self.pos + got,
                                    expected: start,
                                });
                            }
                            self.pos += gap;
                        }
                    }
                }
                self.pos = start;
            }
            return Ok(Some(self.pos));
        }
        Ok(None)
    }

    fn read(&mut self, buf: &mut [u8]) -> Result<usize, StreamError> {
        let Some(&(_, end)) = self.ranges.get(self.next) else {
            return Ok(0);
        };
        let k = (end - self.pos).min(buf.len() as u64) as usize;
        let got = match &mut self.source {
            BmapSource::File(f, at) => {
                let r = at.get_or_insert_with(|| FileAt::new(f.clone(), self.pos));
                read_full(r, &mut buf[..k]).map_err(|e| decode_err(Compression::None, 0, e))?
            }
            BmapSource::Stream(d, c, _) => {
                read_full(d, &mut buf[..k]).map_err(|e| decode_err(*c, d.out, e))?
            }
        };
        if got == 0 && k > 0 {
            return Err(StreamError::Short {
                at: self.pos,
                expected: end,
            });
        }
        self.pos += got as u64;
        Ok(got)
    }
}

/// An Android sparse image: its RAW and FILL chunks.
pub struct SparseSegments {
    reader: SparseReader<Decoded>,
    compression: Compression,
}

impl SparseSegments {
    /// The chunks of `file`; a run of chunks without data stops once `stop` is raised.
    pub fn new(
        file: Arc<File>,
        compression: Compression,
        stop: Arc<AtomicBool>,
    ) -> Result<SparseSegments, StreamError> {
        let d = Decoded::counted(file, compression, None, Some(stop.clone()))
            .map_err(|e| decode_err(compression, 0, e))?;
        let mut reader = SparseReader::new(d).map_err(|e| sparse_err(compression, e))?;
        reader.stop_on(stop);
        Ok(SparseSegments {
            reader,
            compression,
        })
    }
}

/// A sparse fault from a compressed stream is a decompression error when the decoder
/// produced it.
pub(crate) fn sparse_err(compression: Compression, e: SparseFault) -> StreamError {
    match e {
        SparseFault::Io(io) if compression != Compression::None => StreamError::Decompress {
            format: compression.name(),
            at: 0,
            reason: io.to_string(),
        },
        SparseFault::Cancelled => StreamError::Stopped,
        other => StreamError::Sparse(other),
    }
}

impl Segments for SparseSegments {
    fn next_offset(&mut self) -> Result<Option<u64>, StreamError> {
        self.reader
            .next_offset()
            .map_err(|e| sparse_err(self.compression, e))
    }

    fn read(&mut self, buf: &mut [u8]) -> Result<usize, StreamError> {
        self.reader
            .read(buf)
            .map_err(|e| sparse_err(self.compression, e))
    }
}

/// Reads a whole stream into memory (tests).
#[cfg(test)]
pub fn collect(s: &mut dyn Segments) -> Result<Vec<(u64, Vec<u8>)>, StreamError> {
    let mut out: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut buf = vec![0u8; 7777];
    while let Some(off) = s.next_offset()? {
        let n = s.read(&mut buf)?;
        match out.last_mut() {
            Some((o, d)) if *o + d.len() as u64 == off => d.extend(&buf[..n]),
            _ => out.push((off, buf[..n].to_vec())),
        }
    }
    Ok(out)
}
