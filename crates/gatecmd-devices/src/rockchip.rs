//! Rockchip identification: SoC family from the product id, rockusb mode from bcdUSB.
//!
//! Rockchip's boot ROM and loaders enumerate as VID 2207 with one PID per SoC
//! family; the same PID is used in MaskROM and in Loader mode, and the two are told
//! apart by bit 0 of bcdUSB (0 = MaskROM, 1 = Loader), which is what rkdeveloptool
//! and upgrade_tool check. Other 2207 PIDs belong to gadgets of running firmware
//! (ADB, mass storage, RNDIS, …) and do not speak rockusb.

use super::model::{DeviceKind, RockchipMode};

pub const ROCKCHIP_VID: u16 = 0x2207;

/// rockusb PIDs and the SoC family each one identifies.
const SOC_BY_PID: &[(u16, &str)] = &[
    (0x110a, "RV1108"),
    (0x110b, "RV1126"),
    (0x110c, "RV1106"),
    (0x110e, "RV1103B"),
    (0x110f, "RV1126B"),
    (0x180a, "RK1808"),
    (0x300a, "RK3066"),
    (0x301a, "RK3036"),
    (0x310b, "RK3188"),
    (0x310c, "RK3128"),
    (0x320a, "RK3288"),
    (0x320b, "RK322X"),
    (0x320c, "RK3328"),
    (0x330a, "RK3368"),
    (0x330c, "RK3399"),
    (0x330d, "PX30"),
    (0x330e, "RK3308"),
    (0x350a, "RK3566/RK3568"),
    (0x350b, "RK3588"),
    (0x350c, "RK3528"),
    (0x350d, "RK3562"),
    (0x350e, "RK3576"),
    (0x350f, "RK3506"),
];

/// The SoC family of a rockusb device, or `None` when the VID:PID is not rockusb.
pub fn soc(vid: u16, pid: u16) -> Option<&'static str> {
    if vid != ROCKCHIP_VID {
        return None;
    }
    SOC_BY_PID
        .iter()
        .find(|(known, _)| *known == pid)
        .map(|(_, name)| *name)
}

/// rockusb mode from bcdUSB: bit 0 clear is the boot ROM, set is a loader.
pub fn mode(bcd_usb: u16) -> RockchipMode {
    if bcd_usb & 1 == 0 {
        RockchipMode::MaskRom
    } else {
        RockchipMode::Loader
    }
}

/// What gatecmd knows about a device from its ids alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    pub soc: Option<&'static str>,
    pub mode: Option<RockchipMode>,
    pub kind: DeviceKind,
}

pub fn identify(vid: u16, pid: u16, bcd_usb: u16) -> Identity {
    match soc(vid, pid) {
        Some(soc) => Identity {
            soc: Some(soc),
            mode: Some(mode(bcd_usb)),
            kind: DeviceKind::Rockusb,
        },
        None if vid == ROCKCHIP_VID => Identity {
            soc: None,
            mode: None,
            kind: DeviceKind::RockchipOther,
        },
        None => Identity {
            soc: None,
            mode: None,
            kind: DeviceKind::Other,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn soc_table() {
        assert_eq!(soc(0x2207, 0x350b), Some("RK3588"));
        assert_eq!(soc(0x2207, 0x350a), Some("RK3566/RK3568"));
        assert_eq!(soc(0x2207, 0x330c), Some("RK3399"));
        assert_eq!(soc(0x2207, 0x110a), Some("RV1108"));
        assert_eq!(soc(0x2207, 0x350f), Some("RK3506"));
        // Same PID, other vendor: not Rockchip.
        assert_eq!(soc(0x0403, 0x350b), None);
        assert_eq!(soc(0x2207, 0x0006), None);
    }

    #[test]
    fn table_has_no_duplicate_pids() {
        let mut pids: Vec<u16> = SOC_BY_PID.iter().map(|(p, _)| *p).collect();
        pids.sort_unstable();
        pids.dedup();
        assert_eq!(pids.len(), SOC_BY_PID.len());
    }

    #[test]
    fn mode_from_bcd_usb_bit0() {
        assert_eq!(mode(0x0200), RockchipMode::MaskRom);
        assert_eq!(mode(0x0201), RockchipMode::Loader);
        assert_eq!(mode(0x0110), RockchipMode::MaskRom);
        assert_eq!(mode(0x0321), RockchipMode::Loader);
    }

    #[test]
    fn identify_kinds() {
        let rk = identify(0x2207, 0x350b, 0x0201);
        assert_eq!(rk.kind, DeviceKind::Rockusb);
        assert_eq!(rk.soc, Some("RK3588"));
        assert_eq!(rk.mode, Some(RockchipMode::Loader));
        for gadget in [0x0006, 0x0010, 0x0011, 0x0018] {
            let id = identify(0x2207, gadget, 0x0200);
            assert_eq!(id.kind, DeviceKind::RockchipOther, "{gadget:04x}");
            assert_eq!(id.mode, None);
            assert_eq!(id.soc, None);
        }
        assert_eq!(identify(0x0403, 0x6001, 0x0200).kind, DeviceKind::Other);
    }
}
