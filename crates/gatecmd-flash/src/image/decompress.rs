//! The image's bytes as a stream: read from the caller's file handle at explicit offsets
//! (so the handle's own offset is never shared or moved), decompressed on the fly when the
//! file is gzip, zstd or xz. Nothing is staged: a 16 GB image streams through a few
//! hundred KiB of buffers.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::magic::Compression;

/// Input buffer of each decoder: large enough that a read of the file is a few syscalls per
/// MiB, small enough to be irrelevant in memory.
const INPUT_BUFFER: usize = 256 << 10;

/// The largest LZMA2 dictionary accepted (xz -9 uses 64 MiB): a hostile file cannot make
/// the server allocate gigabytes. zstd keeps its own default limit (a 128 MiB window).
const XZ_MEM_LIMIT_KB: u32 = 256 << 10;

/// Reads a shared file from a position of its own (`pread`), so several streams over the
/// same handle (the pre-pass, then the write) never disturb each other.
pub struct FileAt {
    file: Arc<File>,
    pos: u64,
    /// Bytes read so far, shared with whoever reports progress.
    consumed: Option<Arc<AtomicU64>>,
    /// Once raised, a read fails ("stopped"): a decoder that consumes input without
    /// producing output returns to its caller within one input buffer.
    stop: Option<Arc<AtomicBool>>,
}

/// The error of a read after the stop flag went up.
pub const STOPPED: &str = "stopped by the caller";

impl FileAt {
    /// A reader of `file` starting at `pos`.
    pub fn new(file: Arc<File>, pos: u64) -> FileAt {
        FileAt {
            file,
            pos,
            consumed: None,
            stop: None,
        }
    }
}

impl Read for FileAt {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self
            .stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed))
        {
            return Err(io::Error::other(STOPPED));
        }
        let n = loop {
            match self.file.read_at(buf, self.pos) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => break r?,
            }
        };
        self.pos += n as u64;
        if let Some(c) = &self.consumed {
            c.fetch_add(n as u64, Ordering::Relaxed);
        }
        Ok(n)
    }
}

/// The decompressed bytes of a file, counted (an error names where it happened).
pub struct Decoded {
    inner: Box<dyn Read + Send>,
    /// Bytes of output so far.
    pub out: u64,
}

impl Decoded {
    /// The file's bytes from offset 0 through the decoder of `compression`.
    pub fn open(file: Arc<File>, compression: Compression) -> io::Result<Decoded> {
        Decoded::counted(file, compression, None, None)
    }

    /// As [`open`](Self::open), adding the bytes of the file read to `consumed`, and
    /// failing a read once `stop` is raised (looked at every input buffer).
    pub fn counted(
        file: Arc<File>,
        compression: Compression,
        consumed: Option<Arc<AtomicU64>>,
        stop: Option<Arc<AtomicBool>>,
    ) -> io::Result<Decoded> {
        let mut at = FileAt::new(file, 0);
        at.consumed = consumed;
        at.stop = stop;
        let raw = BufReader::with_capacity(INPUT_BUFFER, at);
        let inner: Box<dyn Read + Send> = match compression {
            Compression::None => Box::new(raw),
            // Multi-member: `cat a.gz b.gz` is one valid gzip file of both.
            Compression::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(raw)),
            // libzstd continues across concatenated and skippable frames by itself.
            Compression::Zstd => Box::new(zstd::stream::read::Decoder::with_buffer(raw)?),
            // Concatenated streams and stream padding, as `xz -d` accepts them.
            Compression::Xz => Box::new(lzma_rust2::XzReader::new_mem_limit(
                raw,
                true,
                XZ_MEM_LIMIT_KB,
            )),
        };
        Ok(Decoded { inner, out: 0 })
    }
}

impl Read for Decoded {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.out += n as u64;
        Ok(n)
    }
}

/// Reads until `buf` is full or the stream ends; the count read.
pub fn read_full(r: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Reads and drops `n` bytes (a gap in a stream that cannot seek); the count dropped.
pub fn discard(r: &mut dyn Read, mut n: u64, scratch: &mut [u8]) -> io::Result<u64> {
    let mut dropped = 0;
    while n > 0 {
        let k = (n.min(scratch.len() as u64)) as usize;
        let got = read_full(r, &mut scratch[..k])?;
        dropped += got as u64;
        if got < k {
            break;
        }
        n -= k as u64;
    }
    Ok(dropped)
}
