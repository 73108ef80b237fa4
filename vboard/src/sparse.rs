//! Android sparse images, device side: what `fastboot flash` sends when an image is larger
//! than the device's max-download-size. fastboot (29.0.6, `fastboot.cpp load_sparse_files`)
//! reads the image with libsparse (`sparse_file_import_auto`: uniform 4 KiB blocks become
//! FILL chunks, the rest RAW) and cuts it with `sparse_file_resparse` into pieces of at most
//! max-download-size; every piece covers the whole image, DONT_CARE where other pieces
//! carry the data. Each piece is one `download:` + `flash:`.
//!
//! The format is libsparse's `sparse_format.h` (AOSP system/core, platform-tools 29.0.6):
//! a 28-byte file header (magic 0xed26ff3a, major 1, minor 0, file_hdr_sz, chunk_hdr_sz,
//! blk_sz, total_blks, total_chunks, image_checksum), then chunks of a 12-byte header
//! (type, reserved, chunk_sz in blocks, total_sz in bytes with the header) and their data:
//! RAW 0xCAC1 (chunk_sz × blk_sz bytes), FILL 0xCAC2 (a 4-byte pattern), DONT_CARE 0xCAC3
//! (nothing), CRC32 0xCAC4 (the CRC-32 of the image expanded so far, DONT_CARE as zeros).
//! The checks below are those of libsparse's reader (`sparse_read.cpp`): the header sizes
//! may be larger than the first revision (the rest is skipped), each chunk's size must
//! match its type, the chunks must add up to `total_blks`. Like that reader, the header's
//! `image_checksum` is not checked (fastboot sends 0 there).

use crate::crc::crc32_ieee;

pub const MAGIC: u32 = 0xed26_ff3a;
const MAJOR_VERSION: u16 = 1;
/// Sizes of the first revision's headers; larger ones are allowed (the rest is skipped).
const FILE_HDR_LEN: usize = 28;
const CHUNK_HDR_LEN: usize = 12;

pub const CHUNK_RAW: u16 = 0xCAC1;
pub const CHUNK_FILL: u16 = 0xCAC2;
pub const CHUNK_DONT_CARE: u16 = 0xCAC3;
pub const CHUNK_CRC32: u16 = 0xCAC4;

/// What one chunk puts in the expanded image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Data<'a> {
    Raw(&'a [u8]),
    /// A 4-byte little-endian pattern repeated over the chunk.
    Fill(u32),
    /// Nothing: the device keeps what it has there.
    DontCare,
}

/// One chunk placed in the expanded image: `blocks` blocks from block `block`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk<'a> {
    pub block: u64,
    pub blocks: u64,
    pub data: Data<'a>,
}

/// A parsed, checked sparse image.
#[derive(Debug)]
pub struct Image<'a> {
    pub block_size: u32,
    pub total_blocks: u32,
    pub chunks: Vec<Chunk<'a>>,
}

impl Image<'_> {
    /// The length of the expanded image in bytes.
    pub fn expanded_len(&self) -> u64 {
        self.total_blocks as u64 * self.block_size as u64
    }
}

/// Why bytes are not a sparse image; each says what was expected.
#[derive(Debug, PartialEq, Eq)]
pub enum SparseError {
    NotSparse,
    Truncated {
        what: String,
        at: usize,
        need: usize,
    },
    MajorVersion(u16),
    FileHeaderSize(u16),
    ChunkHeaderSize(u16),
    BlockSize(u32),
    ChunkSize {
        index: u32,
        kind: &'static str,
        expected: u64,
        got: u64,
    },
    ChunkTotal {
        index: u32,
        total: u64,
        header: u16,
    },
    UnknownChunk {
        index: u32,
        kind: u16,
    },
    Crc {
        index: u32,
        stored: u32,
        computed: u32,
    },
    TotalBlocks {
        declared: u32,
        counted: u64,
    },
}

impl std::fmt::Display for SparseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SparseError::NotSparse => write!(f, "no sparse magic 0x{MAGIC:08x}"),
            SparseError::Truncated { what, at, need } => {
                write!(f, "truncated: {what} at byte {at} needs {need} bytes")
            }
            SparseError::MajorVersion(v) => {
                write!(f, "major version {v} (expected {MAJOR_VERSION})")
            }
            SparseError::FileHeaderSize(n) => {
                write!(f, "file header size {n} (expected at least {FILE_HDR_LEN})")
            }
            SparseError::ChunkHeaderSize(n) => {
                write!(
                    f,
                    "chunk header size {n} (expected at least {CHUNK_HDR_LEN})"
                )
            }
            SparseError::BlockSize(n) => {
                write!(f, "block size {n} (expected a non-zero multiple of 4)")
            }
            SparseError::ChunkSize {
                index,
                kind,
                expected,
                got,
            } => write!(
                f,
                "chunk {index} ({kind}) carries {got} data bytes (expected {expected})"
            ),
            SparseError::ChunkTotal {
                index,
                total,
                header,
            } => write!(
                f,
                "chunk {index}'s total_sz {total} is smaller than its {header}-byte header"
            ),
            SparseError::UnknownChunk { index, kind } => write!(
                f,
                "chunk {index} has type 0x{kind:04x} (expected RAW 0xcac1, FILL 0xcac2, DONT_CARE 0xcac3 or CRC32 0xcac4)"
            ),
            SparseError::Crc {
                index,
                stored,
                computed,
            } => write!(
                f,
                "CRC32 chunk {index} says 0x{stored:08x}, the data before it give 0x{computed:08x}"
            ),
            SparseError::TotalBlocks { declared, counted } => write!(
                f,
                "the chunks cover {counted} blocks, the header declares {declared}"
            ),
        }
    }
}

pub fn is_sparse(data: &[u8]) -> bool {
    data.len() >= 4 && u32::from_le_bytes([data[0], data[1], data[2], data[3]]) == MAGIC
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn take<'a>(data: &'a [u8], at: usize, n: usize, what: &str) -> Result<&'a [u8], SparseError> {
    at.checked_add(n)
        .and_then(|end| data.get(at..end))
        .ok_or_else(|| SparseError::Truncated {
            what: what.to_string(),
            at,
            need: n,
        })
}

/// Parses and checks the whole image before anything is written, so a malformed piece
/// leaves the partition as it was. CRC32 chunks are verified against the data before them.
pub fn parse(data: &[u8]) -> Result<Image<'_>, SparseError> {
    let head = take(data, 0, FILE_HDR_LEN, "the file header")?;
    if le32(head, 0) != MAGIC {
        return Err(SparseError::NotSparse);
    }
    let major = le16(head, 4);
    if major != MAJOR_VERSION {
        return Err(SparseError::MajorVersion(major));
    }
    let file_hdr = le16(head, 8);
    let chunk_hdr = le16(head, 10);
    if (file_hdr as usize) < FILE_HDR_LEN {
        return Err(SparseError::FileHeaderSize(file_hdr));
    }
    if (chunk_hdr as usize) < CHUNK_HDR_LEN {
        return Err(SparseError::ChunkHeaderSize(chunk_hdr));
    }
    let block_size = le32(head, 12);
    if block_size == 0 || !block_size.is_multiple_of(4) {
        return Err(SparseError::BlockSize(block_size));
    }
    let (total_blocks, total_chunks) = (le32(head, 16), le32(head, 20));
    let bs = block_size as u64;
    let mut at = file_hdr as usize;
    let mut block = 0u64;
    let mut chunks = Vec::new();
    for index in 0..total_chunks {
        let h = take(
            data,
            at,
            chunk_hdr as usize,
            &format!("chunk {index}'s header"),
        )?;
        let (kind, blocks, total) = (le16(h, 0), le32(h, 4) as u64, le32(h, 8) as u64);
        let Some(body_len) = total.checked_sub(chunk_hdr as u64) else {
            return Err(SparseError::ChunkTotal {
                index,
                total,
                header: chunk_hdr,
            });
        };
        let body_at = at + chunk_hdr as usize;
        let body = take(
            data,
            body_at,
            body_len as usize,
            &format!("chunk {index}'s data"),
        )?;
        let check_len = |kind: &'static str, expected: u64| {
            if body_len == expected {
                Ok(())
            } else {
                Err(SparseError::ChunkSize {
                    index,
                    kind,
                    expected,
                    got: body_len,
                })
            }
        };
        let data = match kind {
            CHUNK_RAW => {
                check_len("RAW", blocks * bs)?;
                Data::Raw(body)
            }
            CHUNK_FILL => {
                check_len("FILL", 4)?;
                Data::Fill(le32(body, 0))
            }
            CHUNK_DONT_CARE => {
                check_len("DONT_CARE", 0)?;
                Data::DontCare
            }
            CHUNK_CRC32 => {
                check_len("CRC32", 4)?;
                let stored = le32(body, 0);
                // Computed only here: fastboot sends no CRC32 chunks, and expanding a
                // large DONT_CARE region for nothing would cost time.
                let computed = running_crc(&chunks, bs);
                if stored != computed {
                    return Err(SparseError::Crc {
                        index,
                        stored,
                        computed,
                    });
                }
                at = body_at + body_len as usize;
                continue;
            }
            other => return Err(SparseError::UnknownChunk { index, kind: other }),
        };
        chunks.push(Chunk {
            block,
            blocks,
            data,
        });
        block += blocks;
        at = body_at + body_len as usize;
    }
    if block != total_blocks as u64 {
        return Err(SparseError::TotalBlocks {
            declared: total_blocks,
            counted: block,
        });
    }
    Ok(Image {
        block_size,
        total_blocks,
        chunks,
    })
}

/// The CRC-32 of the image expanded up to the end of `chunks` (DONT_CARE counts as zeros,
/// as libsparse's `process_skip_chunk` does).
fn running_crc(chunks: &[Chunk], block_size: u64) -> u32 {
    let mut crc = 0u32;
    let mut buf = Vec::new();
    for c in chunks {
        let len = c.blocks * block_size;
        let pattern = match c.data {
            Data::Raw(d) => {
                crc = crc32_ieee(crc, d);
                continue;
            }
            Data::Fill(v) => v,
            Data::DontCare => 0,
        };
        if buf.is_empty() {
            buf = vec![0u8; 64 << 10];
        }
        fill_pattern(&mut buf, pattern);
        let mut left = len;
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            crc = crc32_ieee(crc, &buf[..n]);
            left -= n as u64;
        }
    }
    crc
}

/// Fills `buf` with the 4-byte little-endian pattern `v` (its length is a multiple of 4).
pub fn fill_pattern(buf: &mut [u8], v: u32) {
    for w in buf.chunks_mut(4) {
        let n = w.len();
        w.copy_from_slice(&v.to_le_bytes()[..n]);
    }
}

/// Writes the image through `write(byte_offset, bytes)`: RAW data as it is, FILL chunks
/// expanded in pieces of at most `piece` bytes (a multiple of the block size), DONT_CARE
/// skipped. Stops at the first error `write` returns.
pub fn apply<E>(
    image: &Image,
    piece: usize,
    mut write: impl FnMut(u64, &[u8]) -> Result<(), E>,
) -> Result<(), E> {
    let bs = image.block_size as u64;
    let piece = ((piece as u64 / bs).max(1) * bs) as usize;
    let mut fill = Vec::new();
    for c in &image.chunks {
        let offset = c.block * bs;
        match c.data {
            Data::Raw(d) => {
                for (k, part) in d.chunks(piece).enumerate() {
                    write(offset + (k * piece) as u64, part)?;
                }
            }
            Data::Fill(v) => {
                let len = c.blocks * bs;
                fill.resize(len.min(piece as u64) as usize, 0);
                fill_pattern(&mut fill, v);
                let mut done = 0u64;
                while done < len {
                    let n = (len - done).min(fill.len() as u64) as usize;
                    write(offset + done, &fill[..n])?;
                    done += n as u64;
                }
            }
            Data::DontCare => {}
        }
    }
    Ok(())
}

/// A sparse image as libsparse writes one (for tests): `chunks` of (type, blocks, data).
#[cfg(test)]
pub fn build(block_size: u32, chunks: &[(u16, u32, Vec<u8>)]) -> Vec<u8> {
    let total_blocks: u32 = chunks
        .iter()
        .filter(|c| c.0 != CHUNK_CRC32)
        .map(|c| c.1)
        .sum();
    let mut out = Vec::new();
    out.extend(MAGIC.to_le_bytes());
    out.extend(1u16.to_le_bytes());
    out.extend(0u16.to_le_bytes());
    out.extend((FILE_HDR_LEN as u16).to_le_bytes());
    out.extend((CHUNK_HDR_LEN as u16).to_le_bytes());
    out.extend(block_size.to_le_bytes());
    out.extend(total_blocks.to_le_bytes());
    out.extend((chunks.len() as u32).to_le_bytes());
    out.extend(0u32.to_le_bytes());
    for (kind, blocks, data) in chunks {
        out.extend(kind.to_le_bytes());
        out.extend(0u16.to_le_bytes());
        out.extend(blocks.to_le_bytes());
        out.extend(((CHUNK_HDR_LEN + data.len()) as u32).to_le_bytes());
        out.extend(data);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand(image: &Image, base: &[u8]) -> Vec<u8> {
        let mut out = base.to_vec();
        out.resize(image.expanded_len() as usize, 0);
        apply(image, 8192, |off, d| {
            out[off as usize..off as usize + d.len()].copy_from_slice(d);
            Ok::<(), ()>(())
        })
        .expect("apply");
        out
    }

    #[test]
    fn raw_fill_and_dont_care_expand_over_what_was_there() {
        let raw: Vec<u8> = (0..2 * 4096u32).map(|i| (i * 7) as u8).collect();
        let img = build(
            4096,
            &[
                (CHUNK_DONT_CARE, 1, vec![]),
                (CHUNK_RAW, 2, raw.clone()),
                (CHUNK_FILL, 3, 0xdead_beefu32.to_le_bytes().to_vec()),
                (CHUNK_DONT_CARE, 2, vec![]),
            ],
        );
        assert!(is_sparse(&img));
        let image = parse(&img).expect("parses");
        assert_eq!(image.expanded_len(), 8 * 4096);
        let before = vec![0x55u8; 8 * 4096];
        let out = expand(&image, &before);
        assert_eq!(
            &out[..4096],
            &before[..4096],
            "DONT_CARE keeps the old data"
        );
        assert_eq!(&out[4096..3 * 4096], &raw[..]);
        assert!(
            out[3 * 4096..6 * 4096]
                .chunks(4)
                .all(|w| w == 0xdead_beefu32.to_le_bytes())
        );
        assert_eq!(&out[6 * 4096..], &before[6 * 4096..]);
    }

    #[test]
    fn a_crc32_chunk_is_checked_against_the_expanded_data() {
        let raw = vec![0xa5u8; 4096];
        let mut expanded = raw.clone();
        expanded.extend(vec![0u8; 4096]); // DONT_CARE counts as zeros
        expanded.extend([1u8, 0, 0, 0].repeat(1024)); // FILL 1
        let good = crc32_ieee(0, &expanded);
        let chunks = |crc: u32| {
            vec![
                (CHUNK_RAW, 1, raw.clone()),
                (CHUNK_DONT_CARE, 1, vec![]),
                (CHUNK_FILL, 1, 1u32.to_le_bytes().to_vec()),
                (CHUNK_CRC32, 0, crc.to_le_bytes().to_vec()),
            ]
        };
        let img = build(4096, &chunks(good));
        assert_eq!(parse(&img).expect("good CRC").chunks.len(), 3);
        let err = parse(&build(4096, &chunks(good ^ 1))).expect_err("bad CRC");
        assert!(matches!(err, SparseError::Crc { index: 3, .. }), "{err}");
        assert!(err.to_string().contains("CRC32 chunk 3"), "{err}");
    }

    #[test]
    fn malformed_images_are_refused_with_the_reason() {
        assert_eq!(
            parse(b"not sparse at all, 28 bytes.").err(),
            Some(SparseError::NotSparse)
        );
        let good = build(4096, &[(CHUNK_RAW, 1, vec![0u8; 4096])]);
        // Truncated data.
        let e = parse(&good[..good.len() - 1]).expect_err("truncated");
        assert!(e.to_string().contains("chunk 0's data"), "{e}");
        // A RAW chunk whose size disagrees with its block count.
        let bad = build(4096, &[(CHUNK_RAW, 2, vec![0u8; 4096])]);
        let e = parse(&bad).expect_err("size");
        assert!(e.to_string().contains("expected 8192"), "{e}");
        // A total_sz smaller than the chunk header.
        let mut short = good.clone();
        short[28 + 8] = 4;
        short[28 + 9] = 0;
        short[28 + 10] = 0;
        short[28 + 11] = 0;
        let e = parse(&short).expect_err("total_sz");
        assert!(
            e.to_string().contains("smaller than its 12-byte header"),
            "{e}"
        );
        // Unknown chunk type.
        let bad = build(4096, &[(0xCAC9, 1, vec![])]);
        assert!(matches!(
            parse(&bad),
            Err(SparseError::UnknownChunk { kind: 0xCAC9, .. })
        ));
        // Major version 2.
        let mut v2 = good.clone();
        v2[4] = 2;
        assert_eq!(parse(&v2).err(), Some(SparseError::MajorVersion(2)));
        // total_blks that the chunks do not add up to.
        let mut wrong = good.clone();
        wrong[16] = 5;
        assert!(matches!(
            parse(&wrong),
            Err(SparseError::TotalBlocks {
                declared: 5,
                counted: 1
            })
        ));
        // Block size not a multiple of 4.
        let mut odd = good;
        odd[12] = 3;
        assert!(matches!(parse(&odd), Err(SparseError::BlockSize(_))));
    }

    #[test]
    fn longer_headers_are_skipped_as_libsparse_does() {
        // file_hdr_sz 32 and chunk_hdr_sz 16: four extra bytes after each header.
        let mut img = Vec::new();
        img.extend(MAGIC.to_le_bytes());
        img.extend([1, 0, 0, 0]);
        img.extend(32u16.to_le_bytes());
        img.extend(16u16.to_le_bytes());
        img.extend(4096u32.to_le_bytes());
        img.extend(1u32.to_le_bytes());
        img.extend(1u32.to_le_bytes());
        img.extend(0u32.to_le_bytes());
        img.extend([0xee; 4]);
        img.extend(CHUNK_FILL.to_le_bytes());
        img.extend([0, 0]);
        img.extend(1u32.to_le_bytes());
        img.extend(20u32.to_le_bytes());
        img.extend([0xee; 4]);
        img.extend(7u32.to_le_bytes());
        let image = parse(&img).expect("parses");
        assert_eq!(image.chunks[0].data, Data::Fill(7));
    }
}
