//! The writer end to end on a file-backed target: every format and compression, the bmap's
//! ranges only, the refusals before any write, resume after a cut, cancel between chunks,
//! a verification that catches a bad read-back. Real files in temporary directories.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use super::*;
use crate::image::bmap::tests::write as write_bmap;
use crate::image::sparse::tests::{TestChunk, build as build_sparse};
use crate::image::{Compression, Layout, SizeLimit};
use crate::progress::Progress;
use crate::target::{FileTarget, TargetError};

const FILL: u8 = 0xAA;

/// Pseudo-random bytes (an LCG): a misplaced sector changes everything after it.
fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (x >> 24) as u8
        })
        .collect()
}

struct Bench {
    dir: tempfile::TempDir,
    disk: PathBuf,
    capacity: u64,
}

impl Bench {
    /// A disk of `capacity` bytes, every byte `FILL` (so untouched areas are visible).
    fn new(capacity: u64) -> Bench {
        let dir = tempfile::tempdir().expect("tmp");
        let disk = dir.path().join("disk");
        std::fs::write(&disk, vec![FILL; capacity as usize]).expect("disk");
        Bench {
            dir,
            disk,
            capacity,
        }
    }

    fn target(&self) -> FileTarget {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.disk)
            .expect("open disk");
        FileTarget::new(f, self.capacity).expect("target")
    }

    fn file(&self, name: &str, bytes: &[u8]) -> File {
        let p = self.dir.path().join(name);
        std::fs::write(&p, bytes).expect("write");
        File::open(p).expect("open")
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    fn opts(&self, chunk: u64) -> FlashOptions {
        let mut o = FlashOptions::new("vb1", self.state());
        o.chunk_size = chunk;
        o
    }

    fn disk(&self) -> Vec<u8> {
        std::fs::read(&self.disk).expect("read disk")
    }

    fn untouched(&self) -> bool {
        self.disk().iter().all(|&b| b == FILL)
    }
}

fn flash_quiet(
    t: &mut dyn BlockTarget,
    img: &mut Image,
    o: &FlashOptions,
) -> Result<FlashReport, FlashError> {
    flash(t, img, o, &mut Control::none())
}

fn gzip(b: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(b).expect("gz");
    e.finish().expect("gz")
}

fn zstd(b: &[u8]) -> Vec<u8> {
    zstd::encode_all(b, 3).expect("zstd")
}

fn xz(b: &[u8]) -> Vec<u8> {
    let mut w =
        lzma_rust2::XzWriter::new(Vec::new(), lzma_rust2::XzOptions::with_preset(1)).expect("xz");
    w.write_all(b).expect("xz");
    w.finish().expect("xz")
}

/// The expected disk: `FILL` everywhere, the image's runs (padded to 512) where mapped.
fn expect_disk(capacity: u64, runs: &[(u64, &[u8])]) -> Vec<u8> {
    let mut d = vec![FILL; capacity as usize];
    for (off, data) in runs {
        let padded = data.len().div_ceil(512) * 512;
        let at = *off as usize;
        d[at..at + padded].fill(0);
        d[at..at + data.len()].copy_from_slice(data);
    }
    d
}

#[test]
fn a_raw_image_is_written_padded_and_verified() {
    let b = Bench::new(4 << 20);
    let img = pattern((1 << 20) + 100, 1);
    let mut image = Image::open(b.file("raw.img", &img), None).expect("open");
    assert_eq!(image.info().layout, Layout::Raw);
    assert_eq!(image.logical_size(), Some(img.len() as u64));
    let r = flash_quiet(&mut b.target(), &mut image, &b.opts(256 << 10)).expect("flash");
    assert_eq!(b.disk(), expect_disk(b.capacity, &[(0, &img)]));
    // Four full chunks and the 100-byte tail padded to one block.
    assert_eq!(r.write.chunks_written, 5);
    assert_eq!(r.write.bytes_written, (1 << 20) + 512);
    let v = r.verify.expect("verified");
    assert_eq!((v.chunks, v.bytes), (5, (1 << 20) + 512));
    assert!(
        r.check.is_none(),
        "an uncompressed raw image needs no pre-pass"
    );
}

#[test]
fn each_compression_streams_to_the_same_bytes() {
    let img = pattern(3 << 20, 2);
    // Two gzip members and two zstd frames, as `cat a.gz b.gz` makes them.
    let half = img.len() / 2;
    let mut gz2 = gzip(&img[..half]);
    gz2.extend(gzip(&img[half..]));
    let mut zst2 = zstd(&img[..half]);
    zst2.extend(zstd(&img[half..]));
    for (name, bytes, c) in [
        ("img.gz", gzip(&img), Compression::Gzip),
        ("img2.gz", gz2, Compression::Gzip),
        ("img.zst", zstd(&img), Compression::Zstd),
        ("img2.zst", zst2, Compression::Zstd),
        ("img.xz", xz(&img), Compression::Xz),
    ] {
        let b = Bench::new(4 << 20);
        // A misleading name: detection is by magic.
        let mut image = Image::open(b.file(&format!("{name}.img"), &bytes), None).expect(name);
        assert_eq!(image.info().compression, c, "{name}");
        assert_eq!(
            image.logical_size(),
            None,
            "{name}: unknown before the check"
        );
        let r = flash_quiet(&mut b.target(), &mut image, &b.opts(1 << 20)).expect(name);
        assert_eq!(image.logical_size(), Some(img.len() as u64), "{name}");
        let check = r.check.expect("a compressed image is checked first");
        assert_eq!(check.file_bytes_read, bytes.len() as u64, "{name}");
        assert_eq!(b.disk(), expect_disk(b.capacity, &[(0, &img)]), "{name}");
    }
}

fn sparse_image() -> (Vec<u8>, Vec<Option<u8>>) {
    build_sparse(
        4096,
        &[
            TestChunk::Raw(pattern(3 * 4096, 3)),
            TestChunk::Fill(0x1234_5678, 300),
            TestChunk::DontCare(40),
            TestChunk::Crc,
            TestChunk::Raw(pattern(4096, 4)),
            TestChunk::Fill(0, 2),
            TestChunk::DontCare(1),
            TestChunk::Crc,
        ],
    )
}

fn check_sparse_disk(b: &Bench, expanded: &[Option<u8>]) {
    let disk = b.disk();
    for (i, want) in expanded.iter().enumerate() {
        assert_eq!(disk[i], want.unwrap_or(FILL), "byte {i}");
    }
    assert!(disk[expanded.len()..].iter().all(|&x| x == FILL));
}

#[test]
fn an_android_sparse_image_writes_raw_and_fill_and_skips_dont_care() {
    let (img, expanded) = sparse_image();
    for (name, bytes) in [("s.simg", img.clone()), ("s.simg.zst", zstd(&img))] {
        let b = Bench::new(4 << 20);
        let mut image = Image::open(b.file(name, &bytes), None).expect(name);
        assert_eq!(image.info().layout, Layout::AndroidSparse, "{name}");
        assert_eq!(image.logical_size(), Some(expanded.len() as u64));
        let r = flash_quiet(&mut b.target(), &mut image, &b.opts(256 << 10)).expect(name);
        check_sparse_disk(&b, &expanded);
        let mapped = (3 + 300 + 1 + 2) * 4096;
        assert_eq!(image.mapped_bytes(), Some(mapped), "{name}");
        assert_eq!(r.write.bytes_written, mapped, "{name}");
        let chunks = image.info().sparse_chunks.expect("counted");
        assert_eq!(
            (chunks.raw, chunks.fill, chunks.dont_care, chunks.crc32),
            (2, 2, 2, 2)
        );
    }
}

#[test]
fn a_sparse_crc_error_is_refused_before_writing_when_compressed() {
    let (img, _) = build_sparse(
        512,
        &[TestChunk::Raw(pattern(64 << 10, 5)), TestChunk::BadCrc],
    );
    let b = Bench::new(1 << 20);
    let mut image = Image::open(b.file("bad.simg.gz", &gzip(&img)), None).expect("open");
    let e = flash_quiet(&mut b.target(), &mut image, &b.opts(4096)).expect_err("crc");
    assert!(matches!(e, FlashError::SparseCrc { .. }), "{e}");
    assert!(e.to_string().contains("nothing was written"), "{e}");
    assert!(b.untouched());
    // Uncompressed, the CRC chunk is met while streaming: the error says what was written.
    let mut image = Image::open(b.file("bad.simg", &img), None).expect("open");
    let e = flash_quiet(&mut b.target(), &mut image, &b.opts(4096)).expect_err("crc");
    assert!(e.to_string().contains("already been written"), "{e}");
}

/// A 4 MiB raw image whose blocks 0-63, 300-363, 700-763 and 1000-1023 (4 KiB blocks, about
/// a quarter) hold data; the rest is zeros, as a filesystem image's free space.
fn bmapped_image() -> (Vec<u8>, Vec<(u64, u64)>) {
    let ranges = vec![(0u64, 63u64), (300, 363), (700, 763), (1000, 1023)];
    let mut img = vec![0u8; 4 << 20];
    for (i, &(a, z)) in ranges.iter().enumerate() {
        let (s, e) = (a as usize * 4096, (z as usize + 1) * 4096);
        img[s..e].copy_from_slice(&pattern(e - s, 10 + i as u32));
    }
    (img, ranges)
}

#[test]
fn a_bmap_writes_only_its_ranges() {
    let (img, ranges) = bmapped_image();
    for sha1 in [false, true] {
        let bmap = write_bmap(&img, 4096, &ranges, sha1);
        for (name, bytes) in [("b.img", img.clone()), ("b.img.zst", zstd(&img))] {
            let b = Bench::new(8 << 20);
            let mut image = Image::open(
                b.file(name, &bytes),
                Some(b.file("b.bmap", bmap.as_bytes())),
            )
            .expect(name);
            let r = flash_quiet(&mut b.target(), &mut image, &b.opts(1 << 20)).expect(name);
            let runs: Vec<(u64, &[u8])> = ranges
                .iter()
                .map(|&(a, z)| (a * 4096, &img[a as usize * 4096..(z as usize + 1) * 4096]))
                .collect();
            assert_eq!(
                b.disk(),
                expect_disk(b.capacity, &runs),
                "{name} sha1={sha1}"
            );
            let mapped = 216 * 4096;
            assert_eq!(r.write.bytes_written, mapped, "{name}");
            let check = r.check.expect("a bmap is checked first");
            assert_eq!(check.ranges_checked, 4, "{name}");
            // 1 MiB cells hold 256 blocks: each range lies in one cell, one chunk each.
            assert_eq!(r.write.chunks_written, 4, "{name}");
            // The ranges written, in 512-byte sectors: the bmap's, and nothing else.
            let sectors: Vec<(u64, u64)> =
                ranges.iter().map(|&(a, z)| (a * 8, (z + 1) * 8)).collect();
            assert_eq!(r.write.ranges, sectors, "{name}");
        }
    }
}

#[test]
fn a_bmap_that_does_not_match_is_refused_with_nothing_written() {
    let (img, ranges) = bmapped_image();
    let bmap = write_bmap(&img, 4096, &ranges, false);
    let mut other = img.clone();
    other[700 * 4096 + 5] ^= 0x40; // inside a mapped range
    for (name, bytes) in [("o.img", other.clone()), ("o.img.xz", xz(&other))] {
        let b = Bench::new(8 << 20);
        let mut image = Image::open(
            b.file(name, &bytes),
            Some(b.file("b.bmap", bmap.as_bytes())),
        )
        .expect(name);
        let e = flash_quiet(&mut b.target(), &mut image, &b.opts(1 << 20)).expect_err(name);
        match &e {
            FlashError::BmapRangeMismatch { first, last, .. } => {
                assert_eq!((*first, *last), (700, 763), "{name}")
            }
            other => panic!("{name}: {other}"),
        }
        assert!(e.to_string().contains("nothing was written"), "{e}");
        assert!(b.untouched(), "{name}: the board was written");
    }
    // A different size: refused at open (uncompressed) or by the check (compressed).
    let longer = [img.as_slice(), &[0u8; 4096]].concat();
    let b = Bench::new(8 << 20);
    let e = Image::open(
        b.file("l.img", &longer),
        Some(b.file("b.bmap", bmap.as_bytes())),
    )
    .err()
    .expect("size");
    assert!(matches!(e, FlashError::BmapSizeMismatch { .. }), "{e}");
    let mut image = Image::open(
        b.file("l.img.gz", &gzip(&longer)),
        Some(b.file("b.bmap", bmap.as_bytes())),
    )
    .expect("open");
    let e = flash_quiet(&mut b.target(), &mut image, &b.opts(1 << 20)).expect_err("size");
    assert!(matches!(e, FlashError::BmapSizeMismatch { .. }), "{e}");
    assert!(b.untouched());
    // With a sparse image: refused.
    let (simg, _) = sparse_image();
    let e = Image::open(
        b.file("s.simg", &simg),
        Some(b.file("b.bmap", bmap.as_bytes())),
    )
    .err()
    .expect("sparse+bmap");
    assert!(matches!(e, FlashError::BmapWithSparse { .. }), "{e}");
}

#[test]
fn an_image_larger_than_the_flash_is_refused_before_a_byte() {
    let img = pattern(3 << 20, 6);
    for (name, bytes) in [("big.img", img.clone()), ("big.img.zst", zstd(&img))] {
        let b = Bench::new(2 << 20);
        let mut image = Image::open(b.file(name, &bytes), None).expect(name);
        let e = flash_quiet(&mut b.target(), &mut image, &b.opts(1 << 20)).expect_err(name);
        if name.ends_with(".zst") {
            // Compressed: the pre-pass stops decompressing once past the flash's size
            // (issue 37) instead of expanding the whole stream first.
            assert!(matches!(e, FlashError::ImageOverLimit { .. }), "{e}");
            assert!(
                e.to_string().starts_with(
                    "the image is larger than 2.1 MB, the most the board's flash allows: its zstd stream"
                ),
                "{e}"
            );
        } else {
            assert!(matches!(e, FlashError::ImageTooLarge { .. }), "{e}");
            assert_eq!(
                e.to_string(),
                "the image (3.1 MB) is larger than the board's flash (2.1 MB): nothing was written"
            );
        }
        assert!(b.untouched());
    }
    // From an offset: fits at 0, not at 2 MiB.
    let b = Bench::new(4 << 20);
    let mut image = Image::open(b.file("x.img", &img), None).expect("open");
    let mut o = b.opts(1 << 20);
    o.start_lba = 4096;
    let e = flash_quiet(&mut b.target(), &mut image, &o).expect_err("offset");
    assert!(e.to_string().contains("from LBA 0x1000"), "{e}");
}

/// A target that fails its `fail_at`-th write, or corrupts reads of one LBA.
struct Flaky {
    inner: FileTarget,
    writes: usize,
    fail_at: Option<usize>,
    corrupt_lba: Option<u64>,
}

impl BlockTarget for Flaky {
    fn block_size(&self) -> u32 {
        self.inner.block_size()
    }
    fn capacity_blocks(&self) -> u64 {
        self.inner.capacity_blocks()
    }
    fn max_transfer_blocks(&self) -> u32 {
        self.inner.max_transfer_blocks()
    }
    fn write_blocks(&mut self, lba: u64, data: &[u8]) -> Result<(), TargetError> {
        self.writes += 1;
        if Some(self.writes) == self.fail_at {
            // Half of it lands, as a transfer cut by an unplug would.
            let _ = self.inner.write_blocks(lba, &data[..data.len() / 2]);
            return Err(TargetError::Transport("the device left the bus".into()));
        }
        self.inner.write_blocks(lba, data)
    }
    fn read_blocks(&mut self, lba: u64, buf: &mut [u8]) -> Result<(), TargetError> {
        self.inner.read_blocks(lba, buf)?;
        if Some(lba) == self.corrupt_lba {
            buf[0] ^= 1;
        }
        Ok(())
    }
}

fn journal_path(b: &Bench) -> PathBuf {
    b.state().join(crate::journal::file_name("vb1"))
}

#[test]
fn a_cut_flash_resumes_writing_only_what_is_missing() {
    let img = pattern(2 << 20, 7);
    let b = Bench::new(4 << 20);
    // 64 KiB chunks of one 64 KiB transfer each: the 21st write fails, 20 chunks are in.
    let mut t = Flaky {
        inner: b.target(),
        writes: 0,
        fail_at: Some(21),
        corrupt_lba: None,
    };
    let mut image = Image::open(b.file("r.img", &img), None).expect("open");
    let e = flash_quiet(&mut t, &mut image, &b.opts(64 << 10)).expect_err("cut");
    assert!(
        matches!(
            e,
            FlashError::Write {
                lba: 2560,
                bytes_written: 1_310_720, // the 20 chunks before it
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("flash the same image again"), "{e}");
    assert!(journal_path(&b).exists());
    // Someone changed chunk 3 meanwhile: it is read back, found different, rewritten.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&b.disk)
        .expect("disk");
    f.write_all_at(b"other", 3 * (64 << 10)).expect("poke");
    let mut image = Image::open(b.file("r.img", &img), None).expect("open");
    let r = flash_quiet(&mut b.target(), &mut image, &b.opts(64 << 10)).expect("resume");
    assert_eq!(r.write.chunks_skipped, 19);
    assert_eq!(r.write.chunks_rewritten, 1);
    assert_eq!(r.write.chunks_written, 32 - 19);
    assert!(
        r.write.bytes_written < img.len() as u64 / 2,
        "{:?}",
        r.write
    );
    assert_eq!(
        r.verify.expect("verify").chunks,
        13,
        "only what was written is re-read"
    );
    assert_eq!(b.disk(), expect_disk(b.capacity, &[(0, &img)]));
    // The same image again: everything is read back and skipped, nothing written.
    let mut image = Image::open(b.file("r.img", &img), None).expect("open");
    let r = flash_quiet(&mut b.target(), &mut image, &b.opts(64 << 10)).expect("again");
    assert_eq!((r.write.chunks_written, r.write.chunks_skipped), (0, 32));
    // Without resume: all of it.
    let mut o = b.opts(64 << 10);
    o.resume = false;
    let mut image = Image::open(b.file("r.img", &img), None).expect("open");
    let r = flash_quiet(&mut b.target(), &mut image, &o).expect("no resume");
    assert_eq!(r.write.chunks_written, 32);
}

#[test]
fn cancel_stops_between_chunks_and_says_where() {
    let img = pattern(1 << 20, 8);
    let b = Bench::new(2 << 20);
    let cancel = AtomicBool::new(false);
    let mut seen = Vec::new();
    let mut progress = |p: Progress| {
        seen.push(p);
        if p.phase == Phase::Write && p.done >= 3 * (64 << 10) {
            cancel.store(true, Ordering::Relaxed);
        }
    };
    let mut image = Image::open(b.file("c.img", &img), None).expect("open");
    let e = flash(
        &mut b.target(),
        &mut image,
        &b.opts(64 << 10),
        &mut Control::new(&mut progress, &cancel),
    )
    .expect_err("cancelled");
    match &e {
        FlashError::Cancelled {
            phase,
            at,
            bytes_written,
            ..
        } => {
            assert_eq!(*phase, Phase::Write);
            assert_eq!(*at, 3 * (64 << 10), "stopped before the 4th chunk");
            assert_eq!(*bytes_written, 3 * (64 << 10));
        }
        other => panic!("{other}"),
    }
    assert!(e.to_string().contains("resume"), "{e}");
    assert!(
        seen.iter()
            .any(|p| p.phase == Phase::Write && p.total == 1 << 20)
    );
    let disk = b.disk();
    assert_eq!(&disk[..3 * (64 << 10)], &img[..3 * (64 << 10)]);
    assert!(disk[3 * (64 << 10)..].iter().all(|&x| x == FILL));
    let mut image = Image::open(b.file("c.img", &img), None).expect("open");
    let r = flash_quiet(&mut b.target(), &mut image, &b.opts(64 << 10)).expect("resume");
    assert_eq!(r.write.chunks_skipped, 3);
}

#[test]
fn verification_catches_a_chunk_that_reads_back_wrong() {
    let img = pattern(512 << 10, 9);
    let b = Bench::new(1 << 20);
    let mut t = Flaky {
        inner: b.target(),
        writes: 0,
        fail_at: None,
        corrupt_lba: Some(256), // the third 64 KiB chunk's first transfer
    };
    let mut image = Image::open(b.file("v.img", &img), None).expect("open");
    let e = flash_quiet(&mut t, &mut image, &b.opts(64 << 10)).expect_err("mismatch");
    match &e {
        FlashError::VerifyMismatch {
            count, first_lba, ..
        } => assert_eq!((*count, *first_lba), (1, 256)),
        other => panic!("{other}"),
    }
    // The journal no longer lists it: the next flash rewrites exactly that chunk.
    let mut image = Image::open(b.file("v.img", &img), None).expect("open");
    let r = flash_quiet(&mut b.target(), &mut image, &b.opts(64 << 10)).expect("again");
    assert_eq!((r.write.chunks_written, r.write.chunks_skipped), (1, 7));
}

#[test]
fn a_damaged_compressed_image_is_refused_before_writing() {
    let img = pattern(1 << 20, 11);
    for (name, mut bytes) in [
        ("t.zst", zstd(&img)),
        ("t.gz", gzip(&img)),
        ("t.xz", xz(&img)),
    ] {
        bytes.truncate(bytes.len() * 3 / 4);
        let b = Bench::new(2 << 20);
        let mut image = Image::open(b.file(name, &bytes), None).expect(name);
        let e = flash_quiet(&mut b.target(), &mut image, &b.opts(64 << 10)).expect_err(name);
        assert!(matches!(e, FlashError::Decompress { .. }), "{name}: {e}");
        assert!(e.to_string().contains("nothing was written"), "{e}");
        assert!(b.untouched(), "{name}");
    }
}

#[test]
fn options_and_unsupported_formats_are_refused_with_the_reason() {
    let b = Bench::new(1 << 20);
    let mut image = Image::open(b.file("o.img", &pattern(4096, 1)), None).expect("open");
    let e = flash_quiet(&mut b.target(), &mut image, &b.opts(1000)).expect_err("chunk");
    assert!(e.to_string().contains("chunk size"), "{e}");
    let bz = b"BZh91AY&SY\x00\x00\x00";
    let e = Image::open(b.file("x.bz2", bz), None).err().expect("bzip2");
    assert!(e.to_string().contains("bzip2"), "{e}");
}

/// Issue 37, finding 7: a compressed sparse image whose one FILL chunk claims about 2^64
/// bytes (blocks of 4 GiB - 512, 2^32 - 1 of them) in 50-odd bytes. Past the board's flash it
/// is refused from its header, before any chunk is read; with room for it (a bound of
/// u64::MAX), the pre-pass goes past the FILL without expanding it (its CRC is combined),
/// so the check ends instead of running until the call's timeout.
#[test]
fn a_sparse_fill_claiming_two_to_the_64_bytes_is_never_expanded() {
    let bs: u32 = 0xFFFF_FE00;
    let blocks: u32 = u32::MAX;
    let mut img = Vec::new();
    img.extend(crate::image::magic::SPARSE_MAGIC);
    img.extend(1u16.to_le_bytes());
    img.extend(0u16.to_le_bytes());
    img.extend(28u16.to_le_bytes());
    img.extend(12u16.to_le_bytes());
    img.extend(bs.to_le_bytes());
    img.extend(blocks.to_le_bytes());
    img.extend(1u32.to_le_bytes()); // one chunk
    img.extend(0u32.to_le_bytes());
    img.extend(0xCAC2u16.to_le_bytes()); // FILL
    img.extend(0u16.to_le_bytes());
    img.extend(blocks.to_le_bytes());
    img.extend(16u32.to_le_bytes());
    img.extend(0xdead_beefu32.to_le_bytes());
    let gz = gzip(&img);
    assert!(gz.len() < 100, "{} bytes", gz.len());
    let b = Bench::new(1 << 20);
    let mut image = Image::open(b.file("fill.simg.gz", &gz), None).expect("open");
    let e = flash_quiet(&mut b.target(), &mut image, &b.opts(4096)).expect_err("too large");
    assert!(matches!(e, FlashError::ImageOverLimit { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("its sparse header declares 18446741.9 TB"),
        "{e}"
    );
    assert!(b.untouched());
    let mut image = Image::open(b.file("fill.simg.gz", &gz), None).expect("open");
    let r = image
        .check(&mut Control::none(), &SizeLimit::new(u64::MAX, "no bound"))
        .expect("checked without expanding");
    assert_eq!(image.logical_size(), Some(bs as u64 * blocks as u64));
    assert_eq!(r.image_bytes, bs as u64 * blocks as u64);
}

/// The FILL's CRC is combined, not computed over its bytes: a CRC32 chunk after FILLs of
/// several MiB (whole units, a remainder, a value that is not a byte repeated) agrees.
#[test]
fn a_compressed_sparse_fill_is_crc_checked_without_expansion() {
    let (img, _) = build_sparse(
        4096,
        &[
            TestChunk::Raw(pattern(4096, 3)),
            TestChunk::Fill(0x0102_0304, 769),
            TestChunk::Crc,
            TestChunk::Fill(0xdead_beef, 3),
            TestChunk::DontCare(2),
            TestChunk::Crc,
        ],
    );
    let b = Bench::new(8 << 20);
    let mut image = Image::open(b.file("f.simg.gz", &gzip(&img)), None).expect("open");
    image
        .check(&mut Control::none(), &SizeLimit::new(8 << 20, "test"))
        .expect("the combined CRC matches");
    let (bad, _) = build_sparse(
        4096,
        &[TestChunk::Fill(0x0102_0304, 300), TestChunk::BadCrc],
    );
    let mut image = Image::open(b.file("b.simg.gz", &gzip(&bad)), None).expect("open");
    let e = image
        .check(&mut Control::none(), &SizeLimit::new(8 << 20, "test"))
        .expect_err("bad crc");
    assert!(matches!(e, FlashError::SparseCrc { .. }), "{e}");
}

/// A compressed raw image is decompressed only up to the bound: a zstd stream of 64 MiB
/// of zeros against a bound of 4 MiB stops there, having read a small part of the file.
#[test]
fn a_compressed_stream_stops_at_the_bound() {
    let img = vec![0u8; 64 << 20];
    let b = Bench::new(1 << 20);
    let mut image = Image::open(b.file("z.img.zst", &zstd(&img)), None).expect("open");
    let e = image
        .check(
            &mut Control::none(),
            &SizeLimit::new(4 << 20, "flash.max_image_gib"),
        )
        .expect_err("over");
    let msg = e.to_string();
    assert!(
        msg.starts_with("the image is larger than 4.2 MB, the most flash.max_image_gib allows"),
        "{msg}"
    );
}

/// Cancel reaches the open: a sparse file of many small chunks is walked with the flag
/// read every few thousand headers.
#[test]
fn a_raised_flag_stops_the_sparse_walk_at_open() {
    let chunks: Vec<TestChunk> = (0..10_000).map(|_| TestChunk::DontCare(1)).collect();
    let (img, _) = build_sparse(512, &chunks);
    let b = Bench::new(8 << 20);
    assert!(Image::open(b.file("many.simg", &img), None).is_ok());
    let flag = AtomicBool::new(true);
    let mut sink = |_p: Progress| {};
    let ctl = Control::new(&mut sink, &flag);
    let e = Image::open_with(b.file("many.simg", &img), None, &ctl)
        .err()
        .expect("cancelled");
    assert!(matches!(e, FlashError::Cancelled { .. }), "{e}");
}

/// Issue 37: a cancel while the decoding thread walks a long run of chunks without data
/// (here two million empty DONT_CARE chunks between two RAW ones) stops the write there:
/// the writer waits for the next chunk in slices and looks at its flag, and its stop
/// raises the stream's own, so the walk ends too. Before, the writer saw the flag only
/// once the walk had produced the next chunk (at image offset 11 × 4096).
#[test]
fn cancel_while_the_decoder_walks_a_long_gap_stops_there() {
    let mut chunks = vec![TestChunk::Raw(pattern(4096, 1))];
    chunks.extend((0..2_000_000).map(|_| TestChunk::DontCare(0)));
    chunks.push(TestChunk::DontCare(10));
    chunks.push(TestChunk::Raw(pattern(4096, 2)));
    let (img, _) = build_sparse(4096, &chunks);
    let b = Bench::new(1 << 20);
    let cancel = AtomicBool::new(false);
    let mut progress = |p: Progress| {
        if p.phase == Phase::Write && p.done > 0 {
            cancel.store(true, Ordering::Relaxed);
        }
    };
    let mut image = Image::open(b.file("gap.simg", &img), None).expect("open");
    let e = flash(
        &mut b.target(),
        &mut image,
        &b.opts(4096),
        &mut Control::new(&mut progress, &cancel),
    )
    .expect_err("cancelled");
    match &e {
        FlashError::Cancelled {
            phase,
            at,
            bytes_written,
            ..
        } => {
            assert_eq!(*phase, Phase::Write);
            assert_eq!(*bytes_written, 4096, "{e}");
            assert_eq!(
                *at, 4096,
                "stopped in the gap, not at the next RAW chunk: {e}"
            );
        }
        other => panic!("{other}"),
    }
}

/// Issue 37: a compressed stream that consumes input without producing output (empty gzip
/// members) keeps the decoder inside one read until output comes; with a raised stop flag
/// the read fails at its first input buffer instead (the check then reports the cancel).
#[test]
fn a_raised_stop_flag_fails_the_decoder_s_read() {
    let member = gzip(b"");
    let body: Vec<u8> = member
        .iter()
        .copied()
        .cycle()
        .take(member.len() * 1000)
        .collect();
    let b = Bench::new(1 << 20);
    let file = std::sync::Arc::new(b.file("empty.img.gz", &body));
    let stop = std::sync::Arc::new(AtomicBool::new(true));
    let mut d = crate::image::decompress::Decoded::counted(
        file.clone(),
        Compression::Gzip,
        None,
        Some(stop),
    )
    .expect("decoder");
    let e = crate::image::decompress::read_full(&mut d, &mut [0u8; 16]).expect_err("stopped");
    assert_eq!(e.to_string(), crate::image::decompress::STOPPED);
    // Without the flag the same stream reads to its (empty) end.
    let mut d = crate::image::decompress::Decoded::counted(file, Compression::Gzip, None, None)
        .expect("decoder");
    assert_eq!(
        crate::image::decompress::read_full(&mut d, &mut [0u8; 16]).expect("read"),
        0
    );
}

/// At open: finding a compressed image's layout decodes its first bytes, which empty gzip
/// members may put after gigabytes of input; the shared flag stops that read.
#[test]
fn a_shared_flag_stops_the_layout_probe_at_open() {
    let member = gzip(b"");
    let mut body: Vec<u8> = member
        .iter()
        .copied()
        .cycle()
        .take(member.len() * 1000)
        .collect();
    body.extend(gzip(&[0u8; 4096]));
    let b = Bench::new(1 << 20);
    let file = b.file("late.img.gz", &body);
    // Raised before the call: nothing in the open looks at the flag before the probe's
    // decoder reads, so only the decoder's own look stops it.
    let flag = std::sync::Arc::new(AtomicBool::new(true));
    let mut sink = |_p: Progress| {};
    let ctl = Control::with_flag(&mut sink, flag);
    let e = Image::open_with(file, None, &ctl).err().expect("stopped");
    assert!(matches!(e, FlashError::Cancelled { .. }), "{e}");
}

/// A loader whose reads from `from_lba` on do not show what it wrote: a uniform `fill`
/// (the stock RK3588 loader: 0xCC past 32 MiB), or, without one, what the disk held when
/// the target was made (stale). Writes always land.
struct UnsoundReads {
    inner: FileTarget,
    from_lba: u64,
    fill: Option<u8>,
    snapshot: Vec<u8>,
}

impl UnsoundReads {
    fn new(b: &Bench, from_lba: u64, fill: Option<u8>) -> UnsoundReads {
        UnsoundReads {
            inner: b.target(),
            from_lba,
            fill,
            snapshot: b.disk(),
        }
    }
}

impl BlockTarget for UnsoundReads {
    fn block_size(&self) -> u32 {
        self.inner.block_size()
    }
    fn capacity_blocks(&self) -> u64 {
        self.inner.capacity_blocks()
    }
    fn max_transfer_blocks(&self) -> u32 {
        self.inner.max_transfer_blocks()
    }
    fn write_blocks(&mut self, lba: u64, data: &[u8]) -> Result<(), TargetError> {
        self.inner.write_blocks(lba, data)
    }
    fn read_blocks(&mut self, lba: u64, buf: &mut [u8]) -> Result<(), TargetError> {
        self.inner.read_blocks(lba, buf)?;
        for (k, block) in buf.chunks_mut(512).enumerate() {
            let at = lba + k as u64;
            if at >= self.from_lba {
                match self.fill {
                    Some(f) => block.fill(f),
                    None => {
                        let o = at as usize * 512;
                        block.copy_from_slice(&self.snapshot[o..o + 512]);
                    }
                }
            }
        }
        Ok(())
    }
}

#[test]
fn reads_that_do_not_follow_writes_are_found_and_never_taken_for_a_bad_write() {
    // 1 MiB in 64 KiB chunks; the loader's reads go wrong from LBA 1032 (512 KiB + 4 KiB,
    // inside the ninth chunk). Before issue 41 this was a VerifyMismatch of eight chunks.
    let img = pattern(1 << 20, 21);
    for fill in [Some(0xCC), None] {
        let b = Bench::new(2 << 20);
        let mut t = UnsoundReads::new(&b, 1032, fill);
        let mut image = Image::open(b.file("u.img", &img), None).expect("open");
        let r = flash_quiet(&mut t, &mut image, &b.opts(64 << 10))
            .unwrap_or_else(|e| panic!("{fill:?}: a good write reported bad: {e}"));
        let v = r.verify.expect("verify");
        assert_eq!(v.verification(), "partial", "{v:?}");
        assert_eq!(v.reads_unsound_from_lba, Some(1032));
        assert!(v.limit_found_now);
        assert_eq!(v.verified_bytes, (512 << 10) + 4096, "{v:?}");
        assert_eq!(v.verified_bytes + v.unverified_bytes, 1 << 20);
        assert_eq!(v.fill, fill.or(Some(FILL)), "the first wrong read's fill");
        // The probe left the image's bytes on the disk.
        assert_eq!(b.disk(), expect_disk(b.capacity, &[(0, &img)]), "{fill:?}");
    }
}

#[test]
fn a_known_unsound_limit_is_neither_read_for_resume_nor_for_verification() {
    let img = pattern(1 << 20, 22);
    let b = Bench::new(2 << 20);
    let mut image = Image::open(b.file("k.img", &img), None).expect("open");
    let r = flash_quiet(&mut b.target(), &mut image, &b.opts(64 << 10)).expect("first");
    assert_eq!(r.verify.expect("verify").verification(), "read_back");
    // The same image again through a stale loader whose reads past LBA 1024 show what the
    // disk held (the image): equal bytes, but not a sound read, so not a reason to skip.
    let mut t = UnsoundReads::new(&b, 1024, None);
    let mut o = b.opts(64 << 10);
    o.reads_unsound_from_lba = Some(1024);
    let mut image = Image::open(b.file("k.img", &img), None).expect("open");
    let r = flash_quiet(&mut t, &mut image, &o).expect("again");
    assert_eq!(
        (r.write.chunks_skipped, r.write.chunks_written),
        (8, 8),
        "only the chunks below the limit are skipped on a read"
    );
    let v = r.verify.expect("verify");
    assert_eq!(
        (v.chunks, v.verified_bytes, v.unverified_bytes),
        (0, 0, 512 << 10)
    );
    assert_eq!(v.verification(), "none");
    assert!(!v.limit_found_now);
}

#[test]
fn a_cut_inside_a_chunk_keeps_what_its_acknowledged_transfers_wrote() {
    // 1 MiB chunks of sixteen 64 KiB transfers: the 21st write fails, so the second chunk
    // had four transfers acknowledged (256 KiB). Before issue 41 the resume rewrote that
    // whole chunk (1 MiB written); now it reads the 256 KiB back and writes the rest.
    let img = pattern(2 << 20, 23);
    let b = Bench::new(4 << 20);
    let mut t = Flaky {
        inner: b.target(),
        writes: 0,
        fail_at: Some(21),
        corrupt_lba: None,
    };
    let mut image = Image::open(b.file("p.img", &img), None).expect("open");
    let e = flash_quiet(&mut t, &mut image, &b.opts(1 << 20)).expect_err("cut");
    assert!(
        matches!(
            e,
            FlashError::Write {
                lba: 2560,
                bytes_written: 1_310_720,
                ..
            }
        ),
        "{e}"
    );
    let mut image = Image::open(b.file("p.img", &img), None).expect("open");
    let r = flash_quiet(&mut b.target(), &mut image, &b.opts(1 << 20)).expect("resume");
    assert_eq!(r.write.bytes_written, 768 << 10, "{:?}", r.write);
    assert_eq!(r.write.bytes_skipped, (1 << 20) + (256 << 10));
    assert_eq!(r.write.ranges, vec![(2560, 4096)]);
    assert_eq!(r.verify.expect("verify").verification(), "read_back");
    assert_eq!(b.disk(), expect_disk(b.capacity, &[(0, &img)]));
    // A prefix the board no longer holds is written again, whole.
    let mut t = Flaky {
        inner: b.target(),
        writes: 0,
        fail_at: Some(21),
        corrupt_lba: None,
    };
    let mut o = b.opts(1 << 20);
    o.resume = false;
    let mut image = Image::open(b.file("p.img", &img), None).expect("open");
    flash_quiet(&mut t, &mut image, &o).expect_err("cut again");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&b.disk)
        .expect("disk");
    f.write_all_at(b"other", (1 << 20) + 10)
        .expect("poke the prefix");
    let mut image = Image::open(b.file("p.img", &img), None).expect("open");
    let r = flash_quiet(&mut b.target(), &mut image, &b.opts(1 << 20)).expect("resume");
    assert_eq!(r.write.bytes_written, 1 << 20, "{:?}", r.write);
    assert_eq!(b.disk(), expect_disk(b.capacity, &[(0, &img)]));
}
