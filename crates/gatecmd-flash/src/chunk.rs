//! Cutting the image's runs into chunks: the unit that is written, hashed, journalled,
//! skipped on resume and verified. Chunks sit on a fixed grid of `chunk_size` from image
//! offset 0, so the same image always cuts the same way (the journal matches chunks by
//! offset, length and hash). A run that does not fill its grid cell (a bmap range, a sparse
//! chunk) makes a shorter chunk; the image's last bytes are padded with zeros to a whole
//! block, as rkdeveloptool pads its last sector.

use crate::chunk_hash::{ChunkHash, ChunkKey};
use crate::image::stream::{Segments, StreamError};

/// One chunk: where it goes in the image, its bytes (a whole number of blocks) and their
/// keyed hash.
pub struct Chunk {
    /// Image byte offset (a multiple of the block size).
    pub offset: u64,
    /// A buffer of the chunk size whose first `len` bytes are the chunk (kept whole so it is
    /// reused without being resized: a resize is a byte loop in an unoptimised build).
    pub buf: Vec<u8>,
    /// Bytes of the chunk.
    pub len: usize,
    /// The chunk's bytes hashed with the journal's key.
    pub hash: ChunkHash,
}

impl Chunk {
    /// The bytes to write.
    pub fn data(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// Cuts a stream of runs into chunks.
pub struct Chunker {
    src: Box<dyn Segments>,
    chunk_size: u64,
    block: u64,
    key: ChunkKey,
}

/// Why a run cannot be cut into blocks.
#[derive(Debug)]
pub enum ChunkError {
    /// The stream failed.
    Stream(StreamError),
    /// A run starts inside a block (cannot happen with validated images; never a panic).
    Unaligned {
        /// The run's offset.
        offset: u64,
        /// The block size.
        block: u64,
    },
}

impl Chunker {
    /// Chunks of at most `chunk_size` bytes (a multiple of `block`) from `src`, hashed
    /// with `key`.
    pub fn new(src: Box<dyn Segments>, chunk_size: u64, block: u64, key: ChunkKey) -> Chunker {
        Chunker {
            src,
            chunk_size,
            block,
            key,
        }
    }

    /// The next chunk, built in `buf` (reused by the caller; allocated, zeroed, at the chunk
    /// size if it is smaller), or `None` at the end.
    pub fn next(&mut self, mut buf: Vec<u8>) -> Result<Option<Chunk>, ChunkError> {
        let Some(start) = self.src.next_offset().map_err(ChunkError::Stream)? else {
            return Ok(None);
        };
        if !start.is_multiple_of(self.block) {
            return Err(ChunkError::Unaligned {
                offset: start,
                block: self.block,
            });
        }
        if buf.len() < self.chunk_size as usize {
            buf = vec![0u8; self.chunk_size as usize];
        }
        let cell_end = (start / self.chunk_size + 1) * self.chunk_size;
        let cap = (cell_end - start) as usize;
        let mut len = 0usize;
        while len < cap {
            if len > 0 {
                // Continue only while the next run is contiguous and in the same cell.
                match self.src.next_offset().map_err(ChunkError::Stream)? {
                    Some(o) if o == start + len as u64 => {}
                    _ => break,
                }
            }
            let n = self
                .src
                .read(&mut buf[len..cap])
                .map_err(ChunkError::Stream)?;
            if n == 0 {
                break;
            }
            len += n;
        }
        let padded = (len as u64).div_ceil(self.block) as usize * self.block as usize;
        for b in &mut buf[len..padded] {
            *b = 0;
        }
        let hash = self.key.hash(&buf[..padded]);
        Ok(Some(Chunk {
            offset: start,
            buf,
            len: padded,
            hash,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs given as (offset, bytes).
    struct Runs {
        runs: Vec<(u64, Vec<u8>)>,
        i: usize,
        pos: usize,
    }

    impl Segments for Runs {
        fn next_offset(&mut self) -> Result<Option<u64>, StreamError> {
            while let Some((o, d)) = self.runs.get(self.i) {
                if self.pos < d.len() {
                    return Ok(Some(o + self.pos as u64));
                }
                self.i += 1;
                self.pos = 0;
            }
            Ok(None)
        }
        fn read(&mut self, buf: &mut [u8]) -> Result<usize, StreamError> {
            let Some((_, d)) = self.runs.get(self.i) else {
                return Ok(0);
            };
            // Short reads on purpose: the chunker must keep going.
            let k = (d.len() - self.pos).min(buf.len()).min(300);
            buf[..k].copy_from_slice(&d[self.pos..self.pos + k]);
            self.pos += k;
            Ok(k)
        }
    }

    fn cut(runs: Vec<(u64, Vec<u8>)>, size: u64, block: u64) -> Vec<(u64, usize)> {
        let key = ChunkKey::fixed(3);
        let mut c = Chunker::new(
            Box::new(Runs { runs, i: 0, pos: 0 }),
            size,
            block,
            key.clone(),
        );
        let mut out = Vec::new();
        while let Some(ch) = c.next(Vec::new()).expect("chunk") {
            assert_eq!(ch.hash, key.hash(ch.data()));
            out.push((ch.offset, ch.len));
        }
        out
    }

    #[test]
    fn chunks_follow_the_grid_and_the_gaps() {
        // A run across two cells, a gap, two adjacent runs (merged), a last short run.
        let got = cut(
            vec![
                (512, vec![1; 4096]),
                (8192, vec![2; 1024]),
                (9216, vec![3; 1024]),
                (20480, vec![4; 100]),
            ],
            4096,
            512,
        );
        assert_eq!(
            got,
            vec![
                (512, 3584),  // up to the first cell's end
                (4096, 512),  // the rest of the first run
                (8192, 2048), // two contiguous runs in one chunk
                (20480, 512), // 100 bytes padded to a block
            ]
        );
    }

    #[test]
    fn an_unaligned_run_is_an_error_not_a_panic() {
        let mut c = Chunker::new(
            Box::new(Runs {
                runs: vec![(100, vec![0; 10])],
                i: 0,
                pos: 0,
            }),
            4096,
            512,
            ChunkKey::fixed(3),
        );
        assert!(matches!(
            c.next(Vec::new()),
            Err(ChunkError::Unaligned { offset: 100, .. })
        ));
    }
}
