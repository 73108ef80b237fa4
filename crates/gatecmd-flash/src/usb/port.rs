//! A USB device's physical port path, `<bus>-<port>[.<port>…]` (the kernel's sysfs name,
//! e.g. `1-1` or `3-2.4`): the identity of a board's flashing port, stable across the
//! re-enumerations a Rockchip board goes through (MaskROM → Loader → booted).

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

/// `<bus>-<port>[.<port>…]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PortPath {
    bus: u8,
    ports: Vec<u8>,
}

/// USB allows 7 tiers of hubs below the root: at most 7 port numbers.
const MAX_DEPTH: usize = 7;

/// Why a string is not a port path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not a USB port path like 1-1 or 3-2.4 (<bus>-<port>[.<port>...], the sysfs name)"
)]
pub struct BadPortPath(pub String);

impl FromStr for PortPath {
    type Err = BadPortPath;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BadPortPath(s.to_string());
        let (bus, rest) = s.split_once('-').ok_or_else(bad)?;
        let bus: u8 = bus.parse().map_err(|_| bad())?;
        let ports = rest
            .split('.')
            .map(|p| p.parse::<u8>().ok().filter(|&n| n > 0))
            .collect::<Option<Vec<u8>>>()
            .ok_or_else(bad)?;
        if bus == 0 || ports.is_empty() || ports.len() > MAX_DEPTH {
            return Err(bad());
        }
        Ok(PortPath { bus, ports })
    }
}

impl fmt::Display for PortPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-", self.bus)?;
        for (i, p) in self.ports.iter().enumerate() {
            if i > 0 {
                f.write_str(".")?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

impl Serialize for PortPath {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl PortPath {
    /// The port path of a device libusb lists (`None` for a root hub, which has no port).
    pub fn of<T: rusb::UsbContext>(device: &rusb::Device<T>) -> Option<PortPath> {
        let ports = device.port_numbers().ok()?;
        if ports.is_empty() {
            return None;
        }
        Some(PortPath {
            bus: device.bus_number(),
            ports,
        })
    }

    /// The bus number.
    pub fn bus(&self) -> u8 {
        self.bus
    }

    /// The port numbers from the root hub down.
    pub fn ports(&self) -> &[u8] {
        &self.ports
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_paths_round_trip_and_refuse_garbage() {
        for s in ["1-1", "3-2.4", "2-1.2.3.4.5.6.7"] {
            let p: PortPath = s.parse().expect(s);
            assert_eq!(p.to_string(), s);
        }
        let p: PortPath = "3-2.4".parse().expect("parse");
        assert_eq!((p.bus(), p.ports()), (3, &[2u8, 4][..]));
        for s in [
            "",
            "1",
            "1-",
            "0-1",
            "1-0",
            "1-1.",
            "a-1",
            "1-1.2.3.4.5.6.7.8",
            "1-256",
        ] {
            let e = s.parse::<PortPath>().expect_err(s);
            assert!(e.to_string().contains("port path"), "{e}");
        }
    }
}
