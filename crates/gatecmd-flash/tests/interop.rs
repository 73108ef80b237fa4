//! The engine against files made by the real tools (tests/fixtures/README.md): an Android
//! sparse image from `img2simg` and a bmap from `bmaptool create`, flashed to a file target.

use std::fs::File;
use std::path::Path;

use gatecmd_flash::{Control, FileTarget, FlashError, FlashOptions, Image, Layout, flash};

const BS: usize = 4096;
const FILL: u8 = 0xAA;

/// interop.img, as tests/fixtures/README.md describes it.
fn image() -> Vec<u8> {
    let mut img = vec![0u8; 64 * BS];
    for b in (0..4).chain(40..44) {
        for i in 0..BS {
            img[b * BS + i] = ((i * 131 + b * 17 + 7) % 251) as u8;
        }
    }
    for b in 4..20 {
        for (i, x) in img[b * BS..(b + 1) * BS].iter_mut().enumerate() {
            *x = [0x44, 0x33, 0x22, 0x11][i % 4];
        }
    }
    img
}

fn fixture(name: &str) -> File {
    File::open(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name),
    )
    .expect(name)
}

fn flash_to_disk(
    dir: &Path,
    mut img: Image,
) -> (Result<gatecmd_flash::FlashReport, FlashError>, Vec<u8>) {
    let disk = dir.join("disk");
    std::fs::write(&disk, vec![FILL; 1 << 20]).expect("disk");
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&disk)
        .expect("open");
    let mut t = FileTarget::new(f, 1 << 20).expect("target");
    let mut o = FlashOptions::new("interop", dir.join("state"));
    o.chunk_size = 64 << 10;
    let r = flash(&mut t, &mut img, &o, &mut Control::none());
    (r, std::fs::read(&disk).expect("read"))
}

#[test]
fn an_img2simg_sparse_image_expands_to_its_source() {
    let dir = tempfile::tempdir().expect("tmp");
    let img = Image::open(fixture("interop.simg"), None).expect("open");
    assert_eq!(img.info().layout, Layout::AndroidSparse);
    assert_eq!(img.logical_size(), Some(64 * BS as u64));
    let counts = img.info().sparse_chunks.expect("walked");
    assert_eq!((counts.raw, counts.fill, counts.dont_care), (2, 3, 0));
    let (r, disk) = flash_to_disk(dir.path(), img);
    let r = r.expect("flash");
    assert_eq!(
        r.write.bytes_written,
        64 * BS as u64,
        "FILL zero blocks are written too"
    );
    assert_eq!(
        &disk[..64 * BS],
        &image()[..],
        "the disk holds the source image"
    );
}

#[test]
fn a_bmaptool_bmap_writes_its_ranges_and_refuses_another_image() {
    let dir = tempfile::tempdir().expect("tmp");
    let raw = image();
    let p = dir.path().join("interop.img");
    std::fs::write(&p, &raw).expect("write");
    let img =
        Image::open(File::open(&p).expect("img"), Some(fixture("interop.bmap"))).expect("open");
    let bmap = img.info().bmap.clone().expect("bmap");
    assert_eq!(
        (bmap.version.as_str(), bmap.ranges, bmap.mapped_blocks),
        ("2.0", 2, 24)
    );
    let (r, disk) = flash_to_disk(dir.path(), img);
    let r = r.expect("flash");
    assert_eq!(r.check.expect("checked").ranges_checked, 2);
    for b in 0..64 {
        let want: &[u8] = if b < 20 || (40..44).contains(&b) {
            &raw[b * BS..(b + 1) * BS]
        } else {
            &[FILL; BS]
        };
        assert_eq!(&disk[b * BS..(b + 1) * BS], want, "block {b}");
    }
    // One byte changed in a mapped block: the bmap no longer matches; nothing is written.
    let mut other = raw.clone();
    other[41 * BS + 9] ^= 1;
    std::fs::write(&p, &other).expect("write");
    let img =
        Image::open(File::open(&p).expect("img"), Some(fixture("interop.bmap"))).expect("open");
    let (r, disk) = flash_to_disk(dir.path(), img);
    match r {
        Err(FlashError::BmapRangeMismatch { first, last, .. }) => {
            assert_eq!((first, last), (40, 43))
        }
        other => panic!("{:?}", other.map(|r| r.write)),
    }
    assert!(disk.iter().all(|&b| b == FILL), "something was written");
}
