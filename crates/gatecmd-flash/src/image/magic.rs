//! What a file is, from its first bytes (never from its name): the compression container,
//! and inside it the layout (raw bytes or Android sparse).

use serde::Serialize;

use crate::error::FlashError;

/// The compression around the image, streamed while writing (no temporary copy).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    /// Not compressed.
    None,
    /// gzip (`1f 8b`), one or more members.
    Gzip,
    /// Zstandard (`28 b5 2f fd`, or a skippable frame), one or more frames.
    Zstd,
    /// xz (`fd 37 7a 58 5a 00`), one or more streams.
    Xz,
}

impl Compression {
    /// The format's name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "uncompressed",
            Compression::Gzip => "gzip",
            Compression::Zstd => "zstd",
            Compression::Xz => "xz",
        }
    }
}

/// The image's layout once decompressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    /// The bytes of the disk, from offset 0.
    Raw,
    /// Android sparse (`3a ff 26 ed`): raw, fill, don't-care and CRC32 chunks.
    AndroidSparse,
}

impl Layout {
    /// The layout's name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Layout::Raw => "raw",
            Layout::AndroidSparse => "Android sparse",
        }
    }
}

/// How many leading bytes the detection looks at.
pub const PROBE_LEN: usize = 16;

/// `0xed26ff3a` little-endian.
pub const SPARSE_MAGIC: [u8; 4] = [0x3a, 0xff, 0x26, 0xed];

/// The container of `head` (the file's first bytes; fewer at a short file). Formats this
/// engine cannot stream are refused by name, so an agent is told to convert the file rather
/// than seeing its compressed bytes written as a disk image.
pub fn compression(head: &[u8]) -> Result<Compression, FlashError> {
    if head.starts_with(&[0x1f, 0x8b]) {
        return Ok(Compression::Gzip);
    }
    if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        return Ok(Compression::Zstd);
    }
    // A skippable frame (magic 0x184D2A50..=0x184D2A5F) may precede the data frames.
    if head.len() >= 4 && head[0] & 0xf0 == 0x50 && head[1..4] == [0x2a, 0x4d, 0x18] {
        return Ok(Compression::Zstd);
    }
    if head.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0x00]) {
        return Ok(Compression::Xz);
    }
    // bzip2: "BZh" + level 1-9 + the block magic 0x314159265359 (pi), so a raw image that
    // merely starts with "BZh" is not mistaken for one.
    if head.len() >= 10
        && head.starts_with(b"BZh")
        && (b'1'..=b'9').contains(&head[3])
        && head[4..10] == [0x31, 0x41, 0x59, 0x26, 0x53, 0x59]
    {
        return Err(FlashError::UnsupportedCompression { format: "bzip2" });
    }
    if head.starts_with(&[0x04, 0x22, 0x4d, 0x18]) {
        return Err(FlashError::UnsupportedCompression { format: "lz4" });
    }
    if head.starts_with(b"PK\x03\x04") {
        return Err(FlashError::UnsupportedCompression { format: "zip" });
    }
    Ok(Compression::None)
}

/// The layout of the (decompressed) image from its first bytes.
pub fn layout(head: &[u8]) -> Layout {
    if head.starts_with(&SPARSE_MAGIC) {
        Layout::AndroidSparse
    } else {
        Layout::Raw
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containers_are_known_by_their_magic() {
        assert_eq!(
            compression(&[0x1f, 0x8b, 8, 0]).ok(),
            Some(Compression::Gzip)
        );
        assert_eq!(
            compression(&[0x28, 0xb5, 0x2f, 0xfd, 0]).ok(),
            Some(Compression::Zstd)
        );
        assert_eq!(
            compression(&[0x5e, 0x2a, 0x4d, 0x18, 0]).ok(),
            Some(Compression::Zstd)
        );
        assert_eq!(compression(b"\xfd7zXZ\0\0\x04").ok(), Some(Compression::Xz));
        assert_eq!(compression(b"RKNS").ok(), Some(Compression::None));
        assert_eq!(compression(b"").ok(), Some(Compression::None));
        // "BZh" alone is a raw image that happens to start so.
        assert_eq!(compression(b"BZh9 not bzip2").ok(), Some(Compression::None));
        let e = compression(b"BZh91AY&SY....").expect_err("bzip2");
        assert!(e.to_string().contains("bzip2"), "{e}");
        assert!(compression(b"PK\x03\x04rest").is_err());
    }

    #[test]
    fn sparse_is_known_by_its_magic() {
        assert_eq!(
            layout(&[0x3a, 0xff, 0x26, 0xed, 1, 0]),
            Layout::AndroidSparse
        );
        assert_eq!(layout(&[0xed, 0x26, 0xff, 0x3a]), Layout::Raw);
    }
}
