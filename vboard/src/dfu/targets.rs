//! The DFU board's targets: its alt settings, laid end to end in the board's flash file
//! (`u-boot` the first 1/8, `rootfs` the rest), and the length of the last image
//! downloaded into each, which UPLOAD returns and which survives restarts
//! (`STATE_DIR/vbK.dfu.json`, `{"u-boot": N, "rootfs": M}`).

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::state::Targets;
use crate::board::lock;
use crate::flash::{Flash, SECTOR};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alt {
    pub name: &'static str,
    pub lba: u64,
    pub sectors: u64,
}

impl Alt {
    pub fn bytes(&self) -> u64 {
        self.sectors * SECTOR
    }
}

pub fn alts_for_flash(sectors: u64) -> Vec<Alt> {
    let first = sectors / 8;
    vec![
        Alt {
            name: "u-boot",
            lba: 0,
            sectors: first,
        },
        Alt {
            name: "rootfs",
            lba: first,
            sectors: sectors - first,
        },
    ]
}

/// Image lengths per alt setting, persisted; and which alts got an image since the last
/// boot (the boot log names those).
pub struct Images {
    path: PathBuf,
    names: Vec<&'static str>,
    lens: Mutex<Vec<u64>>,
    fresh: Mutex<BTreeSet<u8>>,
}

impl Images {
    /// Reads `path` if it exists (a missing or unreadable file: no images yet).
    pub fn open(path: &Path, alts: &[Alt]) -> Images {
        let saved: serde_json::Value = std::fs::read(path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or(serde_json::Value::Null);
        // A length beyond the alt's size (a file from a larger --flash-size) is cut.
        let lens = alts
            .iter()
            .map(|a| {
                let n = saved.get(a.name).and_then(|v| v.as_u64()).unwrap_or(0);
                n.min(a.bytes())
            })
            .collect();
        Images {
            path: path.to_path_buf(),
            names: alts.iter().map(|a| a.name).collect(),
            lens: Mutex::new(lens),
            fresh: Mutex::new(BTreeSet::new()),
        }
    }

    pub fn len(&self, alt: u8) -> u64 {
        lock(&self.lens).get(alt as usize).copied().unwrap_or(0)
    }

    /// Records alt's image length and saves the table.
    pub fn set(&self, alt: u8, len: u64) -> io::Result<()> {
        let json = {
            let mut lens = lock(&self.lens);
            if let Some(l) = lens.get_mut(alt as usize) {
                *l = len;
            }
            let map: serde_json::Map<String, serde_json::Value> = self
                .names
                .iter()
                .zip(lens.iter())
                .map(|(n, l)| (n.to_string(), serde_json::Value::from(*l)))
                .collect();
            serde_json::Value::Object(map).to_string()
        };
        if len > 0 {
            lock(&self.fresh).insert(alt);
        }
        std::fs::write(&self.path, json)
    }

    /// The alts with a new image since the last call (a boot consumes them).
    pub fn take_fresh(&self) -> Vec<u8> {
        std::mem::take(&mut *lock(&self.fresh))
            .into_iter()
            .collect()
    }
}

/// Reads `len` bytes at byte `offset` of the flash (whole sectors read, the excess cut).
pub fn read_bytes(flash: &Flash, offset: u64, buf: &mut [u8]) -> io::Result<()> {
    let first = offset / SECTOR;
    let skip = (offset % SECTOR) as usize;
    let span = (skip + buf.len()).next_multiple_of(SECTOR as usize);
    let mut tmp = vec![0u8; span];
    flash
        .read(first, &mut tmp)
        .map_err(|e| io::Error::other(e.to_string()))?;
    buf.copy_from_slice(&tmp[skip..skip + buf.len()]);
    Ok(())
}

/// Writes `data` at byte `offset`: partial sectors at either end are read, merged and
/// written whole (dfu-util sends whole 4 KiB blocks but the last; other hosts may not).
pub fn write_bytes(flash: &Flash, offset: u64, data: &[u8]) -> io::Result<()> {
    let first = offset / SECTOR;
    let skip = (offset % SECTOR) as usize;
    let span = (skip + data.len()).next_multiple_of(SECTOR as usize);
    let mut tmp = vec![0u8; span];
    if skip != 0 || span != data.len() {
        // Keep what the partial sectors held (the tail of a new image stays zero-padded
        // only where nothing was).
        read_bytes(flash, first * SECTOR, &mut tmp)?;
    }
    tmp[skip..skip + data.len()].copy_from_slice(data);
    flash
        .write(first, &tmp)
        .map_err(|e| io::Error::other(e.to_string()))
}

/// SHA-256 (hex) of `len` bytes at byte `offset`.
pub fn sha256_bytes(flash: &Flash, offset: u64, len: u64) -> io::Result<String> {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut done = 0u64;
    while done < len {
        let n = (len - done).min(buf.len() as u64) as usize;
        read_bytes(flash, offset + done, &mut buf[..n])?;
        h.update(&buf[..n]);
        done += n as u64;
    }
    Ok(hex::encode(h.finalize()))
}

/// The board's storage as the DFU state machine sees it.
pub struct FlashTargets<'a> {
    pub alts: &'a [Alt],
    pub flash: &'a Flash,
    pub images: &'a Images,
}

impl Targets for FlashTargets<'_> {
    fn capacity(&self, alt: u8) -> Option<u64> {
        self.alts.get(alt as usize).map(Alt::bytes)
    }

    fn image_len(&self, alt: u8) -> u64 {
        self.images.len(alt)
    }

    fn read(&self, alt: u8, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let a = self
            .alts
            .get(alt as usize)
            .ok_or_else(|| io::Error::other(format!("no alt setting {alt}")))?;
        read_bytes(self.flash, a.lba * SECTOR + offset, buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alts_split_the_flash() {
        let a = alts_for_flash(131072);
        assert_eq!((a[0].name, a[0].bytes()), ("u-boot", 8 << 20));
        assert_eq!(
            (a[1].name, a[1].lba, a[1].bytes()),
            ("rootfs", 16384, 56 << 20)
        );
    }

    #[test]
    fn image_lengths_persist_and_fresh_alts_are_taken_once() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("vb1.dfu.json");
        let alts = alts_for_flash(2048);
        let i = Images::open(&path, &alts);
        assert_eq!(i.len(1), 0);
        i.set(1, 1234).expect("save");
        assert_eq!(i.take_fresh(), [1]);
        assert!(i.take_fresh().is_empty());
        let again = Images::open(&path, &alts);
        assert_eq!((again.len(0), again.len(1)), (0, 1234));
        std::fs::write(&path, b"garbage").expect("write");
        assert_eq!(Images::open(&path, &alts).len(1), 0);
    }

    #[test]
    fn unaligned_writes_keep_the_neighbouring_bytes() {
        let dir = tempfile::tempdir().expect("tmp");
        let f = Flash::open(&dir.path().join("f"), 1 << 20).expect("flash");
        write_bytes(&f, 0, &[0x11; 1024]).expect("w");
        write_bytes(&f, 100, &[0x22; 10]).expect("w");
        let mut b = vec![0u8; 120];
        read_bytes(&f, 0, &mut b).expect("r");
        assert_eq!(&b[..100], &[0x11; 100]);
        assert_eq!(&b[100..110], &[0x22; 10]);
        assert_eq!(&b[110..], &[0x11; 10]);
        assert_eq!(
            sha256_bytes(&f, 100, 10).expect("hash"),
            hex::encode(<sha2::Sha256 as sha2::Digest>::digest([0x22u8; 10]))
        );
        write_bytes(&f, 4096, &[0x33; 700]).expect("w");
        let mut b = vec![0u8; 1024];
        read_bytes(&f, 4096, &mut b).expect("r");
        assert_eq!((&b[..700], &b[700..]), (&[0x33; 700][..], &[0u8; 324][..]));
    }
}
