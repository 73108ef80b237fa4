//! The DFU interface as FunctionFS presents it: runtime mode (class fe/01/01) and DFU mode
//! (fe/01/02, one alt setting per target, each named by its own string descriptor, which
//! `dfu-util -l` prints as `name="…"`), each followed by the DFU functional descriptor
//! (DFU 1.1 4.1.3: type 0x21, 9 bytes). dfu-util 0.11 (`dfu_util.c probe_configuration`)
//! looks for that descriptor among the extra bytes of the configuration and of every DFU
//! alt setting; FunctionFS accepts it after an fe/01 interface since Linux 6.12
//! ("usb: gadget: f_fs: add capability for dfu functional descriptor").

use crate::ffs::blob::{descriptors, interface, strings};

/// bmAttributes: bitCanDnload | bitCanUpload | bitManifestationTolerant | bitWillDetach.
/// Will-detach: on DETACH the board re-enumerates by itself (dfu-util then does not reset
/// the bus, `main.c`); tolerant: after manifestation it is back in dfuIDLE.
pub const ATTRIBUTES: u8 = 0x0f;
/// wTransferSize: dfu-util on Linux caps transfers at 4096 (`main.c`, libusb's limit).
pub const TRANSFER_SIZE: u16 = 4096;
/// wDetachTimeOut in ms (dfu-util sends DETACH with wValue 1000).
pub const DETACH_TIMEOUT: u16 = 1000;
const DFU_VERSION: u16 = 0x0110;

fn functional() -> Vec<u8> {
    let (d, t, v) = (
        DETACH_TIMEOUT.to_le_bytes(),
        TRANSFER_SIZE.to_le_bytes(),
        DFU_VERSION.to_le_bytes(),
    );
    vec![9, 0x21, ATTRIBUTES, d[0], d[1], t[0], t[1], v[0], v[1]]
}

/// Runtime mode: one interface, no endpoints.
pub fn runtime() -> (Vec<u8>, Vec<u8>) {
    let descs = descriptors(|_| vec![interface(0, 0, 0, [0xfe, 0x01, 0x01], 1), functional()]);
    (descs, strings(&["gatecmd-vboard DFU runtime"]))
}

/// DFU mode: alt setting k is `names[k]`.
pub fn dfu_mode(names: &[&str]) -> (Vec<u8>, Vec<u8>) {
    let descs = descriptors(|_| {
        let mut v: Vec<Vec<u8>> = names
            .iter()
            .enumerate()
            .map(|(k, _)| interface(0, k as u8, 0, [0xfe, 0x01, 0x02], k as u8 + 1))
            .collect();
        v.push(functional());
        v
    });
    (descs, strings(names))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dfu_mode_has_one_alt_per_target_then_the_functional_descriptor() {
        let (d, s) = dfu_mode(&["u-boot", "rootfs"]);
        // fs_count = hs_count = 3 (two interfaces + functional).
        assert_eq!((d[12], d[16]), (3, 3));
        let fs = &d[20..20 + 9 + 9 + 9];
        assert_eq!(&fs[..9], &[9, 4, 0, 0, 0, 0xfe, 1, 2, 1]);
        assert_eq!(&fs[9..18], &[9, 4, 0, 1, 0, 0xfe, 1, 2, 2]);
        assert_eq!(
            &fs[18..],
            &[9, 0x21, 0x0f, 0xe8, 0x03, 0x00, 0x10, 0x10, 0x01]
        );
        assert!(s.ends_with(b"u-boot\0rootfs\0"));
        let (d, _) = runtime();
        assert_eq!(&d[20..29], &[9, 4, 0, 0, 0, 0xfe, 1, 1, 1]);
    }
}
