//! The mask ROM's download (`rkdeveloptool db`): vendor requests 0x40/0x0C with wIndex
//! 0x471 (DDR init) or 0x472 (the usbplug loader) carry one image in 4096-byte chunks,
//! the last shorter, with the CRC-CCITT of the image appended big-endian
//! (`RKComm.cpp RKU_DeviceRequest`). A chunk shorter than 4096 ends the image.

use crate::crc::{crc_ccitt, p_rc4, rc4_len};
use crate::loader::USBPLUG_MARKER;

pub const REQUEST_TYPE: u8 = 0x40;
pub const REQUEST: u8 = 0x0C;
pub const CHUNK: usize = 4096;
/// Bigger than any real DDR blob or usbplug; what arrives beyond it is refused.
pub const MAX_IMAGE: usize = 4 << 20;

/// A whole image received.
#[derive(Debug, PartialEq, Eq)]
pub struct Image {
    pub index: u16,
    pub data: Vec<u8>,
}

#[derive(Debug, PartialEq, Eq)]
pub enum DownloadError {
    Crc {
        index: u16,
        got: u16,
        computed: u16,
        len: usize,
    },
    TooShort {
        index: u16,
        len: usize,
    },
    TooLarge {
        index: u16,
    },
}

impl std::fmt::Display for DownloadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DownloadError::Crc {
                index,
                got,
                computed,
                len,
            } => write!(
                f,
                "0x{index:03x} CRC-CCITT mismatch: got 0x{got:04x}, computed 0x{computed:04x} over {len} bytes"
            ),
            DownloadError::TooShort { index, len } => write!(
                f,
                "0x{index:03x} image of {len} bytes has no room for its 2-byte CRC-CCITT"
            ),
            DownloadError::TooLarge { index } => write!(
                f,
                "0x{index:03x} image larger than {MAX_IMAGE} bytes: dropped (a chunk shorter than {CHUNK} bytes ends an image)"
            ),
        }
    }
}

/// Chunks of the image in progress.
#[derive(Default)]
pub struct Download {
    index: u16,
    buf: Vec<u8>,
    overflow: bool,
}

/// What one chunk did.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    More,
    /// An image of another wIndex began before the previous one ended; its bytes are gone.
    Restarted {
        dropped: usize,
    },
    Done(Result<Image, DownloadError>),
}

impl Download {
    pub fn push(&mut self, index: u16, chunk: &[u8]) -> Step {
        let mut restarted = None;
        if !self.buf.is_empty() && index != self.index {
            restarted = Some(self.buf.len());
            self.buf.clear();
            self.overflow = false;
        }
        self.index = index;
        // rkdeveloptool's extra 1-byte packet after an image that filled its last chunk.
        let pend = chunk.len() == 1 && !self.buf.is_empty() && self.buf.len().is_multiple_of(CHUNK);
        if !pend {
            if self.buf.len() + chunk.len() > MAX_IMAGE {
                self.overflow = true;
            } else {
                self.buf.extend_from_slice(chunk);
            }
        }
        if chunk.len() == CHUNK {
            return match restarted {
                Some(dropped) => Step::Restarted { dropped },
                None => Step::More,
            };
        }
        let data = std::mem::take(&mut self.buf);
        if std::mem::take(&mut self.overflow) {
            return Step::Done(Err(DownloadError::TooLarge { index }));
        }
        Step::Done(check(index, data))
    }
}

fn check(index: u16, mut data: Vec<u8>) -> Result<Image, DownloadError> {
    if data.len() < 2 {
        return Err(DownloadError::TooShort {
            index,
            len: data.len(),
        });
    }
    let n = data.len() - 2;
    let got = u16::from_be_bytes([data[n], data[n + 1]]);
    let computed = crc_ccitt(&data[..n]);
    if got != computed {
        return Err(DownloadError::Crc {
            index,
            got,
            computed,
            len: n,
        });
    }
    data.truncate(n);
    Ok(Image { index, data })
}

/// Whether a 0x472 image is one the virtual ROM can start: RC4-decoded as the packer
/// scrambled it, it begins with the vboard usbplug marker.
pub fn is_usbplug(image: &[u8]) -> bool {
    let mut head = image[..image.len().min(64)].to_vec();
    let n = rc4_len(image.len()).min(head.len() as u16);
    p_rc4(&mut head, n);
    head.starts_with(USBPLUG_MARKER)
}

/// How rkdeveloptool cuts an image into control transfers (for tests).
#[cfg(test)]
pub fn host_chunks(image: &[u8]) -> Vec<Vec<u8>> {
    let mut data = image.to_vec();
    let mut pend = false;
    match data.len() % CHUNK {
        4095 => data.push(0),
        4094 => pend = true,
        _ => {}
    }
    let crc = crc_ccitt(&data);
    data.extend(crc.to_be_bytes());
    let mut out: Vec<Vec<u8>> = data.chunks(CHUNK).map(|c| c.to_vec()).collect();
    if pend {
        out.push(vec![0]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loader::{Variant, build, parse};

    fn feed(d: &mut Download, index: u16, chunks: Vec<Vec<u8>>) -> Vec<Step> {
        chunks.iter().map(|c| d.push(index, c)).collect()
    }

    #[test]
    fn every_size_class_arrives_whole() {
        for len in [1usize, 100, 4094, 4095, 4096, 8192, 10240, 12286] {
            let image: Vec<u8> = (0..len).map(|i| (i * 31) as u8).collect();
            let mut d = Download::default();
            let steps = feed(&mut d, 0x472, host_chunks(&image));
            let last = steps.last().expect("a step");
            let Step::Done(Ok(img)) = last else {
                panic!("len {len}: {steps:?}")
            };
            // 4095: rkdeveloptool pads one zero byte before the CRC, the ROM keeps it.
            assert!(img.data.starts_with(&image), "len {len}");
            assert!(img.data.len() - image.len() <= 1);
            assert!(steps[..steps.len() - 1].iter().all(|s| *s == Step::More));
        }
    }

    #[test]
    fn a_corrupted_chunk_fails_the_crc() {
        let image = vec![7u8; 9000];
        let mut chunks = host_chunks(&image);
        chunks[1][5] ^= 1;
        let mut d = Download::default();
        let steps = feed(&mut d, 0x471, chunks);
        let Some(Step::Done(Err(e))) = steps.last() else {
            panic!("{steps:?}")
        };
        assert!(e.to_string().contains("CRC-CCITT mismatch"), "{e}");
    }

    #[test]
    fn make_loaders_usbplug_is_recognised_and_a_bad_one_is_not() {
        let good = parse(&build(Variant::Good)).expect("good");
        assert!(is_usbplug(&good[1].data));
        assert!(!is_usbplug(&good[0].data));
        let bad = parse(&build(Variant::BadPayload)).expect("bad payload");
        assert!(!is_usbplug(&bad[1].data));
    }

    #[test]
    fn a_new_index_mid_image_restarts() {
        let mut d = Download::default();
        assert_eq!(d.push(0x471, &[0u8; CHUNK]), Step::More);
        assert_eq!(
            d.push(0x472, &[0u8; CHUNK]),
            Step::Restarted { dropped: CHUNK }
        );
    }
}
