//! `blobs DIR`: the three files a test of the DDR + usbplug bring-up needs, recognised by
//! the virtual mask ROM only (real ones come from rkbin): `ddr.bin` (the DDR init blob,
//! sent as 0x471), `usbplug.bin` (the usbplug, sent as 0x472), both plain as rkbin ships
//! them (the host RC4-scrambles them on the way, as the packer does); and `spl_loader.bin`,
//! a packed boot file as `rkdeveloptool db` takes (`make-loader`'s), standing for rkbin's
//! `rk3588_spl_loader_*.bin`. Under `--read-back vbN=rk3588` the packed loader's Loader
//! answers 0xCC past 32 MiB; the pair's reads are sound everywhere.

use std::path::Path;

use crate::crc::{p_rc4, rc4_len};
use crate::loader::{self, DDR_MARKER, USBPLUG_MARKER};

/// After [`USBPLUG_MARKER`] in the plain usbplug of a pair: the virtual ROM starts a
/// Loader whose reads are sound (the vendor usbplug's rockusb, not the SPL loader's).
pub const SOUND_READS: &[u8] = b"SOUND-READS\0";

/// The plain DDR init blob (`ddr.bin`).
pub fn ddr() -> Vec<u8> {
    filler(DDR_MARKER, 6 * 1024 + 100)
}

/// The plain usbplug (`usbplug.bin`).
pub fn usbplug() -> Vec<u8> {
    let mut head = USBPLUG_MARKER.to_vec();
    head.extend_from_slice(SOUND_READS);
    filler(&head, 20 * 1024 + 300)
}

fn filler(head: &[u8], len: usize) -> Vec<u8> {
    let mut v = head.to_vec();
    v.extend((0..len.saturating_sub(head.len())).map(|i| (i * 13 + 5) as u8));
    v
}

/// Whether a 0x472 image as received (scrambled) is the pair's usbplug.
pub fn is_sound_usbplug(image: &[u8]) -> bool {
    let want = USBPLUG_MARKER.len() + SOUND_READS.len();
    let mut head = image[..image.len().min(64)].to_vec();
    let n = rc4_len(image.len()).min(head.len() as u16);
    p_rc4(&mut head, n);
    head.get(USBPLUG_MARKER.len()..want) == Some(SOUND_READS) && head.starts_with(USBPLUG_MARKER)
}

/// Whether a 0x471 image as received (scrambled) is a vboard DDR blob.
pub fn is_ddr(image: &[u8]) -> bool {
    let mut head = image[..image.len().min(64)].to_vec();
    let n = rc4_len(image.len()).min(head.len() as u16);
    p_rc4(&mut head, n);
    head.starts_with(DDR_MARKER)
}

/// Writes `ddr.bin`, `usbplug.bin` and `spl_loader.bin` into `dir` (created if missing).
pub fn write(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for (name, bytes) in [
        ("ddr.bin", ddr()),
        ("usbplug.bin", usbplug()),
        ("spl_loader.bin", loader::build(loader::Variant::Good)),
    ] {
        let p = dir.join(name);
        std::fs::write(&p, bytes).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rockusb::maskrom::is_usbplug;

    fn scrambled(mut v: Vec<u8>) -> Vec<u8> {
        let n = rc4_len(v.len());
        p_rc4(&mut v, n);
        v
    }

    #[test]
    fn the_pair_is_told_from_the_packed_loader() {
        let plug = scrambled(usbplug());
        assert!(is_usbplug(&plug), "the ROM starts it");
        assert!(is_sound_usbplug(&plug));
        assert!(is_ddr(&scrambled(ddr())));
        let packed = loader::parse(&loader::build(loader::Variant::Good)).expect("parses");
        assert!(is_ddr(&packed[0].data));
        assert!(is_usbplug(&packed[1].data));
        assert!(
            !is_sound_usbplug(&packed[1].data),
            "the SPL loader's reads stay as set"
        );
        // Sent plain (no RC4), neither is recognised: the ROM expects the packer's scrambling.
        assert!(!is_sound_usbplug(&usbplug()));
        assert!(!is_ddr(&ddr()));
    }

    #[test]
    fn write_puts_three_files() {
        let dir = std::env::temp_dir().join(format!("vboard-blobs-{}", std::process::id()));
        write(&dir).expect("writes");
        for n in ["ddr.bin", "usbplug.bin", "spl_loader.bin"] {
            assert!(dir.join(n).metadata().expect(n).len() > 1000, "{n}");
        }
        assert!(loader::parse(&std::fs::read(dir.join("spl_loader.bin")).expect("read")).is_ok());
        std::fs::remove_dir_all(&dir).ok();
    }
}
