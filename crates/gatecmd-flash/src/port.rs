//! The engine's own words for where a board is and what state it is in: a port path
//! ([`DeviceId`]) and a rockusb mode ([`Mode`]). They are the engine's so that it stands
//! alone (no gatecmd crate below it); gatecmd's domain converts its device layer's types to
//! these at its edge (`crates/gatecmd-domain/src/flash/device.rs`).

use std::fmt;
use std::str::FromStr;

use serde::{Serialize, Serializer};

/// A USB device's physical port path, the sysfs name: `<bus>-<port>[.<port>…]`, e.g.
/// `1-2.3`. Stable across re-enumeration on the same port; a root hub has none.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DeviceId(String);

/// Why a text or a port chain is not a port path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a USB port path: {reason}")]
pub struct BadPort {
    /// The text refused.
    pub text: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl DeviceId {
    /// The path as text (`1-2.3`).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Builds the path from a bus number and the chain of port numbers from the root hub.
    pub fn from_ports(bus: u8, ports: &[u8]) -> Result<DeviceId, BadPort> {
        if ports.is_empty() {
            return Err(BadPort {
                text: format!("usb{bus}"),
                reason: "a root hub has no port path and is not a board",
            });
        }
        let chain: Vec<String> = ports.iter().map(u8::to_string).collect();
        Ok(DeviceId(format!("{bus}-{}", chain.join("."))))
    }
}

impl FromStr for DeviceId {
    type Err = BadPort;

    /// Accepts exactly `^\d+-\d+(\.\d+)*$`.
    fn from_str(text: &str) -> Result<DeviceId, BadPort> {
        let invalid = |reason| BadPort {
            text: text.to_owned(),
            reason,
        };
        let (bus, ports) = text
            .split_once('-')
            .ok_or_else(|| invalid("expected <bus>-<port>[.<port>…], e.g. 1-2.3"))?;
        let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !all_digits(bus) {
            return Err(invalid("the bus number must be decimal digits"));
        }
        if !ports.split('.').all(all_digits) {
            return Err(invalid(
                "ports must be decimal numbers separated by '.', e.g. 1-2.3",
            ));
        }
        Ok(DeviceId(text.to_owned()))
    }
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for DeviceId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

/// The two rockusb states of a Rockchip SoC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Boot ROM: only `db` (download boot) works.
    MaskRom,
    /// A loader (usbplug/U-Boot rockusb) is running: flash reads and writes work.
    Loader,
}

impl Mode {
    /// Bit 0 of bcdUSB: 0 is the mask ROM, 1 a loader (rkdeveloptool's `RKScan.cpp`).
    pub fn from_bcd_usb(bcd_usb: u16) -> Mode {
        if bcd_usb & 1 == 0 {
            Mode::MaskRom
        } else {
            Mode::Loader
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::MaskRom => "maskrom",
            Mode::Loader => "loader",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_paths_parse_as_sysfs_names() {
        assert_eq!("1-2.3".parse::<DeviceId>().map(|p| p.0), Ok("1-2.3".into()));
        assert!("usb1".parse::<DeviceId>().is_err());
        assert!("1-2:1.0".parse::<DeviceId>().is_err());
        assert!("1-".parse::<DeviceId>().is_err());
        assert_eq!(
            DeviceId::from_ports(3, &[1, 4]).map(|p| p.0),
            Ok("3-1.4".into())
        );
        assert!(DeviceId::from_ports(1, &[]).is_err());
    }

    #[test]
    fn mode_from_bcd_usb_bit_zero() {
        assert_eq!(Mode::from_bcd_usb(0x0200), Mode::MaskRom);
        assert_eq!(Mode::from_bcd_usb(0x0201), Mode::Loader);
        assert_eq!(Mode::Loader.to_string(), "loader");
    }
}
