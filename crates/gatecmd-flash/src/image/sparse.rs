//! Android sparse images (AOSP `libsparse`, `sparse_format.h`): a 28-byte file header, then
//! chunks of four kinds, each with a 12-byte header: RAW (the blocks' bytes follow), FILL
//! (one 4-byte value repeated), DONT_CARE (nothing to write) and CRC32 (the CRC-32 of the
//! expanded image so far, DONT_CARE counted as zeros as libsparse's reader does).
//!
//! Read as a stream: no chunk is held in memory, a RAW chunk's bytes go straight from the
//! (possibly decompressed) file to the writer.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;

use super::decompress::read_full;

/// `sizeof(sparse_header_t)` in format 1.0.
pub const FILE_HEADER_LEN: usize = 28;
/// `sizeof(chunk_header_t)` in format 1.0.
pub const CHUNK_HEADER_LEN: usize = 12;

const CHUNK_RAW: u16 = 0xCAC1;
const CHUNK_FILL: u16 = 0xCAC2;
const CHUNK_DONT_CARE: u16 = 0xCAC3;
const CHUNK_CRC32: u16 = 0xCAC4;

/// Why a sparse stream cannot be used.
#[derive(Debug)]
pub enum SparseFault {
    /// The structure is wrong (what was seen, with the chunk's index).
    Invalid(String),
    /// A CRC32 chunk disagrees with the data before it.
    Crc {
        /// Index of the CRC32 chunk.
        chunk: u32,
        /// Stored value.
        expected: u32,
        /// Computed value.
        computed: u32,
    },
    /// Reading (or decompressing) the file failed.
    Io(io::Error),
    /// The caller's cancel flag went up while the chunk headers were walked.
    Cancelled,
}

/// Chunk headers walked between two looks at the cancel flag.
const CANCEL_EVERY: u32 = 4096;

impl From<io::Error> for SparseFault {
    fn from(e: io::Error) -> Self {
        SparseFault::Io(e)
    }
}

/// The file header's facts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SparseHeader {
    /// Bytes per block (a multiple of 4).
    pub block_size: u32,
    /// Blocks of the expanded image.
    pub total_blocks: u32,
    /// Chunks in the file.
    pub total_chunks: u32,
    /// Length of the file header (28, or more in a later minor version).
    pub file_header_len: u16,
    /// Length of each chunk header (12, or more).
    pub chunk_header_len: u16,
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

impl SparseHeader {
    /// Parses the first 28 bytes, with libsparse's checks.
    pub fn parse(b: &[u8; FILE_HEADER_LEN]) -> Result<SparseHeader, SparseFault> {
        if b[..4] != super::magic::SPARSE_MAGIC {
            return Err(SparseFault::Invalid("no sparse magic 0xed26ff3a".into()));
        }
        let (major, minor) = (le16(b, 4), le16(b, 6));
        if major != 1 {
            return Err(SparseFault::Invalid(format!(
                "format version {major}.{minor}, and only 1.x exists"
            )));
        }
        let h = SparseHeader {
            file_header_len: le16(b, 8),
            chunk_header_len: le16(b, 10),
            block_size: le32(b, 12),
            total_blocks: le32(b, 16),
            total_chunks: le32(b, 20),
        };
        if (h.file_header_len as usize) < FILE_HEADER_LEN
            || (h.chunk_header_len as usize) < CHUNK_HEADER_LEN
        {
            return Err(SparseFault::Invalid(format!(
                "header lengths {}/{} are below the format's 28/12 bytes",
                h.file_header_len, h.chunk_header_len
            )));
        }
        if h.block_size == 0 || !h.block_size.is_multiple_of(4) {
            return Err(SparseFault::Invalid(format!(
                "block size {} is not a positive multiple of 4",
                h.block_size
            )));
        }
        Ok(h)
    }

    /// Bytes of the expanded image.
    pub fn logical_size(&self) -> u64 {
        self.total_blocks as u64 * self.block_size as u64
    }
}

/// One chunk's header.
#[derive(Debug, Clone, Copy)]
struct ChunkHeader {
    kind: u16,
    blocks: u32,
    total_len: u32,
}

impl ChunkHeader {
    fn parse(b: &[u8]) -> ChunkHeader {
        ChunkHeader {
            kind: le16(b, 0),
            blocks: le32(b, 4),
            total_len: le32(b, 8),
        }
    }
}

/// What the chunks hold, counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SparseCounts {
    /// RAW chunks.
    pub raw: u32,
    /// FILL chunks.
    pub fill: u32,
    /// DONT_CARE chunks.
    pub dont_care: u32,
    /// CRC32 chunks.
    pub crc32: u32,
    /// Bytes the RAW and FILL chunks put on the target.
    pub mapped_bytes: u64,
}

/// A chunk's payload size as libsparse checks it (`total_sz - chunk_hdr_sz`).
fn payload_len(h: &SparseHeader, c: &ChunkHeader, index: u32) -> Result<u64, SparseFault> {
    let Some(data) = (c.total_len as u64).checked_sub(h.chunk_header_len as u64) else {
        return Err(SparseFault::Invalid(format!(
            "chunk #{index}: total size {} is smaller than its header",
            c.total_len
        )));
    };
    let want = match c.kind {
        CHUNK_RAW => c.blocks as u64 * h.block_size as u64,
        CHUNK_FILL | CHUNK_CRC32 => 4,
        CHUNK_DONT_CARE => 0,
        other => {
            return Err(SparseFault::Invalid(format!(
                "chunk #{index}: unknown chunk type 0x{other:04x} (expected 0xCAC1-0xCAC4)"
            )));
        }
    };
    if data != want {
        return Err(SparseFault::Invalid(format!(
            "chunk #{index} (type 0x{:04x}, {} blocks): {data} bytes of payload, expected {want}",
            c.kind, c.blocks
        )));
    }
    Ok(data)
}

/// Walks an uncompressed sparse file's chunk headers by offset (no data read): validates the
/// structure and the file's length against it, and counts what it maps. `cancelled` is
/// looked at every few thousand chunks (a file of 12-byte chunks holds millions).
pub fn walk_file(
    file: &File,
    h: &SparseHeader,
    cancelled: &dyn Fn() -> bool,
) -> Result<SparseCounts, SparseFault> {
    let file_len = file.metadata()?.len();
    let mut at = h.file_header_len as u64;
    let mut block: u64 = 0;
    let mut counts = SparseCounts::default();
    let mut hdr = vec![0u8; h.chunk_header_len as usize];
    for index in 0..h.total_chunks {
        if index % CANCEL_EVERY == CANCEL_EVERY - 1 && cancelled() {
            return Err(SparseFault::Cancelled);
        }
        if at + hdr.len() as u64 > file_len {
            return Err(SparseFault::Invalid(format!(
                "the file ends before chunk #{index} of {} (truncated at {file_len} bytes)",
                h.total_chunks
            )));
        }
        file.read_exact_at(&mut hdr, at)?;
        let c = ChunkHeader::parse(&hdr);
        let data = payload_len(h, &c, index)?;
        at += hdr.len() as u64 + data;
        if at > file_len {
            return Err(SparseFault::Invalid(format!(
                "chunk #{index} runs past the end of the file (truncated at {file_len} bytes)"
            )));
        }
        block = count_chunk(h, &c, index, block, &mut counts)?;
    }
    finish(h, block)?;
    Ok(counts)
}

/// Advances the block cursor over one chunk and counts it.
fn count_chunk(
    h: &SparseHeader,
    c: &ChunkHeader,
    index: u32,
    block: u64,
    counts: &mut SparseCounts,
) -> Result<u64, SparseFault> {
    let blocks = if c.kind == CHUNK_CRC32 {
        0
    } else {
        c.blocks as u64
    };
    let end = block + blocks;
    if end > h.total_blocks as u64 {
        return Err(SparseFault::Invalid(format!(
            "chunk #{index} ends at block {end}, past the image's {} blocks",
            h.total_blocks
        )));
    }
    match c.kind {
        CHUNK_RAW => counts.raw += 1,
        CHUNK_FILL => counts.fill += 1,
        CHUNK_DONT_CARE => counts.dont_care += 1,
        _ => counts.crc32 += 1,
    }
    if matches!(c.kind, CHUNK_RAW | CHUNK_FILL) {
        counts.mapped_bytes += blocks * h.block_size as u64;
    }
    Ok(end)
}

fn finish(h: &SparseHeader, block: u64) -> Result<(), SparseFault> {
    if block != h.total_blocks as u64 {
        return Err(SparseFault::Invalid(format!(
            "the chunks cover {block} blocks but the header says {}",
            h.total_blocks
        )));
    }
    Ok(())
}

/// The data chunk being read.
#[derive(Debug, Clone, Copy)]
enum Current {
    None,
    Raw {
        offset: u64,
        left: u64,
    },
    Fill {
        offset: u64,
        left: u64,
        value: [u8; 4],
        /// Byte phase of `offset` within the repeated value.
        phase: usize,
    },
}

/// A sparse image as a stream of data runs: [`next_offset`](Self::next_offset) moves to the
/// next byte that is written (skipping DONT_CARE and checking CRC32 chunks) and
/// [`read`](Self::read) returns the bytes there.
pub struct SparseReader<R: Read> {
    r: R,
    h: SparseHeader,
    next_chunk: u32,
    /// Output block where the next chunk starts.
    block: u64,
    cur: Current,
    crc: crc32fast::Hasher,
    /// CRC-32 state of runs of zeros, 1 MiB << k, built on first use.
    zeros: Vec<crc32fast::Hasher>,
    /// What the chunks held so far.
    pub counts: SparseCounts,
    done: bool,
    /// Looked at between chunk headers by `next_offset` (a writer's stop).
    stop: Option<Arc<AtomicBool>>,
}

const ZERO_UNIT: usize = 1 << 20;

impl<R: Read> SparseReader<R> {
    /// Reads the file header from `r` (positioned at the file's start).
    pub fn new(mut r: R) -> Result<SparseReader<R>, SparseFault> {
        let mut b = [0u8; FILE_HEADER_LEN];
        if read_full(&mut r, &mut b)? < FILE_HEADER_LEN {
            return Err(SparseFault::Invalid(
                "the file is shorter than the 28-byte sparse header".into(),
            ));
        }
        let h = SparseHeader::parse(&b)?;
        // A later minor version's longer header: skip what we do not know.
        skip(
            &mut r,
            h.file_header_len as u64 - FILE_HEADER_LEN as u64,
            "header",
        )?;
        Ok(SparseReader {
            r,
            h,
            next_chunk: 0,
            block: 0,
            cur: Current::None,
            crc: crc32fast::Hasher::new(),
            zeros: Vec::new(),
            counts: SparseCounts::default(),
            done: false,
            stop: None,
        })
    }

    /// `next_offset` stops with [`SparseFault::Cancelled`] once `stop` is raised, looked
    /// at between chunk headers (a run of chunks without data may be millions long).
    pub fn stop_on(&mut self, stop: Arc<AtomicBool>) {
        self.stop = Some(stop);
    }

    /// The file header.
    pub fn header(&self) -> &SparseHeader {
        &self.h
    }

    /// Image offset of the next byte to write, or `None` when every chunk has been read.
    pub fn next_offset(&mut self) -> Result<Option<u64>, SparseFault> {
        loop {
            match self.cur {
                Current::Raw { offset, left } | Current::Fill { offset, left, .. } if left > 0 => {
                    return Ok(Some(offset));
                }
                _ => {}
            }
            if self.done {
                return Ok(None);
            }
            if self
                .stop
                .as_ref()
                .is_some_and(|s| s.load(Ordering::Relaxed))
            {
                return Err(SparseFault::Cancelled);
            }
            self.next_chunk()?;
        }
    }

    /// Reads at most `buf.len()` bytes of the current data run (at least one, after
    /// `next_offset` returned `Some`).
    pub fn read(&mut self, buf: &mut [u8]) -> Result<usize, SparseFault> {
        match &mut self.cur {
            Current::Raw { offset, left } => {
                let k = (*left).min(buf.len() as u64) as usize;
                let got = read_full(&mut self.r, &mut buf[..k])?;
                if got < k {
                    return Err(SparseFault::Invalid(format!(
                        "the file ends inside the RAW chunk #{} (truncated)",
                        self.next_chunk.saturating_sub(1)
                    )));
                }
                self.crc.update(&buf[..k]);
                *offset += k as u64;
                *left -= k as u64;
                Ok(k)
            }
            Current::Fill {
                offset,
                left,
                value,
                phase,
            } => {
                let k = (*left).min(buf.len() as u64) as usize;
                for (i, b) in buf[..k].iter_mut().enumerate() {
                    *b = value[(*phase + i) % 4];
                }
                self.crc.update(&buf[..k]);
                *phase = (*phase + k) % 4;
                *offset += k as u64;
                *left -= k as u64;
                Ok(k)
            }
            Current::None => Ok(0),
        }
    }

    /// One step of a walk that checks everything and expands nothing, for a caller that
    /// looks at its cancel flag between steps: goes past up to `scratch.len()` bytes of the
    /// current RAW run (read, and counted in the CRC), or past a whole FILL run (its CRC
    /// combined from the repeated value, never expanded: a FILL may claim the header's
    /// whole size), or else reads the next chunk header. Returns the bytes of image gone
    /// past, or `None` once every chunk was read.
    pub fn pass(&mut self, scratch: &mut [u8]) -> Result<Option<u64>, SparseFault> {
        match self.cur {
            Current::Raw { left, .. } if left > 0 => self.read(scratch).map(|n| Some(n as u64)),
            Current::Fill {
                offset,
                left,
                value,
                phase,
            } if left > 0 => {
                let rotated = [0, 1, 2, 3].map(|i| value[(phase + i) % 4]);
                crc_pattern(&mut self.crc, &mut Vec::new(), rotated, left);
                self.cur = Current::Fill {
                    offset: offset + left,
                    left: 0,
                    value,
                    phase: (phase + (left % 4) as usize) % 4,
                };
                Ok(Some(left))
            }
            _ if self.done => Ok(None),
            _ => {
                self.next_chunk()?;
                Ok(Some(0))
            }
        }
    }

    /// Reads the next chunk header and sets up its data run.
    fn next_chunk(&mut self) -> Result<(), SparseFault> {
        if self.next_chunk == self.h.total_chunks {
            finish(&self.h, self.block)?;
            self.done = true;
            self.cur = Current::None;
            return Ok(());
        }
        let index = self.next_chunk;
        let mut hb = [0u8; CHUNK_HEADER_LEN];
        if read_full(&mut self.r, &mut hb)? < CHUNK_HEADER_LEN {
            return Err(SparseFault::Invalid(format!(
                "the file ends before chunk #{index} of {} (truncated)",
                self.h.total_chunks
            )));
        }
        skip(
            &mut self.r,
            self.h.chunk_header_len as u64 - CHUNK_HEADER_LEN as u64,
            "chunk header",
        )?;
        let c = ChunkHeader::parse(&hb);
        payload_len(&self.h, &c, index)?;
        let start = self.block;
        self.block = count_chunk(&self.h, &c, index, start, &mut self.counts)?;
        self.next_chunk += 1;
        let offset = start * self.h.block_size as u64;
        let len = (self.block - start) * self.h.block_size as u64;
        self.cur = Current::None;
        match c.kind {
            CHUNK_RAW => self.cur = Current::Raw { offset, left: len },
            CHUNK_FILL => {
                let value = self.read4(index)?;
                self.cur = Current::Fill {
                    offset,
                    left: len,
                    value,
                    phase: 0,
                };
            }
            CHUNK_DONT_CARE => self.crc_zeros(len),
            _ => {
                let expected = u32::from_le_bytes(self.read4(index)?);
                let computed = self.crc.clone().finalize();
                if expected != computed {
                    return Err(SparseFault::Crc {
                        chunk: index,
                        expected,
                        computed,
                    });
                }
            }
        }
        Ok(())
    }

    fn read4(&mut self, index: u32) -> Result<[u8; 4], SparseFault> {
        let mut v = [0u8; 4];
        if read_full(&mut self.r, &mut v)? < 4 {
            return Err(SparseFault::Invalid(format!(
                "the file ends inside chunk #{index} (truncated)"
            )));
        }
        Ok(v)
    }

    /// Advances the running CRC over `len` zero bytes without hashing them one by one (a
    /// DONT_CARE chunk may be gigabytes): CRC states of 1 MiB << k zeros are combined (and
    /// kept: every DONT_CARE chunk uses the same ones).
    fn crc_zeros(&mut self, len: u64) {
        crc_pattern(&mut self.crc, &mut self.zeros, [0; 4], len);
    }

    /// Reads to the end, dropping the data (the check pre-pass of a compressed image).
    pub fn drain(&mut self, scratch: &mut [u8]) -> Result<(), SparseFault> {
        while self.next_offset()?.is_some() {
            self.read(scratch)?;
        }
        Ok(())
    }
}

/// Advances `crc` over `len` bytes of `value` repeated, in O(log len): the CRC states of
/// 1 MiB << k bytes of the pattern (`units`, built on first use, or reused when the caller
/// keeps them) are combined. 1 MiB is a multiple of 4, so the pattern's phase is kept.
fn crc_pattern(
    crc: &mut crc32fast::Hasher,
    units: &mut Vec<crc32fast::Hasher>,
    value: [u8; 4],
    len: u64,
) {
    let unit = |n: usize| -> Vec<u8> { value.iter().copied().cycle().take(n).collect() };
    if units.is_empty() {
        let mut z = crc32fast::Hasher::new();
        z.update(&unit(ZERO_UNIT));
        units.push(z);
    }
    let count = len / ZERO_UNIT as u64;
    let mut k = 0;
    while count >> k != 0 {
        if units.len() <= k {
            let mut twice = units[k - 1].clone();
            twice.combine(&units[k - 1]);
            units.push(twice);
        }
        if (count >> k) & 1 == 1 {
            crc.combine(&units[k]);
        }
        k += 1;
    }
    let rest = (len % ZERO_UNIT as u64) as usize;
    if rest > 0 {
        crc.update(&unit(rest));
    }
}

fn skip<R: Read>(r: &mut R, n: u64, what: &str) -> Result<(), SparseFault> {
    if n == 0 {
        return Ok(());
    }
    let got = io::copy(&mut r.by_ref().take(n), &mut io::sink())?;
    if got < n {
        return Err(SparseFault::Invalid(format!(
            "the file ends inside a {what} (truncated)"
        )));
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A chunk of a test image.
    pub enum TestChunk {
        Raw(Vec<u8>),
        Fill(u32, u32),
        DontCare(u32),
        Crc,
        /// A CRC32 chunk with a wrong value.
        BadCrc,
    }

    /// Writes a sparse image as libsparse would (block size `bs`), and its expansion (with
    /// DONT_CARE as `None` runs).
    pub fn build(bs: u32, chunks: &[TestChunk]) -> (Vec<u8>, Vec<Option<u8>>) {
        let mut body = Vec::new();
        let mut expanded: Vec<Option<u8>> = Vec::new();
        let mut crc = crc32fast::Hasher::new();
        let mut blocks = 0u32;
        for c in chunks {
            let (kind, nblocks, payload): (u16, u32, Vec<u8>) = match c {
                TestChunk::Raw(d) => {
                    assert_eq!(d.len() % bs as usize, 0);
                    crc.update(d);
                    expanded.extend(d.iter().map(|&b| Some(b)));
                    (CHUNK_RAW, (d.len() / bs as usize) as u32, d.clone())
                }
                TestChunk::Fill(v, n) => {
                    let bytes: Vec<u8> = v
                        .to_le_bytes()
                        .iter()
                        .copied()
                        .cycle()
                        .take((*n * bs) as usize)
                        .collect();
                    crc.update(&bytes);
                    expanded.extend(bytes.iter().map(|&b| Some(b)));
                    (CHUNK_FILL, *n, v.to_le_bytes().to_vec())
                }
                TestChunk::DontCare(n) => {
                    crc.update(&vec![0u8; (*n * bs) as usize]);
                    expanded.extend(std::iter::repeat_n(None, (*n * bs) as usize));
                    (CHUNK_DONT_CARE, *n, vec![])
                }
                TestChunk::Crc => (
                    CHUNK_CRC32,
                    0,
                    crc.clone().finalize().to_le_bytes().to_vec(),
                ),
                TestChunk::BadCrc => (
                    CHUNK_CRC32,
                    0,
                    (crc.clone().finalize() ^ 1).to_le_bytes().to_vec(),
                ),
            };
            if kind != CHUNK_CRC32 {
                blocks += nblocks;
            }
            body.extend(kind.to_le_bytes());
            body.extend(0u16.to_le_bytes());
            body.extend(nblocks.to_le_bytes());
            body.extend((CHUNK_HEADER_LEN as u32 + payload.len() as u32).to_le_bytes());
            body.extend(payload);
        }
        let mut out = Vec::new();
        out.extend(super::super::magic::SPARSE_MAGIC);
        out.extend(1u16.to_le_bytes());
        out.extend(0u16.to_le_bytes());
        out.extend((FILE_HEADER_LEN as u16).to_le_bytes());
        out.extend((CHUNK_HEADER_LEN as u16).to_le_bytes());
        out.extend(bs.to_le_bytes());
        out.extend(blocks.to_le_bytes());
        out.extend((chunks.len() as u32).to_le_bytes());
        out.extend(0u32.to_le_bytes());
        out.extend(body);
        (out, expanded)
    }

    type Runs = Vec<(u64, Vec<u8>)>;

    fn runs(img: &[u8]) -> Result<(Runs, SparseCounts), SparseFault> {
        let mut r = SparseReader::new(img)?;
        let mut out: Runs = Vec::new();
        let mut buf = [0u8; 1000];
        while let Some(off) = r.next_offset()? {
            let n = r.read(&mut buf)?;
            match out.last_mut() {
                Some((o, d)) if *o + d.len() as u64 == off => d.extend(&buf[..n]),
                _ => out.push((off, buf[..n].to_vec())),
            }
        }
        Ok((out, r.counts))
    }

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[test]
    fn every_chunk_type_expands_as_libsparse_reads_it() {
        let bs = 4096;
        let (img, expanded) = build(
            bs,
            &[
                TestChunk::Raw(pattern(2 * 4096, 1)),
                TestChunk::Fill(0xdead_beef, 3),
                TestChunk::DontCare(5),
                TestChunk::Crc,
                TestChunk::Raw(pattern(4096, 9)),
                TestChunk::Fill(0, 1),
                TestChunk::DontCare(2),
                TestChunk::Crc,
            ],
        );
        let (got, counts) = runs(&img).expect("valid");
        assert_eq!(
            counts,
            SparseCounts {
                raw: 2,
                fill: 2,
                dont_care: 2,
                crc32: 2,
                mapped_bytes: 7 * 4096,
            }
        );
        // Two data runs: raw+fill (5 blocks), then raw+fill after the 5 don't-care blocks.
        assert_eq!(got.len(), 2);
        for (off, data) in &got {
            for (i, b) in data.iter().enumerate() {
                assert_eq!(
                    Some(*b),
                    expanded[*off as usize + i],
                    "byte {}",
                    off + i as u64
                );
            }
        }
        assert_eq!(got[0].0, 0);
        assert_eq!(got[0].1.len(), 5 * 4096);
        assert_eq!(&got[0].1[8192..8196], &0xdead_beefu32.to_le_bytes());
        assert_eq!(got[1].0, 10 * 4096);
        let h = SparseReader::new(&img[..]).expect("header");
        assert_eq!(h.header().logical_size(), 14 * 4096);
    }

    #[test]
    fn a_wrong_crc32_chunk_is_refused() {
        let (img, _) = build(
            512,
            &[
                TestChunk::Raw(pattern(512, 3)),
                TestChunk::DontCare(1),
                TestChunk::BadCrc,
            ],
        );
        match runs(&img) {
            Err(SparseFault::Crc { chunk, .. }) => assert_eq!(chunk, 2),
            other => panic!("{:?}", other.map(|r| r.1)),
        }
    }

    #[test]
    fn large_dont_care_runs_combine_their_crc() {
        // 3 MiB + 512 of zeros: combined units and a remainder.
        let (img, _) = build(
            512,
            &[
                TestChunk::Raw(pattern(512, 3)),
                TestChunk::DontCare(6145),
                TestChunk::Crc,
            ],
        );
        runs(&img).expect("the CRC over the zeros matches");
    }

    #[test]
    fn truncation_and_bad_headers_say_what_was_seen() {
        let (img, _) = build(512, &[TestChunk::Raw(pattern(1024, 1))]);
        let e = runs(&img[..img.len() - 10]).expect_err("truncated");
        assert!(format!("{e:?}").contains("truncated"), "{e:?}");
        let mut bad = img.clone();
        bad[28] = 0x99; // chunk type
        let e = runs(&bad).expect_err("type");
        assert!(format!("{e:?}").contains("unknown chunk type"), "{e:?}");
        let mut bad = img.clone();
        bad[16] = 9; // total blocks
        let e = runs(&bad).expect_err("blocks");
        assert!(format!("{e:?}").contains("header says 9"), "{e:?}");
        let mut bad = img;
        bad[4] = 2; // major version
        assert!(SparseReader::new(&bad[..]).is_err());
    }

    #[test]
    fn the_header_walk_matches_the_stream() {
        let dir = tempfile::tempdir().expect("tmp");
        let (img, _) = build(
            4096,
            &[
                TestChunk::Raw(pattern(4096, 1)),
                TestChunk::Fill(7, 2),
                TestChunk::DontCare(3),
            ],
        );
        let p = dir.path().join("s.simg");
        std::fs::write(&p, &img).expect("write");
        let f = File::open(&p).expect("open");
        let h = *SparseReader::new(&img[..]).expect("h").header();
        let walked = walk_file(&f, &h, &|| false).expect("walk");
        assert_eq!(walked, runs(&img).expect("runs").1);
        std::fs::write(&p, &img[..img.len() - 1]).expect("write");
        let f = File::open(&p).expect("open");
        assert!(walk_file(&f, &h, &|| false).is_err(), "truncated file");
    }
}
