//! The device model: what one attached USB device looks like to the rest of gatecmd.
//!
//! Identity is the physical port path (`DeviceId`), never bus/device numbers: those
//! change every time a board re-enumerates (Rockchip boards do after `db` and `rd`).
//! USB numbers that people read as hex (VID, PID, BCD versions) serialize as
//! 4-digit lowercase hex strings so JSON output matches `lsusb` and the config file.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::error::DeviceError;
use crate::families::Class;

/// A device's physical port path, the sysfs name: `<bus>-<port>[.<port>…]`, e.g. `1-2.3`.
///
/// Stable across re-enumeration on the same port; root hubs (`usb1`) and interfaces
/// (`1-2:1.0`) are not device ids.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DeviceId(String);

impl DeviceId {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Bus number followed by the port chain, for ordering `1-2` before `1-10`.
    fn numeric_path(&self) -> impl Iterator<Item = u64> + '_ {
        self.0
            .split(['-', '.'])
            .map(|part| part.parse::<u64>().unwrap_or(u64::MAX))
    }

    /// Builds the id from a bus number and the chain of port numbers from the root hub.
    pub fn from_ports(bus: u8, ports: &[u8]) -> Result<Self, DeviceError> {
        if ports.is_empty() {
            return Err(DeviceError::InvalidId {
                text: format!("usb{bus}"),
                reason: "a root hub has no port path and is not a board",
            });
        }
        let chain: Vec<String> = ports.iter().map(u8::to_string).collect();
        Ok(DeviceId(format!("{bus}-{}", chain.join("."))))
    }
}

impl FromStr for DeviceId {
    type Err = DeviceError;

    /// Accepts exactly `^\d+-\d+(\.\d+)*$`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = |reason| DeviceError::InvalidId {
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

impl Ord for DeviceId {
    fn cmp(&self, other: &Self) -> Ordering {
        self.numeric_path()
            .cmp(other.numeric_path())
            // Tie-break on the text so Ord agrees with Eq ("1-02" vs "1-2").
            .then_with(|| self.0.cmp(&other.0))
    }
}

impl PartialOrd for DeviceId {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Serialize for DeviceId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for DeviceId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for DeviceId {
    fn schema_name() -> Cow<'static, str> {
        "DeviceId".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "pattern": r"^\d+-\d+(\.\d+)*$",
            "description": "Physical USB port path (sysfs name), e.g. \"1-2.3\"; stable across re-enumeration",
        })
    }
}

/// A USB vendor/product pair, written `2207:350b` as `lsusb` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VidPid {
    pub vid: u16,
    pub pid: u16,
}

impl FromStr for VidPid {
    type Err = DeviceError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = || DeviceError::InvalidVidPid {
            text: text.to_owned(),
        };
        let (vid, pid) = text.split_once(':').ok_or_else(invalid)?;
        let hex = |s: &str| {
            if s.is_empty() || s.len() > 4 {
                return Err(invalid());
            }
            u16::from_str_radix(s, 16).map_err(|_| invalid())
        };
        Ok(VidPid {
            vid: hex(vid)?,
            pid: hex(pid)?,
        })
    }
}

impl fmt::Display for VidPid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04x}:{:04x}", self.vid, self.pid)
    }
}

/// The two rockusb states of a Rockchip SoC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RockchipMode {
    /// Boot ROM: only `db` (download boot) works.
    MaskRom,
    /// A loader (usbplug/U-Boot rockusb) is running: flash reads and writes work.
    Loader,
}

impl RockchipMode {
    /// Bit 0 of bcdUSB: 0 is the mask ROM, 1 a loader (rkdeveloptool's `RKScan.cpp`).
    pub fn from_bcd_usb(bcd_usb: u16) -> RockchipMode {
        if bcd_usb & 1 == 0 {
            RockchipMode::MaskRom
        } else {
            RockchipMode::Loader
        }
    }

    /// Its name in the families table's vocabulary (`maskrom`, `loader`).
    pub fn name(self) -> &'static str {
        match self {
            RockchipMode::MaskRom => crate::families::MASKROM,
            RockchipMode::Loader => crate::families::LOADER,
        }
    }
}

impl fmt::Display for RockchipMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RockchipMode::MaskRom => "maskrom",
            RockchipMode::Loader => "loader",
        })
    }
}

/// What kind of thing a device is, as far as flashing tools care.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeviceKind {
    /// A Rockchip SoC speaking rockusb (MaskROM or Loader): rkdeveloptool/upgrade_tool talk to it.
    Rockusb,
    /// A Rockchip VID with another function: the ADB/MSC/RNDIS gadget of running firmware.
    RockchipOther,
    /// Anything else (serial adapters, debug probes, …).
    Other,
}

impl DeviceKind {
    /// The `kind` label of its metrics: its serialised name, one of
    /// `gatecmd_core::metrics::DEVICE_KINDS`.
    pub fn label(self) -> &'static str {
        match self {
            DeviceKind::Rockusb => "rockusb",
            DeviceKind::RockchipOther => "rockchip_other",
            DeviceKind::Other => "other",
        }
    }
}

/// One attached USB device (not a root hub, not an interface).
#[derive(Clone, Debug, Serialize, JsonSchema, PartialEq)]
pub struct Device {
    pub id: DeviceId,
    #[serde(serialize_with = "hex4")]
    #[schemars(schema_with = "hex4_schema")]
    pub vid: u16,
    #[serde(serialize_with = "hex4")]
    #[schemars(schema_with = "hex4_schema")]
    pub pid: u16,
    #[serde(serialize_with = "hex4")]
    #[schemars(schema_with = "hex4_schema")]
    pub bcd_usb: u16,
    #[serde(serialize_with = "hex4")]
    #[schemars(schema_with = "hex4_schema")]
    pub bcd_device: u16,
    pub manufacturer: Option<String>,
    pub product: Option<String>,
    pub serial: Option<String>,
    /// Changes on every re-enumeration; not identity.
    pub busnum: u16,
    /// Changes on every re-enumeration; not identity.
    pub devnum: u16,
    /// Link speed in Mbit/s as sysfs writes it: "1.5", "12", "480", "5000", …
    pub speed: Option<String>,
    /// Empty when the backend has no sysfs (libusb on a non-Linux host).
    pub syspath: String,
    pub devnode: Option<String>,
    pub driver: Option<String>,
    /// When the device now on this port first appeared; a re-enumeration (Changed) keeps it.
    #[schemars(schema_with = "date_time_schema")]
    pub first_seen: DateTime<Utc>,
    /// The interface classes of its active configuration (`ff/42/03`, …), from its
    /// descriptors; empty when they could not be read.
    pub interfaces: Vec<Class>,
    /// The SoC family's recovery/flashing protocol it speaks now (`rockusb`, `fastboot`,
    /// `dfu`, `imx_sdp`, `sunxi_fel`, …; docs/FAMILIES.md), from its ids and interfaces.
    pub family: Option<&'static str>,
    /// The mode within the family (`maskrom`, `loader`, `fastboot`, `dfu`, `sdps`, `fel`,
    /// …), where the ids say it.
    pub mode: Option<&'static str>,
    /// The SoC (or chip) the ids name, e.g. "RK3588".
    pub soc: Option<&'static str>,
    /// The coarse kind of the metrics' labels: rockusb, rockchip_other or other.
    pub kind: DeviceKind,
}

impl Device {
    /// A device's family, mode, SoC and kind from its ids and interfaces (the families
    /// table, `crate::families`).
    pub fn identify(&mut self) {
        let ident = crate::families::identify(&crate::families::Ids {
            vid: self.vid,
            pid: self.pid,
            bcd_usb: self.bcd_usb,
            bcd_device: self.bcd_device,
            interfaces: &self.interfaces,
        });
        self.family = ident.map(|i| i.family);
        self.mode = ident.and_then(|i| i.mode);
        self.soc = ident.and_then(|i| i.soc);
        self.kind = match self.family {
            Some(crate::families::ROCKUSB) => DeviceKind::Rockusb,
            Some("rockchip_gadget") => DeviceKind::RockchipOther,
            _ => DeviceKind::Other,
        };
    }

    /// The rockusb state of a device of the rockusb family (what rkdeveloptool and the
    /// rockusb crate act on).
    pub fn rockusb_mode(&self) -> Option<RockchipMode> {
        if self.family != Some(crate::families::ROCKUSB) {
            return None;
        }
        match self.mode {
            Some(crate::families::MASKROM) => Some(RockchipMode::MaskRom),
            Some(crate::families::LOADER) => Some(RockchipMode::Loader),
            _ => None,
        }
    }

    pub fn vid_pid(&self) -> VidPid {
        VidPid {
            vid: self.vid,
            pid: self.pid,
        }
    }

    /// Equal in everything but `first_seen`: the test for "nothing changed".
    pub fn same_state(&self, other: &Device) -> bool {
        let mut other = other.clone();
        other.first_seen = self.first_seen;
        *self == other
    }
}

fn hex4<S: Serializer>(value: &u16, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{value:04x}"))
}

fn hex4_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "pattern": "^[0-9a-f]{4}$",
        "description": "16-bit value as 4 lowercase hex digits, e.g. \"2207\"",
    })
}

fn date_time_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "format": "date-time" })
}

/// A change in the set of attached devices, as published by the registry.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(tag = "event", rename_all = "snake_case")]
// Events are few (hotplug rate) and matched by value in the MCP layer; plain
// fields keep that code simple, boxing would save nothing that matters.
#[allow(clippy::large_enum_variant)]
pub enum DeviceEvent {
    Added(Device),
    Removed(Device),
    /// Same port, different state: re-enumeration (new devnum, MaskROM → Loader), a
    /// driver binding, or changed strings.
    Changed {
        old: Device,
        new: Device,
    },
}

impl DeviceEvent {
    pub fn id(&self) -> &DeviceId {
        match self {
            DeviceEvent::Added(d) | DeviceEvent::Removed(d) => &d.id,
            DeviceEvent::Changed { new, .. } => &new.id,
        }
    }

    /// The device as it is after the event (as it was, for a removal).
    pub fn device(&self) -> &Device {
        match self {
            DeviceEvent::Added(d) | DeviceEvent::Removed(d) => d,
            DeviceEvent::Changed { new, .. } => new,
        }
    }
}

#[cfg(any(test, feature = "test-fixtures"))]
impl Device {
    /// A plain 2207:350b device on `id` for unit tests (here and, with the `test-fixtures`
    /// feature, in the crates above).
    pub fn sample(id: &str, devnum: u16) -> Device {
        Device {
            id: id.parse().expect("test id"),
            vid: 0x2207,
            pid: 0x350b,
            bcd_usb: 0x0200,
            bcd_device: 0x0100,
            manufacturer: None,
            product: None,
            serial: None,
            busnum: 1,
            devnum,
            speed: None,
            syspath: String::new(),
            devnode: None,
            driver: None,
            first_seen: Utc::now(),
            interfaces: vec![],
            family: None,
            soc: None,
            mode: None,
            kind: DeviceKind::Other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_label_is_its_serialised_name_and_a_metrics_label() {
        for k in [
            DeviceKind::Rockusb,
            DeviceKind::RockchipOther,
            DeviceKind::Other,
        ] {
            assert_eq!(serde_json::to_value(k).unwrap(), k.label());
            assert!(
                gatecmd_core::metrics::DEVICE_KINDS.contains(&k.label()),
                "{k:?}"
            );
        }
        assert_eq!(gatecmd_core::metrics::DEVICE_KINDS.len(), 3);
    }

    #[test]
    fn device_id_accepts_port_paths_only() {
        for ok in ["1-2", "1-2.3", "10-1.4.2"] {
            assert_eq!(ok.parse::<DeviceId>().unwrap().to_string(), ok);
        }
        for bad in [
            "usb1", "1-2:1.0", "1-", "-2", "1-2.", "1-2..3", "a-2", "", "1-2 ",
        ] {
            assert!(bad.parse::<DeviceId>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn device_ids_sort_numerically() {
        let mut ids: Vec<DeviceId> = ["1-10", "2-1", "1-2.3", "1-2"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        ids.sort();
        let text: Vec<&str> = ids.iter().map(DeviceId::as_str).collect();
        assert_eq!(text, ["1-2", "1-2.3", "1-10", "2-1"]);
    }

    #[test]
    fn device_id_from_ports() {
        assert_eq!(DeviceId::from_ports(1, &[2, 3]).unwrap().as_str(), "1-2.3");
        assert!(DeviceId::from_ports(1, &[]).is_err());
    }

    #[test]
    fn vid_pid_round_trips_as_lowercase_hex() {
        let v: VidPid = "2207:350B".parse().unwrap();
        assert_eq!(
            v,
            VidPid {
                vid: 0x2207,
                pid: 0x350b
            }
        );
        assert_eq!(v.to_string(), "2207:350b");
        assert_eq!(
            "403:6001".parse::<VidPid>().unwrap().to_string(),
            "0403:6001"
        );
        for bad in ["2207", "2207:", "12345:1", "xyz:1", "2207:350b:1"] {
            assert!(bad.parse::<VidPid>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn device_serializes_hex_fields_as_strings() {
        let d = Device {
            id: "1-2".parse().unwrap(),
            vid: 0x2207,
            pid: 0x350b,
            bcd_usb: 0x0200,
            bcd_device: 0x0100,
            manufacturer: None,
            product: None,
            serial: None,
            busnum: 1,
            devnum: 2,
            speed: Some("480".into()),
            syspath: String::new(),
            devnode: None,
            driver: None,
            first_seen: Utc::now(),
            interfaces: vec![Class {
                class: 0xff,
                subclass: 0x06,
                protocol: 0x05,
            }],
            family: None,
            soc: None,
            mode: None,
            kind: DeviceKind::Other,
        };
        let mut d = d;
        d.identify();
        let v = serde_json::to_value(&d).unwrap();
        assert_eq!(v["family"], "rockusb");
        assert_eq!(v["soc"], "RK3588");
        assert_eq!(v["interfaces"], serde_json::json!(["ff/06/05"]));
        assert_eq!(d.rockusb_mode(), Some(RockchipMode::MaskRom));
        assert_eq!(v["id"], "1-2");
        assert_eq!(v["vid"], "2207");
        assert_eq!(v["pid"], "350b");
        assert_eq!(v["bcd_usb"], "0200");
        assert_eq!(v["mode"], "maskrom");
        assert_eq!(v["kind"], "rockusb");
        let ev = serde_json::to_value(DeviceEvent::Added(d)).unwrap();
        assert_eq!(ev["event"], "added");
        assert_eq!(ev["id"], "1-2");
        let schema = serde_json::to_value(schemars::schema_for!(Device)).unwrap();
        assert_eq!(schema["properties"]["vid"]["type"], "string");
    }
}

/// Longest descriptor string kept, in characters (a USB string descriptor holds at most
/// 126 UTF-16 units).
pub const MAX_DESCRIPTOR_CHARS: usize = 126;

/// A USB descriptor string (manufacturer, product, serial) made safe for every sink: it
/// is chosen by whoever built the device (a board flashed with a gadget image, a hostile
/// device), so control characters (newline, ESC, C1), and the bidirectional overrides
/// that reorder what a terminal shows, become `?`; the string is trimmed and cut to
/// [`MAX_DESCRIPTOR_CHARS`]. Empty: `None`. Applied where a device is built, so the text
/// answers, the CLI, the page and the logs all see the same clean value (issue 22).
pub fn descriptor_string(raw: &str) -> Option<String> {
    let clean = gatecmd_core::output::one_line(raw, MAX_DESCRIPTOR_CHARS);
    (!clean.is_empty()).then_some(clean)
}

#[cfg(test)]
mod descriptor_tests {
    use super::*;

    #[test]
    fn descriptor_strings_lose_control_characters_and_overrides() {
        assert_eq!(
            descriptor_string("Rock\n1-9 ffff:ffff evil\x1b]0;x\x07\u{202e}"),
            Some("Rock?1-9 ffff:ffff evil?]0;x??".to_string())
        );
        assert_eq!(descriptor_string(" \n "), None);
        assert_eq!(
            descriptor_string(&"x".repeat(500)).map(|s| s.len()),
            Some(126)
        );
        assert_eq!(descriptor_string("Rockchip\n"), Some("Rockchip".into()));
    }
}
