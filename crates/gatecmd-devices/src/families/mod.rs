//! Which SoC family's recovery, download or flashing mode a USB device is in, from its ids
//! and its interfaces' classes: the families as data (`table.rs`: one row per USB identity,
//! each with its source) and the one rule that picks a row.
//!
//! The rule is the tools' own (docs/FAMILIES.md, "Matching"): an interface of class
//! `ff/42/03` is fastboot and `fe/01/02` (`fe/01/01`) DFU whatever the vendor id, because
//! that is all `fastboot` and `dfu-util` look at, and U-Boot's gadgets reuse the board
//! vendor's ids (a Rockchip board in U-Boot's fastboot is 2207:<its SoC's PID>); then the
//! exact vendor ids; then rkdeveloptool's own catch-all (any 2207 PID from 0x0100 on is
//! rockusb). A rockusb device's mode is bit 0 of bcdUSB; an i.MX SPL's, its bcdDevice range.

#[cfg(test)]
mod generated_tests;
mod interfaces;
mod table;

pub use interfaces::{Class, interfaces_of_descriptors};
pub use table::ROWS;

use serde::Serialize;

/// How a row's mode is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModeRule {
    /// The id says it.
    Fixed(&'static str),
    /// rockusb: bcdUSB bit 0 clear is the mask ROM (`maskrom`), set a loader (`loader`)
    /// (rkdeveloptool's `RKScan.cpp`).
    RockusbBcdUsb,
    /// The id does not tell (an Espressif USB-Serial/JTAG port is the same in ROM download
    /// mode and under an application).
    Unknown,
}

/// Which product ids of the row's vendor match.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PidRule {
    Exact(u16),
    /// Inclusive.
    Range(u16, u16),
    Any,
}

impl PidRule {
    fn matches(self, pid: u16) -> bool {
        match self {
            PidRule::Exact(p) => p == pid,
            PidRule::Range(a, b) => (a..=b).contains(&pid),
            PidRule::Any => true,
        }
    }
}

/// One USB identity of a mode, with its source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row {
    /// Stable snake_case name: `rockusb`, `fastboot`, `dfu`, `imx_sdp`, `sunxi_fel`, …
    pub family: &'static str,
    pub mode: ModeRule,
    /// `None`: any vendor (a class-only row).
    pub vid: Option<u16>,
    pub pid: PidRule,
    /// Inclusive bcdDevice range the row needs (uuu's rule for some i.MX rows).
    pub bcd_device: Option<(u16, u16)>,
    /// An interface class one of the device's interfaces must have.
    pub class: Option<Class>,
    /// The SoC (or chip, board) the id names, where it names one.
    pub soc: Option<&'static str>,
    /// What the id hints at without naming a SoC (a U-Boot gadget's vendor).
    pub hint: Option<&'static str>,
    /// The host tool that talks to this mode.
    pub tool: &'static str,
    /// Its Debian 12 package, or why there is none.
    pub debian: &'static str,
    /// Where the id was read.
    pub source: &'static str,
}

/// Bit 0 of bcdUSB: rockusb's MaskROM (0) or Loader (1).
pub fn rockusb_mode(bcd_usb: u16) -> &'static str {
    if bcd_usb & 1 == 0 { MASKROM } else { LOADER }
}

/// The rockusb modes, by name.
pub const MASKROM: &str = "maskrom";
pub const LOADER: &str = "loader";
/// The family whose devices rkdeveloptool and the rockusb crate talk to.
pub const ROCKUSB: &str = "rockusb";

/// What a device's ids and interfaces say it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Identity {
    pub family: &'static str,
    pub mode: Option<&'static str>,
    pub soc: Option<&'static str>,
}

/// The ids and interfaces `identify` reads.
#[derive(Clone, Copy, Debug)]
pub struct Ids<'a> {
    pub vid: u16,
    pub pid: u16,
    pub bcd_usb: u16,
    pub bcd_device: u16,
    /// The interfaces of the active configuration; empty when they could not be read.
    pub interfaces: &'a [Class],
}

/// How specific a matching row is: a row that needs an interface class beats every row
/// that does not (the tools decide by class), then an exact product id beats a range
/// beats any product of the vendor beats any vendor.
fn specificity(row: &Row) -> (bool, u8) {
    let id = match (row.vid, row.pid) {
        (None, _) => 0,
        (Some(_), PidRule::Any) => 1,
        (Some(_), PidRule::Range(..)) => 2,
        (Some(_), PidRule::Exact(_)) => 3,
    };
    (row.class.is_some(), id)
}

fn matches(row: &Row, ids: &Ids) -> bool {
    row.vid.is_none_or(|v| v == ids.vid)
        && row.pid.matches(ids.pid)
        && row
            .bcd_device
            .is_none_or(|(a, b)| (a..=b).contains(&ids.bcd_device))
        && row.class.is_none_or(|c| ids.interfaces.contains(&c))
        // A mass-storage interface is U-Boot's UMS gadget on a rockusb id, not rockusb.
        && !(row.family == ROCKUSB && ids.interfaces.iter().any(|i| i.class == 0x08))
}

/// The row that names the device, if any.
pub fn row_of(ids: &Ids) -> Option<&'static Row> {
    ROWS.iter()
        .filter(|r| matches(r, ids))
        .max_by_key(|r| specificity(r))
}

/// The device's family, mode and SoC, or `None` for a device of no known family (a
/// serial adapter, a hub, a debug probe).
pub fn identify(ids: &Ids) -> Option<Identity> {
    let row = row_of(ids)?;
    Some(Identity {
        family: row.family,
        mode: match row.mode {
            ModeRule::Fixed(m) => Some(m),
            ModeRule::RockusbBcdUsb => Some(rockusb_mode(ids.bcd_usb)),
            ModeRule::Unknown => None,
        },
        soc: row.soc,
    })
}

/// Every family name, in table order, once.
pub fn families() -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for r in ROWS {
        if !out.contains(&r.family) {
            out.push(r.family);
        }
    }
    out
}

/// Every mode name a row can give, once.
pub fn modes() -> Vec<&'static str> {
    let mut out = vec![MASKROM, LOADER];
    for r in ROWS {
        if let ModeRule::Fixed(m) = r.mode
            && !out.contains(&m)
        {
            out.push(m);
        }
    }
    out
}

/// The table's own name for `name`, when it is a family (input parsed against the table).
pub fn family_named(name: &str) -> Option<&'static str> {
    ROWS.iter().map(|r| r.family).find(|f| *f == name)
}

/// The table's own name for `name`, when it is a mode.
pub fn mode_named(name: &str) -> Option<&'static str> {
    modes().into_iter().find(|m| *m == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FASTBOOT: Class = Class {
        class: 0xff,
        subclass: 0x42,
        protocol: 0x03,
    };
    const DFU: Class = Class {
        class: 0xfe,
        subclass: 0x01,
        protocol: 0x02,
    };
    const DFU_RUNTIME: Class = Class {
        class: 0xfe,
        subclass: 0x01,
        protocol: 0x01,
    };
    const ROCKUSB_IF: Class = Class {
        class: 0xff,
        subclass: 0x06,
        protocol: 0x05,
    };

    fn id(vid: u16, pid: u16, bcd_usb: u16, interfaces: &[Class]) -> Option<Identity> {
        identify(&Ids {
            vid,
            pid,
            bcd_usb,
            bcd_device: 0x0100,
            interfaces,
        })
    }

    #[test]
    fn rockusb_soc_and_mode_as_before() {
        let rk = id(0x2207, 0x350b, 0x0200, &[ROCKUSB_IF]).expect("known");
        assert_eq!(
            (rk.family, rk.mode, rk.soc),
            ("rockusb", Some("maskrom"), Some("RK3588"))
        );
        let rk = id(0x2207, 0x350b, 0x0201, &[]).expect("known");
        assert_eq!(rk.mode, Some("loader"));
        // rkdeveloptool's catch-all: an unlisted PID from 0x0100 on, SoC unknown.
        let rk = id(0x2207, 0x3599, 0x0200, &[]).expect("known");
        assert_eq!((rk.family, rk.soc), ("rockusb", None));
        // Below 0x0100: firmware's gadgets, never rockusb.
        let g = id(0x2207, 0x0006, 0x0200, &[]).expect("known");
        assert_eq!((g.family, g.mode), ("rockchip_gadget", Some("adb")));
    }

    #[test]
    fn the_interface_class_decides_whatever_the_vendor() {
        // A Rockchip board in U-Boot's fastboot keeps its rockusb id: fastboot, not rockusb.
        let f = id(0x2207, 0x350b, 0x0200, &[FASTBOOT]).expect("known");
        assert_eq!(
            (f.family, f.mode, f.soc),
            ("fastboot", Some("fastboot"), None)
        );
        // An unknown vendor with the fastboot class, or with DFU's.
        let f = id(0x1234, 0x5678, 0x0200, &[FASTBOOT]).expect("by class");
        assert_eq!(f.family, "fastboot");
        let d = id(0x1234, 0x5678, 0x0200, &[DFU]).expect("by class");
        assert_eq!((d.family, d.mode), ("dfu", Some("dfu")));
        let d = id(0x1234, 0x5678, 0x0200, &[DFU_RUNTIME]).expect("by class");
        assert_eq!((d.family, d.mode), ("dfu", Some("dfu_runtime")));
        // A vendor DFU row adds its chip.
        let d = id(0x0483, 0xdf11, 0x0200, &[DFU]).expect("stm32");
        assert_eq!(d.family, "dfu");
        assert!(d.soc.is_some_and(|s| s.contains("STM32")), "{d:?}");
        // U-Boot's UMS on a rockusb id is not rockusb.
        let msc = Class {
            class: 0x08,
            subclass: 0x06,
            protocol: 0x50,
        };
        assert_ne!(
            id(0x2207, 0x350b, 0x0200, &[msc]).map(|i| i.family),
            Some("rockusb")
        );
        // Nothing known: a serial adapter.
        assert_eq!(id(0x0403, 0x6001, 0x0200, &[]), None);
    }

    #[test]
    fn bcd_device_ranges_pick_the_mode() {
        let ids = |bcd_device| Ids {
            vid: 0x0525,
            pid: 0xb4a4,
            bcd_usb: 0x0200,
            bcd_device,
            interfaces: &[],
        };
        assert_eq!(identify(&ids(0x0400)).and_then(|i| i.mode), Some("sdpu"));
        assert_eq!(identify(&ids(0x0600)).and_then(|i| i.mode), Some("sdpv"));
        assert_eq!(identify(&ids(0x9999)).and_then(|i| i.mode), Some("sdpu"));
    }

    #[test]
    fn every_row_is_named_by_itself_and_cites_a_source() {
        for row in ROWS {
            assert!(!row.source.trim().is_empty(), "{row:?}");
            assert!(
                row.family
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "{row:?}"
            );
            // A device made of the row's own ids is named by a row of the same family.
            let Some(vid) = row.vid else { continue };
            let pid = match row.pid {
                PidRule::Exact(p) | PidRule::Range(p, _) => p,
                PidRule::Any => 0x0100,
            };
            let classes: Vec<Class> = row.class.into_iter().collect();
            let ids = Ids {
                vid,
                pid,
                bcd_usb: 0x0200,
                bcd_device: row.bcd_device.map_or(0x0100, |(a, _)| a),
                interfaces: &classes,
            };
            let got = identify(&ids).expect("named");
            assert_eq!(got.family, row.family, "{row:?} → {got:?}");
        }
        assert!(families().len() >= 20, "{:?}", families());
        assert_eq!(family_named("fastboot"), Some("fastboot"));
        assert_eq!(family_named("nope"), None);
        assert_eq!(mode_named("maskrom"), Some("maskrom"));
    }
}
