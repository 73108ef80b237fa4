//! `make-loader`: a Rockchip boot file (the `*_loader.bin` that `rkdeveloptool db` takes),
//! laid out as rkdeveloptool's packer writes one (`main.cpp mergeBoot`, `boot_merger.h`,
//! `RKBoot.h`), and the checks rkdeveloptool applies when it opens one (`RKBoot.cpp`).
//! Real loaders are vendor blobs; these carry marker payloads the virtual mask ROM knows.

use crate::crc::{crc32_rk, p_rc4, rc4_len};

/// "BOOT", little-endian (`RKBoot.cpp`: `uiTag != 0x544F4F42 && != 0x2052444C` → refused).
pub const TAG_BOOT: u32 = 0x544F_4F42;
const TAG_LDR: u32 = 0x2052_444C;
/// `sizeof(STRUCT_RKBOOT_HEAD)` and `sizeof(STRUCT_RKBOOT_ENTRY)` (both `#pragma pack(1)`).
pub const HEADER_LEN: usize = 102;
pub const ENTRY_LEN: usize = 57;
/// `saveEntry` aligns every entry's data to this.
const ENTRY_ALIGN: usize = 2048;
/// What the virtual mask ROM requires at the start of a decoded 0x472 image.
pub const USBPLUG_MARKER: &[u8] = b"VBOARD-USBPLUG\0";
pub const DDR_MARKER: &[u8] = b"VBOARD-DDR\0";

/// Entry types (`ENUM_RKBOOTENTRY`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryType {
    E471 = 1,
    E472 = 2,
    Loader = 4,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Variant {
    /// A loader the virtual board accepts.
    #[default]
    Good,
    /// The trailing CRC-32 is wrong: rkdeveloptool refuses the file before sending anything.
    BadCrc,
    /// A valid file whose 0x472 image is not a vboard usbplug: sent, then not started.
    BadPayload,
}

struct Entry {
    kind: EntryType,
    name: &'static str,
    data: Vec<u8>,
    delay_ms: u32,
}

fn payload(marker: &[u8], len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = marker.to_vec();
    // A filler that is not all zeros, so a dropped or reordered chunk changes the CRC.
    v.extend((0..len.saturating_sub(marker.len())).map(|i| (i * 7 + 3) as u8));
    v.truncate(len);
    v
}

fn align(n: usize, a: usize) -> usize {
    n.div_ceil(a) * a
}

/// The boot file's bytes.
pub fn build(variant: Variant) -> Vec<u8> {
    let usbplug = match variant {
        Variant::BadPayload => payload(b"NOT-A-USBPLUG\0", 10 * 1024),
        _ => payload(USBPLUG_MARKER, 10 * 1024),
    };
    let entries = [
        Entry {
            kind: EntryType::E471,
            name: "vboard-ddr",
            data: payload(DDR_MARKER, 2048),
            delay_ms: 1,
        },
        Entry {
            kind: EntryType::E472,
            name: "vboard-usbplug",
            data: usbplug,
            delay_ms: 0,
        },
        Entry {
            kind: EntryType::Loader,
            name: "FlashData",
            data: payload(b"VBOARD-FLASHDATA\0", 2048),
            delay_ms: 0,
        },
        Entry {
            kind: EntryType::Loader,
            name: "FlashBoot",
            data: payload(b"VBOARD-FLASHBOOT\0", 2048),
            delay_ms: 0,
        },
    ];
    let count = |k| entries.iter().filter(|e| e.kind == k).count() as u8;
    let (n471, n472, nldr) = (
        count(EntryType::E471),
        count(EntryType::E472),
        count(EntryType::Loader),
    );
    let mut out = Vec::new();
    // STRUCT_RKBOOT_HEAD
    out.extend(TAG_BOOT.to_le_bytes());
    out.extend((HEADER_LEN as u16).to_le_bytes());
    out.extend(0x0000_0100u32.to_le_bytes()); // version 1.00 (BCD major << 8 | minor)
    out.extend(0x0103_0000u32.to_le_bytes()); // MERGER_VERSION
    out.extend(2026u16.to_le_bytes());
    out.extend([12, 1, 0, 0, 0]); // month, day, hour, minute, second
    // getChipType("RK3588") falls through to convertChipType("3588").
    out.extend(u32::from_be_bytes(*b"3588").to_le_bytes());
    let off471 = HEADER_LEN as u32;
    let off472 = off471 + n471 as u32 * ENTRY_LEN as u32;
    let offldr = off472 + n472 as u32 * ENTRY_LEN as u32;
    for (n, off) in [(n471, off471), (n472, off472), (nldr, offldr)] {
        out.push(n);
        out.extend(off.to_le_bytes());
        out.push(ENTRY_LEN as u8);
    }
    out.push(0); // ucSignFlag
    out.push(0); // ucRc4Flag: 0 = the loader entries are RC4-scrambled (ul undoes nothing)
    out.extend([0u8; 57]);
    debug_assert_eq!(out.len(), HEADER_LEN);
    let mut data_off = HEADER_LEN + entries.len() * ENTRY_LEN;
    let mut blobs = Vec::new();
    for e in &entries {
        let size = align(e.data.len(), ENTRY_ALIGN);
        out.push(ENTRY_LEN as u8);
        out.extend((e.kind as u32).to_le_bytes());
        let mut name = [0u16; 20];
        for (slot, c) in name.iter_mut().zip(e.name.encode_utf16()) {
            *slot = c;
        }
        for c in name {
            out.extend(c.to_le_bytes());
        }
        out.extend((data_off as u32).to_le_bytes());
        out.extend((size as u32).to_le_bytes());
        out.extend(e.delay_ms.to_le_bytes());
        data_off += size;
        let mut blob = e.data.clone();
        blob.resize(size, 0);
        if e.kind == EntryType::Loader {
            // writeFile(fix = true): scrambled in 512-byte packets.
            for chunk in blob.chunks_mut(512) {
                let n = rc4_len(chunk.len());
                p_rc4(chunk, n);
            }
        } else {
            let n = rc4_len(blob.len());
            p_rc4(&mut blob, n);
        }
        blobs.push(blob);
    }
    for b in blobs {
        out.extend(b);
    }
    let mut crc = crc32_rk(&out);
    if variant == Variant::BadCrc {
        crc ^= 0xdead_beef;
    }
    out.extend(crc.to_le_bytes());
    out
}

/// One entry of a parsed boot file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedEntry {
    pub kind: u32,
    pub name: String,
    pub data: Vec<u8>,
    pub delay_ms: u32,
}

fn u32_at(b: &[u8], at: usize) -> Result<u32, String> {
    b.get(at..at + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or_else(|| format!("truncated at byte {at}"))
}

/// rkdeveloptool's checks (`CRKBoot::CRKBoot`): CRC-32 of all but the last 4 bytes equals
/// them, the tag is BOOT or "LDR "; then the entry tables, bounds-checked (rkdeveloptool
/// trusts them; this parser is for tests and says what is wrong).
pub fn parse(file: &[u8]) -> Result<Vec<ParsedEntry>, String> {
    if file.len() < HEADER_LEN + 4 {
        return Err(format!("{} bytes is shorter than a header", file.len()));
    }
    let body = &file[..file.len() - 4];
    let stored = u32_at(file, file.len() - 4)?;
    let computed = crc32_rk(body);
    if stored != computed {
        return Err(format!(
            "CRC-32 mismatch: stored 0x{stored:08x}, computed 0x{computed:08x}"
        ));
    }
    let tag = u32_at(file, 0)?;
    if tag != TAG_BOOT && tag != TAG_LDR {
        return Err(format!("tag 0x{tag:08x} is neither BOOT nor LDR"));
    }
    let mut entries = Vec::new();
    for table in [25usize, 31, 37] {
        let count = file[table] as usize;
        let off = u32_at(file, table + 1)? as usize;
        let size = file[table + 5] as usize;
        for i in 0..count {
            let at = off + i * size;
            let e = body
                .get(at..at + ENTRY_LEN)
                .ok_or_else(|| format!("entry {i} at {at} out of the file"))?;
            let kind = u32_at(e, 1)?;
            let name: String = (0..20)
                .map(|k| u16::from_le_bytes([e[5 + 2 * k], e[6 + 2 * k]]))
                .take_while(|&c| c != 0)
                .map(|c| char::from_u32(c as u32).unwrap_or('?'))
                .collect();
            let (doff, dsize, delay) = (
                u32_at(e, 45)? as usize,
                u32_at(e, 49)? as usize,
                u32_at(e, 53)?,
            );
            let data = body
                .get(doff..doff + dsize)
                .ok_or_else(|| format!("entry {name:?} data {doff}+{dsize} out of the file"))?
                .to_vec();
            entries.push(ParsedEntry {
                kind,
                name,
                data,
                delay_ms: delay,
            });
        }
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_good_loader_parses_with_rkdeveloptools_checks() {
        let f = build(Variant::Good);
        let e = parse(&f).expect("parses");
        let kinds: Vec<u32> = e.iter().map(|e| e.kind).collect();
        assert_eq!(kinds, [1, 2, 4, 4]);
        assert_eq!(e[1].name, "vboard-usbplug");
        let mut plug = e[1].data.clone();
        let n = rc4_len(plug.len());
        p_rc4(&mut plug, n);
        assert!(plug.starts_with(USBPLUG_MARKER));
        // No 471/472 size leaves 4094 or 4095 bytes in the last 4 KiB chunk (the cases
        // where rkdeveloptool pads or sends an extra packet).
        for x in &e[..2] {
            assert_eq!(x.data.len() % 2048, 0);
        }
    }

    #[test]
    fn bad_variants_fail_where_they_should() {
        let err = parse(&build(Variant::BadCrc)).expect_err("bad crc");
        assert!(err.contains("CRC-32 mismatch"), "{err}");
        let e = parse(&build(Variant::BadPayload)).expect("a valid file");
        let mut plug = e[1].data.clone();
        let n = rc4_len(plug.len());
        p_rc4(&mut plug, n);
        assert!(!plug.starts_with(USBPLUG_MARKER));
    }

    #[test]
    fn garbage_is_refused_with_a_reason() {
        assert!(parse(b"short").is_err());
        let mut junk = vec![0x55u8; 4096];
        let crc = crc32_rk(&junk);
        junk.extend(crc.to_le_bytes());
        let err = parse(&junk).expect_err("bad tag");
        assert!(err.contains("neither BOOT"), "{err}");
    }
}
