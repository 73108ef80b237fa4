//! FunctionFS (`linux/usb/functionfs.h`): the descriptor and string blobs written to `ep0`,
//! the 12-byte events read back from it, and the endpoint files. The rockusb interface is
//! class ff/06/05 with one bulk IN (`ep1`, 0x81) and one bulk OUT (`ep2`, 0x02) endpoint,
//! which is what rkdeveloptool's `InitializeUsb` looks for.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::Path;

use crate::rockusb::commands::Bulk;

pub mod blob;

const DESCRIPTORS_MAGIC_V2: u32 = 3;
const STRINGS_MAGIC: u32 = 2;
const HAS_FS_DESC: u32 = 1;
const HAS_HS_DESC: u32 = 2;
/// Device- (and other-) recipient control requests reach ep0: the mask ROM's vendor
/// request is addressed to the device, not to our interface.
const ALL_CTRL_RECIP: u32 = 64;

pub const EP_IN: u8 = 0x81;
pub const EP_OUT: u8 = 0x02;

fn interface() -> [u8; 9] {
    // bLength, INTERFACE, number, alt, 2 endpoints, class ff/06/05, iInterface 1
    [9, 4, 0, 0, 2, 0xff, 0x06, 0x05, 1]
}

fn endpoint(addr: u8, max_packet: u16) -> [u8; 7] {
    let mp = max_packet.to_le_bytes();
    [7, 5, addr, 2, mp[0], mp[1], 0]
}

/// The v2 descriptor blob: full-speed (64-byte) and high-speed (512-byte) sets.
pub fn descriptors() -> Vec<u8> {
    let mut body = Vec::new();
    body.extend(3u32.to_le_bytes()); // fs_count
    body.extend(3u32.to_le_bytes()); // hs_count
    for mp in [64u16, 512] {
        body.extend(interface());
        body.extend(endpoint(EP_IN, mp));
        body.extend(endpoint(EP_OUT, mp));
    }
    let mut out = Vec::new();
    out.extend(DESCRIPTORS_MAGIC_V2.to_le_bytes());
    out.extend(((12 + body.len()) as u32).to_le_bytes());
    out.extend((HAS_FS_DESC | HAS_HS_DESC | ALL_CTRL_RECIP).to_le_bytes());
    out.extend(body);
    out
}

/// One language (en-US), one string: the interface name.
pub fn strings(interface_name: &str) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend(0x0409u16.to_le_bytes());
    body.extend(interface_name.as_bytes());
    body.push(0);
    let mut out = Vec::new();
    out.extend(STRINGS_MAGIC.to_le_bytes());
    out.extend(((16 + body.len()) as u32).to_le_bytes());
    out.extend(1u32.to_le_bytes()); // str_count
    out.extend(1u32.to_le_bytes()); // lang_count
    out.extend(body);
    out
}

/// A control request (`struct usb_ctrlrequest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setup {
    pub request_type: u8,
    pub request: u8,
    pub value: u16,
    pub index: u16,
    pub length: u16,
}

impl Setup {
    pub fn is_in(&self) -> bool {
        self.request_type & 0x80 != 0
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Bind,
    Unbind,
    Enable,
    Disable,
    Setup(Setup),
    Suspend,
    Resume,
    Unknown(u8),
}

pub const EVENT_LEN: usize = 12;

/// `struct usb_functionfs_event`: the setup packet, then the type, then 3 pad bytes.
pub fn parse_event(b: &[u8; EVENT_LEN]) -> Event {
    let le = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
    match b[8] {
        0 => Event::Bind,
        1 => Event::Unbind,
        2 => Event::Enable,
        3 => Event::Disable,
        4 => Event::Setup(Setup {
            request_type: b[0],
            request: b[1],
            value: le(2),
            index: le(4),
            length: le(6),
        }),
        5 => Event::Suspend,
        6 => Event::Resume,
        t => Event::Unknown(t),
    }
}

/// Mounts FunctionFS instance `instance` (the part after `ffs.` of its configfs function)
/// at `dir` (created), replacing an earlier mount there. libc directly: the server's
/// `nix` feature set stays the only one in the workspace, so no shared crate is built twice.
pub fn mount(instance: &str, dir: &Path) -> Result<(), String> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    unmount(dir);
    let cstr = |b: &[u8]| CString::new(b).map_err(|_| format!("{}: NUL in a path", dir.display()));
    let (src, target, fstype) = (
        cstr(instance.as_bytes())?,
        cstr(dir.as_os_str().as_bytes())?,
        cstr(b"functionfs")?,
    );
    // SAFETY: NUL-terminated strings that outlive the call; no mount data.
    let rc = unsafe {
        libc::mount(
            src.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(format!(
            "mount -t functionfs {instance} {}: {}",
            dir.display(),
            io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// Detaches whatever is mounted at `dir` (best effort).
pub fn unmount(dir: &Path) {
    use std::os::unix::ffi::OsStrExt;
    if let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) {
        // SAFETY: a NUL-terminated path that outlives the call.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}

/// `ep0` of a mounted FunctionFS instance.
pub struct Ep0 {
    file: File,
}

impl Ep0 {
    /// Opens `DIR/ep0` and writes the descriptors and strings; after this the endpoint
    /// files exist and the gadget may be bound to a UDC.
    pub fn open(dir: &Path, interface_name: &str) -> io::Result<Ep0> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(dir.join("ep0"))?;
        file.write_all(&descriptors())?;
        file.write_all(&strings(interface_name))?;
        Ok(Ep0 { file })
    }

    /// Blocks for the next event (one at a time, so a SETUP's data stage is never read
    /// as events).
    pub fn event(&mut self) -> io::Result<Event> {
        let mut b = [0u8; EVENT_LEN];
        let n = self.file.read(&mut b)?;
        if n != EVENT_LEN {
            return Err(io::Error::other(format!(
                "ep0 gave {n} bytes where an event has {EVENT_LEN}"
            )));
        }
        Ok(parse_event(&b))
    }

    /// The OUT data stage of the pending SETUP (also completes its status stage).
    pub fn read_data(&mut self, len: usize) -> io::Result<Vec<u8>> {
        let mut b = vec![0u8; len];
        let n = self.file.read(&mut b)?;
        b.truncate(n);
        Ok(b)
    }

    /// Stalls the pending SETUP: FunctionFS halts ep0 when the data stage goes the wrong
    /// way (a read for an IN request, a write for an OUT one) and reports EL2HLT.
    pub fn stall(&mut self, setup: &Setup) {
        let _ = if setup.is_in() {
            self.file.read(&mut [0u8; 1]).map(|_| ())
        } else {
            self.file.write(&[0u8; 1]).map(|_| ())
        };
    }
}

/// The bulk endpoints of the rockusb interface.
///
/// Opened non-blocking: FunctionFS then refuses (EAGAIN) a transfer on an endpoint that is
/// not enabled, where a blocking one would wait for the next enable, that is for the next
/// session after an unplug, and a command cut off by a power-off would take the next
/// session's CBW as its data (seen once in CI under load). On an enabled endpoint a
/// transfer still waits for the host: O_NONBLOCK only covers the wait for the enable.
pub struct BulkFiles {
    ep_in: File,
    ep_out: File,
}

impl BulkFiles {
    pub fn open(dir: &Path) -> io::Result<BulkFiles> {
        use std::os::unix::fs::OpenOptionsExt;
        Ok(BulkFiles {
            ep_in: OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(dir.join("ep1"))?,
            ep_out: OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(dir.join("ep2"))?,
        })
    }
}

/// The error of a transfer on a disabled endpoint, said as what it means here.
fn not_enabled(e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::WouldBlock {
        io::Error::new(
            io::ErrorKind::NotConnected,
            "the endpoint is not enabled (the host has not configured the board, or it was unplugged)",
        )
    } else {
        e
    }
}

impl Bulk for BulkFiles {
    fn read(&mut self, max: usize) -> io::Result<Vec<u8>> {
        let mut b = vec![0u8; max];
        let n = self.ep_out.read(&mut b).map_err(not_enabled)?;
        b.truncate(n);
        Ok(b)
    }

    fn write(&mut self, data: &[u8]) -> io::Result<()> {
        let n = self.ep_in.write(data).map_err(not_enabled)?;
        if n != data.len() {
            return Err(io::Error::other(format!(
                "bulk IN took {n} of {} bytes",
                data.len()
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_blob_has_the_v2_header_and_both_speeds() {
        let d = descriptors();
        assert_eq!(u32::from_le_bytes([d[0], d[1], d[2], d[3]]), 3);
        assert_eq!(
            u32::from_le_bytes([d[4], d[5], d[6], d[7]]) as usize,
            d.len()
        );
        let flags = u32::from_le_bytes([d[8], d[9], d[10], d[11]]);
        assert_eq!(flags, 1 | 2 | 64);
        assert_eq!(d.len(), 12 + 8 + 2 * (9 + 7 + 7));
        // class ff/06/05 in both interface descriptors
        assert_eq!(&d[20 + 5..20 + 8], &[0xff, 0x06, 0x05]);
        assert_eq!(&d[43 + 5..43 + 8], &[0xff, 0x06, 0x05]);
        // high-speed bulk max packet 512
        assert_eq!(&d[43 + 9 + 4..43 + 9 + 6], &[0x00, 0x02]);
    }

    #[test]
    fn strings_blob_length_is_exact() {
        let s = strings("rockusb");
        assert_eq!(
            u32::from_le_bytes([s[4], s[5], s[6], s[7]]) as usize,
            s.len()
        );
        assert!(s.ends_with(b"rockusb\0"));
    }

    #[test]
    fn a_vendor_setup_event_parses() {
        let mut b = [0u8; EVENT_LEN];
        b[..8].copy_from_slice(&[0x40, 0x0C, 0, 0, 0x72, 0x04, 0x00, 0x10]);
        b[8] = 4;
        assert_eq!(
            parse_event(&b),
            Event::Setup(Setup {
                request_type: 0x40,
                request: 0x0C,
                value: 0,
                index: 0x472,
                length: 4096
            })
        );
        b[8] = 2;
        assert_eq!(parse_event(&b), Event::Enable);
    }
}
