//! A device's interface classes, read from its descriptors: the kernel's `descriptors`
//! attribute (the device descriptor followed by the active configuration's descriptors,
//! the same bytes libusb parses) holds one 9-byte interface descriptor (type 4) per
//! interface and alternate setting. Read from the bytes rather than from the interfaces'
//! own sysfs directories, which appear after the device's `add` event.

use std::fmt;

use serde::{Serialize, Serializer};

/// An interface's class, subclass and protocol, written `ff/42/03` as lsusb and udev's
/// `ID_USB_INTERFACES` do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Class {
    pub class: u8,
    pub subclass: u8,
    pub protocol: u8,
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:02x}/{:02x}/{:02x}",
            self.class, self.subclass, self.protocol
        )
    }
}

impl schemars::JsonSchema for Class {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "InterfaceClass".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": "^[0-9a-f]{2}/[0-9a-f]{2}/[0-9a-f]{2}$",
            "description": "an interface's class/subclass/protocol in hex, e.g. \"ff/42/03\" (fastboot)",
        })
    }
}

impl Serialize for Class {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Descriptor type of an interface descriptor (USB 2.0, table 9-5).
const INTERFACE: u8 = 4;
/// Most interfaces kept from one device: the descriptors come from the device, and what
/// a device supplies is bounded before anyone sees it.
const MAX_INTERFACES: usize = 32;

/// The distinct interface classes in a device's raw descriptors, in order of appearance.
/// Malformed bytes end the walk; what was read before them stays.
pub fn interfaces_of_descriptors(raw: &[u8]) -> Vec<Class> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 2 <= raw.len() && out.len() < MAX_INTERFACES {
        let len = raw[at] as usize;
        if len < 2 || at + len > raw.len() {
            break;
        }
        if raw[at + 1] == INTERFACE && len >= 9 {
            let c = Class {
                class: raw[at + 5],
                subclass: raw[at + 6],
                protocol: raw[at + 7],
            };
            if !out.contains(&c) {
                out.push(c);
            }
        }
        at += len;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interfaces_are_read_from_the_descriptors() {
        // Device descriptor (18), configuration (9), interface ff/42/03 (9), two endpoints
        // (7 each), then a DFU interface fe/01/02 and its functional descriptor (9).
        let mut raw = vec![
            18, 1, 0, 2, 0, 0, 0, 64, 0xd1, 0x18, 0xe0, 0x4e, 0, 1, 1, 2, 3, 1,
        ];
        raw.extend([9, 2, 50, 0, 2, 1, 0, 0x80, 50]);
        raw.extend([9, 4, 0, 0, 2, 0xff, 0x42, 0x03, 0]);
        raw.extend([7, 5, 0x81, 2, 0, 2, 0]);
        raw.extend([7, 5, 0x01, 2, 0, 2, 0]);
        raw.extend([9, 4, 1, 0, 0, 0xfe, 0x01, 0x02, 0]);
        raw.extend([9, 0x21, 0x0b, 0xff, 0, 0, 0x10, 0x10, 0x01]);
        let got = interfaces_of_descriptors(&raw);
        let names: Vec<String> = got.iter().map(ToString::to_string).collect();
        assert_eq!(names, ["ff/42/03", "fe/01/02"]);
        // Truncated or zero-length descriptors end the walk without a panic.
        assert_eq!(interfaces_of_descriptors(&raw[..30]).len(), 0);
        assert_eq!(interfaces_of_descriptors(&[0, 0, 0]).len(), 0);
        assert!(interfaces_of_descriptors(&[]).is_empty());
    }
}
