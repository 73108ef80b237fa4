//! sysfs: turning a USB device's attributes into a `Device`, and scanning
//! `<root>/bus/usb/devices` for the periodic-rescan fallback.
//!
//! The udev backend reads the same attributes through libudev, and the libusb
//! backend reads its strings here (umockdev does not emulate USB transfers, and a
//! sysfs read never disturbs a board mid-flash the way a control transfer could).

use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

use chrono::Utc;

use super::error::DeviceError;
use super::model::{Device, DeviceId};

/// Where a device's attributes come from: a libudev device or a sysfs directory.
pub(crate) trait Attributes {
    /// The attribute's text without the trailing newline; `None` when absent.
    fn attr(&self, name: &str) -> Option<String>;
}

/// The interface classes in the `descriptors` attribute of the device at `syspath` (read
/// as a file: a binary attribute, which libudev's text values would cut at the first NUL).
pub(crate) fn interfaces_at(syspath: &Path) -> Vec<crate::families::Class> {
    fs::read(syspath.join("descriptors"))
        .map(|raw| crate::families::interfaces_of_descriptors(&raw))
        .unwrap_or_default()
}

/// Facts that do not come from plain attributes.
pub(crate) struct Location {
    pub id: DeviceId,
    pub syspath: String,
    pub devnode: Option<String>,
    pub driver: Option<String>,
}

/// Builds the model from the attributes the kernel exposes for a `usb_device`.
pub(crate) fn device_from_attributes(
    at: Location,
    attrs: &impl Attributes,
) -> Result<Device, DeviceError> {
    let device = at.id.to_string();
    let required = |name: &'static str| {
        attrs
            .attr(name)
            .ok_or_else(|| DeviceError::MissingAttribute {
                device: device.clone(),
                attr: name,
            })
    };
    let bad = |name: &'static str, value: &str| DeviceError::BadAttribute {
        device: device.clone(),
        attr: name,
        value: value.to_owned(),
    };
    let hex = |name: &'static str| -> Result<u16, DeviceError> {
        let text = required(name)?;
        u16::from_str_radix(text.trim(), 16).map_err(|_| bad(name, &text))
    };
    let decimal = |name: &'static str| -> Result<u16, DeviceError> {
        let text = required(name)?;
        text.trim().parse().map_err(|_| bad(name, &text))
    };

    let vid = hex("idVendor")?;
    let pid = hex("idProduct")?;
    let bcd_device = hex("bcdDevice")?;
    let version = required("version")?;
    let bcd_usb = parse_version(&version).ok_or_else(|| bad("version", &version))?;
    let text = |name: &str| attrs.attr(name).filter(|s| !s.trim().is_empty());
    // Chosen by the device's maker (or an attacker): cleaned for every sink.
    let descriptor = |name: &str| {
        attrs
            .attr(name)
            .and_then(|s| super::model::descriptor_string(&s))
    };

    let interfaces = interfaces_at(Path::new(&at.syspath));
    let mut device = Device {
        vid,
        pid,
        bcd_usb,
        bcd_device,
        manufacturer: descriptor("manufacturer"),
        product: descriptor("product"),
        serial: descriptor("serial"),
        busnum: decimal("busnum")?,
        devnum: decimal("devnum")?,
        speed: text("speed").map(|s| s.trim().to_owned()),
        syspath: at.syspath,
        devnode: at.devnode,
        driver: at.driver,
        first_seen: Utc::now(),
        interfaces,
        family: None,
        soc: None,
        mode: None,
        kind: super::model::DeviceKind::Other,
        id: at.id,
    };
    device.identify();
    Ok(device)
}

/// The kernel writes bcdUSB as `"%2x.%02x"` (" 2.01" is 0x0201): both halves are hex.
pub(crate) fn parse_version(text: &str) -> Option<u16> {
    let (major, minor) = text.trim().split_once('.')?;
    let major = u8::from_str_radix(major, 16).ok()?;
    let minor = u8::from_str_radix(minor, 16).ok()?;
    Some(u16::from(major) << 8 | u16::from(minor))
}

/// One device directory in sysfs.
pub(crate) struct SysfsDir<'a>(pub &'a Path);

impl Attributes for SysfsDir<'_> {
    fn attr(&self, name: &str) -> Option<String> {
        let text = fs::read_to_string(self.0.join(name)).ok()?;
        Some(text.trim_end_matches('\n').to_owned())
    }
}

impl SysfsDir<'_> {
    /// `DEVNAME=` from the uevent file, as an absolute /dev path.
    pub fn devnode(&self) -> Option<String> {
        let uevent = self.attr("uevent")?;
        uevent
            .lines()
            .find_map(|line| line.strip_prefix("DEVNAME="))
            .map(|name| format!("/dev/{}", name.trim_start_matches("/dev/")))
    }

    /// The bound driver's name: the last component of the `driver` link.
    pub fn driver(&self) -> Option<String> {
        let target = fs::read_link(self.0.join("driver")).ok()?;
        target.file_name()?.to_str().map(str::to_owned)
    }
}

/// `<root>/bus/usb/devices/<id>`: where the kernel links every USB device by name.
pub(crate) fn device_link(sysfs_root: &Path, id: &DeviceId) -> PathBuf {
    sysfs_root.join("bus/usb/devices").join(id.as_str())
}

/// Resolves the `bus/usb/devices/<id>` link lexically, so the syspath reads
/// `<root>/devices/…` whatever the process's view of the filesystem (umockdev
/// redirects /sys; canonicalize would leak the testbed's directory).
fn resolve_link(link: &Path) -> io::Result<PathBuf> {
    let target = fs::read_link(link)?;
    let base = link.parent().unwrap_or(Path::new("/"));
    let mut out = PathBuf::new();
    for part in base.join(target).components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    Ok(out)
}

/// Reads one device by id from sysfs; `Ok(None)` when it is not there.
pub(crate) fn read_device(sysfs_root: &Path, id: &DeviceId) -> Result<Option<Device>, DeviceError> {
    let link = device_link(sysfs_root, id);
    let syspath = match resolve_link(&link) {
        Ok(path) => path,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        // Not a link (some test trees use plain directories): use the path as is.
        Err(e) if e.kind() == io::ErrorKind::InvalidInput => link.clone(),
        Err(source) => return Err(DeviceError::Sysfs { path: link, source }),
    };
    let dir = SysfsDir(&syspath);
    let at = Location {
        id: id.clone(),
        syspath: syspath.to_string_lossy().into_owned(),
        devnode: dir.devnode(),
        driver: dir.driver(),
    };
    device_from_attributes(at, &dir).map(Some)
}

/// Every USB device (not root hubs, not interfaces) under `<root>/bus/usb/devices`.
///
/// A device that vanishes or is half-written during the scan is skipped with a
/// log line; the next scan sees it settled.
pub(crate) fn scan(sysfs_root: &Path) -> Result<Vec<Device>, DeviceError> {
    let dir = sysfs_root.join("bus/usb/devices");
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        // No USB bus at all (e.g. a VM without a USB controller): nothing attached.
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(DeviceError::Sysfs { path: dir, source }),
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(id) = name.to_str().and_then(|n| n.parse::<DeviceId>().ok()) else {
            continue; // usbN root hubs and N-M:C.I interfaces
        };
        match read_device(sysfs_root, &id) {
            Ok(Some(device)) => found.push(device),
            Ok(None) => {}
            Err(e) => tracing::debug!(%id, error = %e, "skipping device during sysfs scan"),
        }
    }
    found.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DeviceKind, RockchipMode};
    use std::os::unix::fs::symlink;

    #[test]
    fn version_is_hex() {
        assert_eq!(parse_version(" 2.00"), Some(0x0200));
        assert_eq!(parse_version(" 2.01\n"), Some(0x0201));
        assert_eq!(parse_version(" 1.10"), Some(0x0110));
        assert_eq!(parse_version(" 3.20"), Some(0x0320));
        assert_eq!(parse_version("2"), None);
        assert_eq!(parse_version("x.00"), None);
    }

    fn write_device(root: &Path, devpath: &str, name: &str, attrs: &[(&str, &str)]) {
        let dir = root.join("devices").join(devpath);
        fs::create_dir_all(&dir).unwrap();
        for (k, v) in attrs {
            fs::write(dir.join(k), format!("{v}\n")).unwrap();
        }
        let links = root.join("bus/usb/devices");
        fs::create_dir_all(&links).unwrap();
        symlink(format!("../../../devices/{devpath}"), links.join(name)).unwrap();
    }

    #[test]
    fn scan_reads_a_fake_sysfs_tree() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        write_device(r, "pci0000:00/usb1", "usb1", &[("idVendor", "1d6b")]);
        write_device(
            r,
            "pci0000:00/usb1/1-2",
            "1-2",
            &[
                ("idVendor", "2207"),
                ("idProduct", "350b"),
                ("bcdDevice", "0100"),
                ("version", " 2.01"),
                ("busnum", "1"),
                ("devnum", "7"),
                ("speed", "480"),
                ("serial", "abc"),
                (
                    "uevent",
                    "MAJOR=189\nDEVNAME=bus/usb/001/007\nDEVTYPE=usb_device",
                ),
            ],
        );
        write_device(r, "pci0000:00/usb1/1-2/1-2:1.0", "1-2:1.0", &[]);
        let found = scan(r).unwrap();
        assert_eq!(found.len(), 1);
        let d = &found[0];
        assert_eq!(d.id.as_str(), "1-2");
        assert_eq!((d.vid, d.pid, d.bcd_usb), (0x2207, 0x350b, 0x0201));
        assert_eq!(d.mode, Some("loader"));
        assert_eq!(d.rockusb_mode(), Some(RockchipMode::Loader));
        assert_eq!(d.kind, DeviceKind::Rockusb);
        assert_eq!(d.devnode.as_deref(), Some("/dev/bus/usb/001/007"));
        assert_eq!(d.serial.as_deref(), Some("abc"));
        assert_eq!(d.manufacturer, None);
        assert_eq!(
            d.syspath,
            r.join("devices/pci0000:00/usb1/1-2").to_string_lossy()
        );
    }

    #[test]
    fn missing_bus_is_empty_and_bad_attributes_are_named() {
        let root = tempfile::tempdir().unwrap();
        assert!(scan(root.path()).unwrap().is_empty());
        write_device(root.path(), "x/1-3", "1-3", &[("idVendor", "zz")]);
        let err = read_device(root.path(), &"1-3".parse().unwrap()).unwrap_err();
        assert!(err.to_string().contains("idVendor"), "{err}");
    }
}
