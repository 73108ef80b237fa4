//! bmaptool's block map (`*.bmap`, XML): which blocks of a raw image hold data, each range
//! with its checksum. Format versions 1.0-1.3 (SHA-1, `sha1` attributes, `BmapFileSHA1`),
//! 1.4 and 2.x (`ChecksumType`, `chksum` attributes, `BmapFileChecksum`; bmaptool writes
//! SHA-256), as bmaptool's `BmapCopy.py` reads them.

use serde::Serialize;
use sha1::Sha1;
use sha2::{Digest, Sha256};

/// The hash of the ranges (and of the bmap file itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChecksumType {
    /// bmap 1.0-1.3, or `ChecksumType` sha1.
    Sha1,
    /// bmap 2.0 (bmaptool's default).
    Sha256,
}

impl ChecksumType {
    /// The algorithm's name.
    pub fn name(self) -> &'static str {
        match self {
            ChecksumType::Sha1 => "sha1",
            ChecksumType::Sha256 => "sha256",
        }
    }

    fn hex_len(self) -> usize {
        match self {
            ChecksumType::Sha1 => 40,
            ChecksumType::Sha256 => 64,
        }
    }

    /// A fresh hasher.
    pub fn hasher(self) -> RangeHasher {
        match self {
            ChecksumType::Sha1 => RangeHasher::Sha1(Sha1::new()),
            ChecksumType::Sha256 => RangeHasher::Sha256(Sha256::new()),
        }
    }
}

/// A running hash of one range.
pub enum RangeHasher {
    /// SHA-1.
    Sha1(Sha1),
    /// SHA-256.
    Sha256(Sha256),
}

impl RangeHasher {
    /// Adds bytes.
    pub fn update(&mut self, b: &[u8]) {
        match self {
            RangeHasher::Sha1(h) => h.update(b),
            RangeHasher::Sha256(h) => h.update(b),
        }
    }

    /// The digest.
    pub fn finish(self) -> Vec<u8> {
        match self {
            RangeHasher::Sha1(h) => h.finalize().to_vec(),
            RangeHasher::Sha256(h) => h.finalize().to_vec(),
        }
    }
}

/// One mapped range: blocks `first..=last`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BmapRange {
    /// First block.
    pub first: u64,
    /// Last block (inclusive).
    pub last: u64,
    /// The range's checksum, when the bmap gives one.
    pub checksum: Option<Vec<u8>>,
}

/// A parsed, validated bmap.
#[derive(Debug, Clone)]
pub struct Bmap {
    /// The `version` attribute.
    pub version: String,
    /// Bytes of the image it describes.
    pub image_size: u64,
    /// Bytes per block.
    pub block_size: u64,
    /// Blocks of the image.
    pub blocks_count: u64,
    /// Blocks the ranges map.
    pub mapped_blocks: u64,
    /// Hash of the ranges.
    pub checksum: ChecksumType,
    /// Sorted, disjoint ranges.
    pub ranges: Vec<BmapRange>,
    /// Whether the file carried its own checksum (and it was right).
    pub file_checksum_checked: bool,
}

/// What a caller sees of a bmap.
#[derive(Debug, Clone, Serialize)]
pub struct BmapSummary {
    /// Format version.
    pub version: String,
    /// Hash algorithm of the ranges.
    pub checksum: ChecksumType,
    /// Bytes per block.
    pub block_size: u64,
    /// Number of ranges.
    pub ranges: usize,
    /// Blocks mapped.
    pub mapped_blocks: u64,
    /// Ranges without a checksum (not checked before writing; still verified after).
    pub ranges_without_checksum: usize,
}

impl Bmap {
    /// Parses and validates the bmap text. The error says what was seen and where.
    pub fn parse(text: &str) -> Result<Bmap, String> {
        let doc = roxmltree::Document::parse(text).map_err(|e| format!("not XML: {e}"))?;
        let root = doc.root_element();
        if root.tag_name().name() != "bmap" {
            return Err(format!(
                "the root element is <{}>, expected <bmap>",
                root.tag_name().name()
            ));
        }
        let version = root
            .attribute("version")
            .ok_or("<bmap> has no version attribute")?
            .trim()
            .to_string();
        let (major, minor) = parse_version(&version)?;
        // BmapCopy.py: 1.4 and 2.x name their checksum type; 1.0-1.3 are SHA-1.
        let named = major >= 2 || (major == 1 && minor >= 4);
        if major > 2 {
            return Err(format!(
                "format version {version} is newer than this engine reads (1.0-1.4, 2.x)"
            ));
        }
        let child = |name: &str| root.children().find(|n| n.has_tag_name(name));
        let number = |name: &str| -> Result<u64, String> {
            let n = child(name).ok_or(format!("no <{name}> element"))?;
            let t = n.text().unwrap_or("").trim();
            t.parse::<u64>().map_err(|_| {
                format!(
                    "<{name}> is {t:?} at line {}, expected a whole number",
                    doc.text_pos_at(n.range().start).row
                )
            })
        };
        let image_size = number("ImageSize")?;
        let block_size = number("BlockSize")?;
        let blocks_count = number("BlocksCount")?;
        let mapped_blocks = number("MappedBlocksCount")?;
        let (checksum, range_attr, file_elem) = if named {
            let t = child("ChecksumType")
                .and_then(|n| n.text())
                .ok_or("no <ChecksumType> element (required from version 1.4)")?
                .trim()
                .to_ascii_lowercase();
            let c = match t.as_str() {
                "sha256" => ChecksumType::Sha256,
                "sha1" => ChecksumType::Sha1,
                other => {
                    return Err(format!(
                        "checksum type {other:?} is not one this engine computes (sha256, sha1)"
                    ));
                }
            };
            (c, "chksum", "BmapFileChecksum")
        } else {
            (ChecksumType::Sha1, "sha1", "BmapFileSHA1")
        };
        if block_size == 0 {
            return Err("<BlockSize> is 0".into());
        }
        if blocks_count != image_size.div_ceil(block_size) {
            return Err(format!(
                "<BlocksCount> is {blocks_count} but an image of {image_size} bytes has {} blocks of {block_size}",
                image_size.div_ceil(block_size)
            ));
        }
        let map = child("BlockMap").ok_or("no <BlockMap> element")?;
        let mut ranges = Vec::new();
        for r in map.children().filter(|n| n.has_tag_name("Range")) {
            let line = doc.text_pos_at(r.range().start).row;
            let t = r.text().unwrap_or("").trim();
            let (a, b) = match t.split_once('-') {
                Some((a, b)) => (a.trim(), b.trim()),
                None => (t, t),
            };
            let (Ok(first), Ok(last)) = (a.parse::<u64>(), b.parse::<u64>()) else {
                return Err(format!(
                    "<Range> {t:?} at line {line} is not FIRST-LAST or BLOCK"
                ));
            };
            if first > last || last >= blocks_count {
                return Err(format!(
                    "<Range> {first}-{last} at line {line} is outside the image's {blocks_count} blocks"
                ));
            }
            let checksum = match r.attribute(range_attr) {
                Some(h) => Some(decode_hex(h.trim(), checksum).map_err(|e| {
                    format!("<Range> {first}-{last} at line {line}: {range_attr} {e}")
                })?),
                None => None,
            };
            ranges.push(BmapRange {
                first,
                last,
                checksum,
            });
        }
        ranges.sort_by_key(|r| r.first);
        for w in ranges.windows(2) {
            if w[1].first <= w[0].last {
                return Err(format!(
                    "ranges {}-{} and {}-{} overlap",
                    w[0].first, w[0].last, w[1].first, w[1].last
                ));
            }
        }
        let counted: u64 = ranges.iter().map(|r| r.last - r.first + 1).sum();
        if counted != mapped_blocks {
            return Err(format!(
                "<MappedBlocksCount> is {mapped_blocks} but the ranges map {counted} blocks"
            ));
        }
        let file_checksum_checked = match child(file_elem).and_then(|n| n.text()) {
            Some(stored) => {
                check_file_checksum(text, stored.trim(), checksum)?;
                true
            }
            None => false,
        };
        Ok(Bmap {
            version,
            image_size,
            block_size,
            blocks_count,
            mapped_blocks,
            checksum,
            ranges,
            file_checksum_checked,
        })
    }

    /// Each range as image byte offsets `[start, end)`, the last clipped to the image size.
    pub fn byte_ranges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.ranges.iter().map(|r| {
            (
                r.first * self.block_size,
                ((r.last + 1) * self.block_size).min(self.image_size),
            )
        })
    }

    /// Bytes the ranges cover.
    pub fn mapped_bytes(&self) -> u64 {
        self.byte_ranges().map(|(a, b)| b - a).sum()
    }

    /// What a caller sees.
    pub fn summary(&self) -> BmapSummary {
        BmapSummary {
            version: self.version.clone(),
            checksum: self.checksum,
            block_size: self.block_size,
            ranges: self.ranges.len(),
            mapped_blocks: self.mapped_blocks,
            ranges_without_checksum: self.ranges.iter().filter(|r| r.checksum.is_none()).count(),
        }
    }
}

/// A bmap's own checksum error, kept apart so the caller can name it precisely.
pub const FILE_CHECKSUM_PREFIX: &str = "file checksum:";

/// bmaptool's check: the file's hash with the stored checksum's text replaced by zeros.
fn check_file_checksum(text: &str, stored: &str, c: ChecksumType) -> Result<(), String> {
    if stored.len() != c.hex_len() {
        return Err(format!(
            "the file's own {} checksum {stored:?} is not {} hex digits",
            c.name(),
            c.hex_len()
        ));
    }
    let Some(at) = text.find(stored) else {
        return Err("the file's own checksum could not be located in its text".into());
    };
    let mut bytes = text.as_bytes().to_vec();
    bytes[at..at + stored.len()].fill(b'0');
    let mut h = c.hasher();
    h.update(&bytes);
    let got = hex::encode(h.finish());
    if !got.eq_ignore_ascii_case(stored) {
        return Err(format!("{FILE_CHECKSUM_PREFIX}{stored}:{got}"));
    }
    Ok(())
}

fn parse_version(v: &str) -> Result<(u32, u32), String> {
    let mut it = v.split('.');
    let major = it.next().and_then(|s| s.parse().ok());
    let minor = it.next().map_or(Some(0), |s| s.parse().ok());
    match (major, minor) {
        (Some(a), Some(b)) => Ok((a, b)),
        _ => Err(format!("version {v:?} is not MAJOR.MINOR")),
    }
}

fn decode_hex(h: &str, c: ChecksumType) -> Result<Vec<u8>, String> {
    if h.len() != c.hex_len() {
        return Err(format!(
            "{h:?} is not a {} checksum ({} hex digits)",
            c.name(),
            c.hex_len()
        ));
    }
    hex::decode(h).map_err(|_| format!("{h:?} is not hexadecimal"))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A bmap as bmaptool 3.6 writes it (version 2.0, sha256), or as an older bmaptool
    /// (1.3, sha1), for `image` and the block ranges given; the file's own checksum is
    /// filled in as bmaptool does.
    pub fn write(image: &[u8], bs: u64, ranges: &[(u64, u64)], sha1: bool) -> String {
        let c = if sha1 {
            ChecksumType::Sha1
        } else {
            ChecksumType::Sha256
        };
        let zeros = "0".repeat(c.hex_len());
        let mut s = String::new();
        s.push_str("<?xml version=\"1.0\" ?>\n");
        s.push_str("<!-- This file contains the block map for an image file -->\n");
        s.push_str(&format!(
            "<bmap version=\"{}\">\n",
            if sha1 { "1.3" } else { "2.0" }
        ));
        s.push_str(&format!("    <ImageSize> {} </ImageSize>\n", image.len()));
        s.push_str(&format!("    <BlockSize> {bs} </BlockSize>\n"));
        s.push_str(&format!(
            "    <BlocksCount> {} </BlocksCount>\n",
            (image.len() as u64).div_ceil(bs)
        ));
        let mapped: u64 = ranges.iter().map(|(a, b)| b - a + 1).sum();
        s.push_str(&format!(
            "    <MappedBlocksCount> {mapped} </MappedBlocksCount>\n"
        ));
        if sha1 {
            s.push_str(&format!("    <BmapFileSHA1> {zeros} </BmapFileSHA1>\n"));
        } else {
            s.push_str("    <ChecksumType> sha256 </ChecksumType>\n");
            s.push_str(&format!(
                "    <BmapFileChecksum> {zeros} </BmapFileChecksum>\n"
            ));
        }
        s.push_str("    <BlockMap>\n");
        let attr = if sha1 { "sha1" } else { "chksum" };
        for &(a, b) in ranges {
            let start = (a * bs) as usize;
            let end = (((b + 1) * bs) as usize).min(image.len());
            let mut h = c.hasher();
            h.update(&image[start..end]);
            let range = if a == b {
                format!("{a}")
            } else {
                format!("{a}-{b}")
            };
            s.push_str(&format!(
                "        <Range {attr}=\"{}\"> {range} </Range>\n",
                hex::encode(h.finish())
            ));
        }
        s.push_str("    </BlockMap>\n</bmap>\n");
        let mut h = c.hasher();
        h.update(s.as_bytes());
        let own = hex::encode(h.finish());
        s.replacen(&zeros, &own, 1)
    }

    fn image(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 % 251) as u8).collect()
    }

    #[test]
    fn version_2_0_with_sha256_parses() {
        let img = image(10 * 4096 + 100);
        let text = write(&img, 4096, &[(0, 1), (4, 4), (9, 10)], false);
        let b = Bmap::parse(&text).expect("valid");
        assert_eq!(b.checksum, ChecksumType::Sha256);
        assert_eq!(b.blocks_count, 11);
        assert_eq!(b.mapped_blocks, 5);
        assert!(b.file_checksum_checked);
        let ranges: Vec<_> = b.byte_ranges().collect();
        // The last range stops at the image's end, not the block's.
        assert_eq!(
            ranges,
            vec![(0, 8192), (16384, 20480), (36864, 10 * 4096 + 100)]
        );
        assert_eq!(b.mapped_bytes(), 8192 + 4096 + 4096 + 100);
    }

    #[test]
    fn version_1_3_with_sha1_parses() {
        let img = image(8 * 1024);
        let text = write(&img, 1024, &[(2, 3)], true);
        let b = Bmap::parse(&text).expect("valid");
        assert_eq!(b.checksum, ChecksumType::Sha1);
        assert_eq!(b.ranges[0].checksum.as_ref().map(Vec::len), Some(20));
    }

    #[test]
    fn an_edited_bmap_fails_its_own_checksum() {
        let img = image(4 * 4096);
        let text = write(&img, 4096, &[(0, 1)], false);
        // Same length, other content: the file checksum no longer matches.
        let edited = text
            .replace("<Range chksum", "<Range  chksum")
            .replacen("    <B", "   <B", 1);
        let e = Bmap::parse(&edited).expect_err("edited");
        assert!(e.starts_with(FILE_CHECKSUM_PREFIX), "{e}");
    }

    #[test]
    fn inconsistent_bmaps_say_what_is_wrong() {
        let img = image(4 * 4096);
        let good = write(&img, 4096, &[(0, 1)], false);
        // Strip the file checksum so each edit below is judged on its own.
        let strip = |s: &str| {
            let a = s.find("<BmapFileChecksum>").expect("elem");
            let b = s.find("</BmapFileChecksum>").expect("end") + "</BmapFileChecksum>".len();
            format!("{}{}", &s[..a], &s[b..])
        };
        let base = strip(&good);
        let cases = [
            (
                base.replace("<BlocksCount> 4 ", "<BlocksCount> 5 "),
                "BlocksCount",
            ),
            (base.replace("> 0-1 <", "> 0-4 <"), "outside"),
            (
                base.replace("MappedBlocksCount> 2", "MappedBlocksCount> 3"),
                "MappedBlocksCount",
            ),
            (base.replace("version=\"2.0\"", "version=\"3.0\""), "newer"),
            (base.replace("sha256 </Ch", "md5 </Ch"), "md5"),
            ("<nope/>".to_string(), "<bmap>"),
            ("not xml".to_string(), "not XML"),
        ];
        for (text, want) in cases {
            let e = Bmap::parse(&text).expect_err(want);
            assert!(e.contains(want), "{want}: {e}");
        }
    }
}
