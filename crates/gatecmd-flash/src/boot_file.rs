//! Rockchip boot files (the `*_loader*.bin` that `rkdeveloptool db` takes): a 102-byte
//! header, 57-byte entries (parsed with the `rockfile` crate) whose data are the 0x471
//! (DDR init) and 0x472 (usbplug) images, and a trailing CRC-32 of everything before it.
//! The whole file is read and checked before a byte is sent to the board, as rkdeveloptool
//! does (`RKBoot.cpp`, `CrcCheck`): a damaged loader is refused with the board untouched.

use std::fs::File;
use std::io::Read;

use rockfile::boot::{RkBootEntry, RkBootHeader, RkBootHeaderEntry};
use serde::Serialize;

use crate::error::FlashError;

/// `sizeof(STRUCT_RKBOOT_HEAD)`.
const HEADER_LEN: usize = 102;
/// `sizeof(STRUCT_RKBOOT_ENTRY)`.
const ENTRY_LEN: usize = 57;
/// Real loaders are well under a MiB; a larger file is not one.
const MAX_FILE: u64 = 16 << 20;
/// The longest delay an entry may ask for after its download.
const MAX_DELAY_MS: u32 = 10_000;

/// One image for the mask ROM.
#[derive(Debug, Clone, Serialize)]
pub struct BootEntry {
    /// 0x471 (DDR init, runs from SRAM) or 0x472 (the usbplug loader, runs from DDR).
    pub area: u16,
    /// The entry's name (UTF-16 in the file).
    pub name: String,
    /// The bytes, as stored (already scrambled by the packer where it does so).
    #[serde(skip)]
    pub data: Vec<u8>,
    /// Length of `data`.
    pub len: usize,
    /// Milliseconds to wait after sending it.
    pub delay_ms: u32,
}

/// A checked boot file.
#[derive(Debug, Clone, Serialize)]
pub struct BootFile {
    /// The header's chip field as text (e.g. `RK35`), as far as it is printable.
    pub chip: String,
    /// The 0x471 entries, then the 0x472 entries, in download order.
    pub entries: Vec<BootEntry>,
}

fn invalid(reason: impl Into<String>) -> FlashError {
    FlashError::LoaderInvalid {
        reason: reason.into(),
    }
}

impl BootFile {
    /// Reads and checks a boot file from an open handle.
    pub fn read(file: File) -> Result<BootFile, FlashError> {
        let mut bytes = Vec::new();
        file.take(MAX_FILE + 1)
            .read_to_end(&mut bytes)
            .map_err(|source| FlashError::ImageRead {
                what: "loader file",
                source,
                written: "nothing was sent to the board".into(),
            })?;
        if bytes.len() as u64 > MAX_FILE {
            return Err(invalid(format!(
                "it is larger than {} MiB, and loaders are a few hundred KiB",
                MAX_FILE >> 20
            )));
        }
        BootFile::parse(&bytes)
    }

    /// Checks and parses the bytes of a boot file.
    pub fn parse(bytes: &[u8]) -> Result<BootFile, FlashError> {
        if bytes.len() < HEADER_LEN + 4 {
            return Err(invalid(format!(
                "it has {} bytes, fewer than a boot header and its CRC",
                bytes.len()
            )));
        }
        let body = bytes.len() - 4;
        let stored = u32::from_le_bytes([
            bytes[body],
            bytes[body + 1],
            bytes[body + 2],
            bytes[body + 3],
        ]);
        let computed = crc32_rk(&bytes[..body]);
        if stored != computed {
            return Err(invalid(format!(
                "its trailing CRC-32 is 0x{stored:08x} but its content gives 0x{computed:08x}: the file is damaged or not a boot file"
            )));
        }
        let mut head = [0u8; HEADER_LEN];
        head.copy_from_slice(&bytes[..HEADER_LEN]);
        let h = RkBootHeader::from_bytes(&head)
            .ok_or_else(|| invalid("it does not start with the tag \"BOOT\" or \"LDR \""))?;
        let chip: String = h
            .supported_chip
            .iter()
            .filter(|b| b.is_ascii_graphic())
            .map(|&b| b as char)
            .collect();
        let mut entries = entries_of(bytes, body, &h.entry_471, 0x471)?;
        let e472 = entries_of(bytes, body, &h.entry_472, 0x472)?;
        if e472.is_empty() {
            return Err(invalid(
                "it has no 0x472 entry (the usbplug loader the mask ROM starts)",
            ));
        }
        entries.extend(e472);
        Ok(BootFile { chip, entries })
    }
}

fn entries_of(
    bytes: &[u8],
    body: usize,
    t: &RkBootHeaderEntry,
    area: u16,
) -> Result<Vec<BootEntry>, FlashError> {
    let mut out = Vec::new();
    if t.count == 0 {
        return Ok(out);
    }
    if (t.size as usize) < ENTRY_LEN {
        return Err(invalid(format!(
            "its 0x{area:x} entries are {} bytes, fewer than the format's {ENTRY_LEN}",
            t.size
        )));
    }
    for i in 0..t.count as usize {
        let at = t.offset as usize + i * t.size as usize;
        let Some(raw) = bytes
            .get(at..at + ENTRY_LEN)
            .filter(|_| at + ENTRY_LEN <= body)
        else {
            return Err(invalid(format!(
                "0x{area:x} entry #{i} lies outside the file"
            )));
        };
        let mut e = [0u8; ENTRY_LEN];
        e.copy_from_slice(raw);
        let e = RkBootEntry::from_bytes(&e);
        let name = String::from_utf16_lossy(&e.name)
            .trim_end_matches('\0')
            .to_string();
        let (start, len) = (e.data_offset as usize, e.data_size as usize);
        let Some(data) = bytes
            .get(start..start.saturating_add(len))
            .filter(|_| start + len <= body && len > 0)
        else {
            return Err(invalid(format!(
                "0x{area:x} entry {name:?}: its {len} bytes at offset {start} lie outside the file"
            )));
        };
        out.push(BootEntry {
            area,
            name,
            data: data.to_vec(),
            len,
            delay_ms: e.data_delay.min(MAX_DELAY_MS),
        });
    }
    Ok(out)
}

const fn crc32_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut n = 0;
    while n < 256 {
        let mut c = (n as u32) << 24;
        let mut k = 0;
        while k < 8 {
            c = if c & 0x8000_0000 != 0 {
                (c << 1) ^ 0x04C1_0DB7
            } else {
                c << 1
            };
            k += 1;
        }
        table[n] = c;
        n += 1;
    }
    table
}

static CRC32_TABLE: [u32; 256] = crc32_table();

/// rkdeveloptool's `CRC_32` (`crc.cpp`): poly 0x04C10DB7, MSB first, init 0, no final xor.
/// Not zlib's CRC-32.
pub(crate) fn crc32_rk(data: &[u8]) -> u32 {
    data.iter().fold(0u32, |acc, &b| {
        (acc << 8) ^ CRC32_TABLE[((acc >> 24) as u8 ^ b) as usize]
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A boot file as rkdeveloptool's packer lays it out: header, entries, data, CRC.
    pub fn build(e471: &[(&str, Vec<u8>)], e472: &[(&str, Vec<u8>)]) -> Vec<u8> {
        let n = e471.len() + e472.len();
        let data_start = HEADER_LEN + n * ENTRY_LEN;
        let mut head = vec![0u8; HEADER_LEN];
        head[0..4].copy_from_slice(b"BOOT");
        head[4..6].copy_from_slice(&(HEADER_LEN as u16).to_le_bytes());
        head[21..25].copy_from_slice(b"53KR");
        // 471 table at 25, 472 at 31, loader at 37: count, offset, size.
        head[25] = e471.len() as u8;
        head[26..30].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
        head[30] = ENTRY_LEN as u8;
        head[31] = e472.len() as u8;
        head[32..36].copy_from_slice(&((HEADER_LEN + e471.len() * ENTRY_LEN) as u32).to_le_bytes());
        head[36] = ENTRY_LEN as u8;
        let mut ents: Vec<u8> = Vec::new();
        let mut data: Vec<u8> = Vec::new();
        for (i, (name, d)) in e471.iter().chain(e472.iter()).enumerate() {
            let mut e = vec![0u8; ENTRY_LEN];
            e[0] = ENTRY_LEN as u8;
            e[1..5].copy_from_slice(&(if i < e471.len() { 1u32 } else { 2 }).to_le_bytes());
            for (k, c) in name.encode_utf16().take(20).enumerate() {
                e[5 + 2 * k..7 + 2 * k].copy_from_slice(&c.to_le_bytes());
            }
            e[45..49].copy_from_slice(&((data_start + data.len()) as u32).to_le_bytes());
            e[49..53].copy_from_slice(&(d.len() as u32).to_le_bytes());
            e[53..57].copy_from_slice(&1u32.to_le_bytes());
            ents.extend(e);
            data.extend(d);
        }
        let mut out = head;
        out.extend(ents);
        out.extend(data);
        let crc = crc32_rk(&out);
        out.extend(crc.to_le_bytes());
        out
    }

    #[test]
    fn a_boot_file_parses_in_download_order() {
        let b = build(
            &[("ddr", vec![1; 2048])],
            &[("usbplug", vec![2; 10240]), ("second", vec![3; 100])],
        );
        let f = BootFile::parse(&b).expect("valid");
        let names: Vec<_> = f
            .entries
            .iter()
            .map(|e| (e.area, e.name.as_str()))
            .collect();
        assert_eq!(
            names,
            vec![(0x471, "ddr"), (0x472, "usbplug"), (0x472, "second")]
        );
        assert_eq!(f.entries[1].data, vec![2; 10240]);
        assert_eq!(f.entries[0].delay_ms, 1);
        assert_eq!(f.chip, "RK35");
    }

    #[test]
    fn a_damaged_or_foreign_file_is_refused_before_sending() {
        let mut b = build(&[("ddr", vec![1; 100])], &[("usbplug", vec![2; 100])]);
        let last = b.len() - 1;
        b[last] ^= 1;
        let e = BootFile::parse(&b).expect_err("crc");
        assert!(e.to_string().contains("CRC-32"), "{e}");
        assert!(e.to_string().contains("nothing was sent"), "{e}");
        let e = BootFile::parse(b"short").expect_err("short");
        assert!(e.to_string().contains("fewer than"), "{e}");
        let no472 = build(&[("ddr", vec![1; 100])], &[]);
        let e = BootFile::parse(&no472).expect_err("no 472");
        assert!(e.to_string().contains("0x472"), "{e}");
        let mut notboot = build(&[("ddr", vec![1; 100])], &[("u", vec![1; 10])]);
        notboot[0] = b'X';
        let body = notboot.len() - 4;
        let crc = crc32_rk(&notboot[..body]);
        notboot[body..].copy_from_slice(&crc.to_le_bytes());
        let e = BootFile::parse(&notboot).expect_err("tag");
        assert!(e.to_string().contains("BOOT"), "{e}");
    }

    #[test]
    fn the_crc_is_rkdeveloptools() {
        // crc.cpp's CRC_32 bit by bit: poly 0x04C10DB7 (sic), MSB first, init 0, no xor.
        fn reference(data: &[u8]) -> u32 {
            let mut crc = 0u32;
            for &b in data {
                crc ^= (b as u32) << 24;
                for _ in 0..8 {
                    crc = if crc & 0x8000_0000 != 0 {
                        (crc << 1) ^ 0x04C1_0DB7
                    } else {
                        crc << 1
                    };
                }
            }
            crc
        }
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 37) as u8).collect();
        assert_eq!(crc32_rk(&data), reference(&data));
        assert_eq!(crc32_rk(b""), 0);
    }
}
