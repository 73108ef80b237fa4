//! A DDR init blob and a usbplug sent as they come from rkbin (`rk3588_ddr_….bin`,
//! `rk3588_usbplug_v….bin`), as `xrock maskrom DDR USBPLUG` sends them: the DDR blob as
//! 0x471, 10 ms, the usbplug as 0x472, 10 ms (xboot/xrock `main.c`), each RC4-scrambled
//! with Rockchip's key first (xrock's default; the packer, `boot_merger`, stores the packed
//! loader's 0x471/0x472 entries scrambled the same way, so the mask ROM sees the same bytes
//! either way). The pair becomes a [`BootFile`] of two entries, which
//! [`download_boot`](crate::RockusbBoard::download_boot) sends like a packed loader's.

use std::fs::File;
use std::io::Read;

use crate::boot_file::{BootEntry, BootFile};
use crate::error::FlashError;

/// xrock's `usleep(10 * 1000)` after each image.
pub const PAIR_DELAY_MS: u32 = 10;
/// Real DDR blobs and usbplugs are well under a MiB.
const MAX_BLOB: u64 = 4 << 20;

/// Rockchip's RC4 key (rkdeveloptool `RKComm.cpp`/`crc.cpp P_RC4`, xrock `rc4.c`).
const KEY: [u8; 16] = [124, 78, 3, 4, 85, 5, 9, 7, 45, 44, 123, 56, 23, 13, 23, 17];

/// RC4 with Rockchip's key over `buf` (its own inverse).
pub fn rc4(buf: &mut [u8]) {
    let mut s = [0u8; 256];
    for (i, v) in s.iter_mut().enumerate() {
        *v = i as u8;
    }
    let mut j = 0usize;
    for i in 0..256 {
        j = (j + s[i] as usize + KEY[i & 0x0f] as usize) % 256;
        s.swap(i, j);
    }
    let (mut i, mut j) = (0usize, 0usize);
    for b in buf.iter_mut() {
        i = (i + 1) % 256;
        j = (j + s[i] as usize) % 256;
        s.swap(i, j);
        *b ^= s[(s[i] as usize + s[j] as usize) % 256];
    }
}

fn blob(what: &'static str, area: u16, name: &str, file: File) -> Result<BootEntry, FlashError> {
    let mut data = Vec::new();
    file.take(MAX_BLOB + 1)
        .read_to_end(&mut data)
        .map_err(|source| FlashError::ImageRead {
            what,
            source,
            written: "nothing was sent to the board".into(),
        })?;
    if data.is_empty() || data.len() as u64 > MAX_BLOB {
        return Err(FlashError::LoaderInvalid {
            reason: format!(
                "the {what} has {} bytes: a DDR blob or usbplug has 1 byte to {} MiB",
                data.len(),
                MAX_BLOB >> 20
            ),
        });
    }
    rc4(&mut data);
    Ok(BootEntry {
        area,
        name: name.to_string(),
        len: data.len(),
        data,
        delay_ms: PAIR_DELAY_MS,
    })
}

impl BootFile {
    /// The DDR init blob and the usbplug of a pair, read (each at most 4 MiB) and made
    /// ready to send: 0x471 then 0x472. `names` are the files' names, for the reports.
    pub fn from_pair(
        ddr: File,
        usbplug: File,
        names: (&str, &str),
    ) -> Result<BootFile, FlashError> {
        Ok(BootFile {
            chip: String::new(),
            entries: vec![
                blob("DDR blob", 0x471, names.0, ddr)?,
                blob("usbplug", 0x472, names.1, usbplug)?,
            ],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Seek, Write};

    fn file(bytes: &[u8]) -> File {
        let mut f = tempfile::tempfile().expect("tmp");
        f.write_all(bytes).expect("write");
        f.rewind().expect("rewind");
        f
    }

    #[test]
    fn a_pair_is_sent_ddr_first_scrambled_with_the_delays() {
        let ddr = b"DDR init".repeat(100);
        let plug = b"usbplug".repeat(300);
        let b =
            BootFile::from_pair(file(&ddr), file(&plug), ("ddr.bin", "usbplug.bin")).expect("pair");
        let areas: Vec<_> = b
            .entries
            .iter()
            .map(|e| (e.area, e.name.as_str()))
            .collect();
        assert_eq!(areas, [(0x471, "ddr.bin"), (0x472, "usbplug.bin")]);
        assert!(b.entries.iter().all(|e| e.delay_ms == PAIR_DELAY_MS));
        let mut back = b.entries[1].data.clone();
        assert_ne!(back, plug, "scrambled on the way");
        rc4(&mut back);
        assert_eq!(back, plug);
    }

    #[test]
    fn rc4_is_rockchips() {
        // The first keystream bytes of Rockchip's key (rkdeveloptool's P_RC4 on zeros).
        let mut z = [0u8; 4];
        rc4(&mut z);
        assert_eq!(z, [0x6e, 0x26, 0x2c, 0xf3]);
        rc4(&mut z);
        assert_eq!(z, [0; 4], "its own inverse");
    }

    #[test]
    fn an_empty_or_huge_blob_is_refused_before_sending() {
        let e = BootFile::from_pair(file(b""), file(b"x"), ("d", "u")).expect_err("empty");
        assert!(e.to_string().contains("0 bytes"), "{e}");
    }
}
