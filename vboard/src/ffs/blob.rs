//! FunctionFS blobs for any interface (the fastboot and DFU boards; the rockusb ones stay
//! in `ffs/mod.rs`): descriptors as a list of byte strings, the v2 header over a full- and
//! a high-speed set, the strings table, and the ep0 calls those functions need beyond the
//! rockusb ones (a reply that may be empty, the status stage of a request without data).

use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::path::Path;

use super::{DESCRIPTORS_MAGIC_V2, Ep0, HAS_FS_DESC, HAS_HS_DESC, STRINGS_MAGIC};

/// An interface descriptor; `string` is the 1-based index into [`strings`]' list.
pub fn interface(number: u8, alt: u8, endpoints: u8, class: [u8; 3], string: u8) -> Vec<u8> {
    vec![
        9, 4, number, alt, endpoints, class[0], class[1], class[2], string,
    ]
}

/// A bulk endpoint descriptor.
pub fn bulk_endpoint(address: u8, max_packet: u16) -> Vec<u8> {
    let mp = max_packet.to_le_bytes();
    vec![7, 5, address, 2, mp[0], mp[1], 0]
}

/// The v2 descriptors blob: the same descriptors for full and high speed except what
/// `for_speed` changes (bulk max packet 64 / 512). No `FUNCTIONFS_ALL_CTRL_RECIP`: these
/// functions only answer requests addressed to their own interface.
pub fn descriptors(for_speed: impl Fn(bool) -> Vec<Vec<u8>>) -> Vec<u8> {
    let (fs, hs) = (for_speed(false), for_speed(true));
    let mut body = Vec::new();
    body.extend((fs.len() as u32).to_le_bytes());
    body.extend((hs.len() as u32).to_le_bytes());
    for d in fs.iter().chain(hs.iter()) {
        body.extend(d);
    }
    let mut out = Vec::new();
    out.extend(DESCRIPTORS_MAGIC_V2.to_le_bytes());
    out.extend(((12 + body.len()) as u32).to_le_bytes());
    out.extend((HAS_FS_DESC | HAS_HS_DESC).to_le_bytes());
    out.extend(body);
    out
}

/// One language (en-US), `list` in order: string index k + 1 is `list[k]`.
pub fn strings(list: &[&str]) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend(0x0409u16.to_le_bytes());
    for s in list {
        body.extend(s.as_bytes());
        body.push(0);
    }
    let mut out = Vec::new();
    out.extend(STRINGS_MAGIC.to_le_bytes());
    out.extend(((16 + body.len()) as u32).to_le_bytes());
    out.extend((list.len() as u32).to_le_bytes());
    out.extend(1u32.to_le_bytes()); // lang_count
    out.extend(body);
    out
}

impl Ep0 {
    /// Opens `DIR/ep0` and writes these descriptors and strings.
    pub fn open_with(dir: &Path, descriptors: &[u8], strings: &[u8]) -> io::Result<Ep0> {
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(dir.join("ep0"))?;
        file.write_all(descriptors)?;
        file.write_all(strings)?;
        Ok(Ep0 { file })
    }

    /// The IN data stage of the pending SETUP, possibly empty (FunctionFS then sends a
    /// zero-length packet when the host asked for more). One write(2) even for no bytes:
    /// it is the write itself that completes the transfer.
    pub fn reply(&mut self, data: &[u8]) -> io::Result<()> {
        // SAFETY: a valid fd we own and a buffer that outlives the call.
        let n = unsafe { libc::write(self.file.as_raw_fd(), data.as_ptr().cast(), data.len()) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The status stage of an OUT request without data (FunctionFS delays it until
    /// userspace reads zero bytes from ep0).
    pub fn ack(&mut self) -> io::Result<()> {
        let mut none = [0u8; 0];
        // SAFETY: as above; a zero-length read.
        let n = unsafe { libc::read(self.file.as_raw_fd(), none.as_mut_ptr().cast(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_blobs_have_exact_lengths_and_counts() {
        let d = descriptors(|hs| {
            vec![
                interface(0, 0, 2, [0xff, 0x42, 0x03], 1),
                bulk_endpoint(0x81, if hs { 512 } else { 64 }),
                bulk_endpoint(0x02, if hs { 512 } else { 64 }),
            ]
        });
        assert_eq!(
            u32::from_le_bytes([d[4], d[5], d[6], d[7]]) as usize,
            d.len()
        );
        assert_eq!(u32::from_le_bytes([d[8], d[9], d[10], d[11]]), 1 | 2);
        assert_eq!((d[12], d[16]), (3, 3));
        assert_eq!(d.len(), 12 + 8 + 2 * 23);
        let s = strings(&["u-boot", "rootfs"]);
        assert_eq!(
            u32::from_le_bytes([s[4], s[5], s[6], s[7]]) as usize,
            s.len()
        );
        assert_eq!(u32::from_le_bytes([s[8], s[9], s[10], s[11]]), 2);
        assert!(s.ends_with(b"u-boot\0rootfs\0"));
    }
}
