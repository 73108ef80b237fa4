//! libusb backend (rusb): enumeration, plus hotplug callbacks where libusb
//! supports them, for hosts or builds without udev.
//!
//! The port path comes from the bus number and `port_numbers()`. Strings are read
//! from sysfs when the host has it (no USB transfer, so a board mid-flash is not
//! disturbed, and umockdev can serve them); only without sysfs do we ask the
//! device itself.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use chrono::Utc;
use rusb::{Context, UsbContext};
use tokio::sync::mpsc::UnboundedSender;

use super::action::Action;
use super::error::DeviceError;
use super::model::{Device, DeviceId};
use super::sysfs;

/// How long a string-descriptor read may take when there is no sysfs.
const STRING_TIMEOUT: Duration = Duration::from_millis(200);
/// How often the event thread wakes to check whether it should stop.
const EVENT_WAKEUP: Duration = Duration::from_millis(200);

pub(crate) fn open_context() -> Result<Context, DeviceError> {
    Context::new().map_err(|source| DeviceError::Usb {
        action: "initialising libusb",
        source,
    })
}

/// `None` for root hubs: they have no port path.
fn id_of<T: UsbContext>(dev: &rusb::Device<T>) -> Option<DeviceId> {
    let ports = dev.port_numbers().ok()?;
    DeviceId::from_ports(dev.bus_number(), &ports).ok()
}

/// The interface classes of the active configuration (what the kernel's `descriptors`
/// attribute holds on Linux); none when the configuration cannot be read.
fn interfaces_of<T: UsbContext>(dev: &rusb::Device<T>) -> Vec<crate::families::Class> {
    let Ok(config) = dev.active_config_descriptor() else {
        return Vec::new();
    };
    let mut out: Vec<crate::families::Class> = Vec::new();
    for interface in config.interfaces() {
        for alt in interface.descriptors() {
            let c = crate::families::Class {
                class: alt.class_code(),
                subclass: alt.sub_class_code(),
                protocol: alt.protocol_code(),
            };
            if !out.contains(&c) {
                out.push(c);
            }
        }
    }
    out
}

/// libusb decodes BCD into (major, minor, sub-minor); put the digits back.
fn bcd(v: rusb::Version) -> u16 {
    let major = u16::from(v.major());
    (major / 10) << 12
        | (major % 10) << 8
        | u16::from(v.minor() & 0xf) << 4
        | u16::from(v.sub_minor() & 0xf)
}

/// In sysfs's notation (Mbit/s), so both backends report the same text.
fn speed_text(speed: rusb::Speed) -> Option<String> {
    let text = match speed {
        rusb::Speed::Low => "1.5",
        rusb::Speed::Full => "12",
        rusb::Speed::High => "480",
        rusb::Speed::Super => "5000",
        rusb::Speed::SuperPlus => "10000",
        _ => return None,
    };
    Some(text.to_owned())
}

/// The model for one libusb device; `Ok(None)` for root hubs.
pub(crate) fn device_from_usb<T: UsbContext>(
    dev: &rusb::Device<T>,
    sysfs_root: &Path,
) -> Result<Option<Device>, DeviceError> {
    let Some(id) = id_of(dev) else {
        return Ok(None);
    };
    let desc = dev.device_descriptor().map_err(|source| DeviceError::Usb {
        action: "reading a device descriptor",
        source,
    })?;
    let (vid, pid) = (desc.vendor_id(), desc.product_id());
    let bcd_usb = bcd(desc.usb_version());
    let mut device = Device {
        id,
        vid,
        pid,
        bcd_usb,
        bcd_device: bcd(desc.device_version()),
        manufacturer: None,
        product: None,
        serial: None,
        busnum: u16::from(dev.bus_number()),
        devnum: u16::from(dev.address()),
        speed: speed_text(dev.speed()),
        syspath: String::new(),
        devnode: None,
        driver: None,
        first_seen: Utc::now(),
        interfaces: interfaces_of(dev),
        family: None,
        soc: None,
        mode: None,
        kind: super::model::DeviceKind::Other,
    };
    device.identify();
    match sysfs::read_device(sysfs_root, &device.id) {
        // Only trust sysfs if it describes this very device, not a predecessor on the port.
        Ok(Some(s)) if s.busnum == device.busnum && s.devnum == device.devnum => {
            device.manufacturer = s.manufacturer;
            device.product = s.product;
            device.serial = s.serial;
            device.syspath = s.syspath;
            device.devnode = s.devnode;
            device.driver = s.driver;
        }
        Ok(_) | Err(_) => read_strings_over_usb(dev, &desc, &mut device),
    }
    Ok(Some(device))
}

/// Fallback for hosts without sysfs; failures leave the strings empty.
fn read_strings_over_usb<T: UsbContext>(
    dev: &rusb::Device<T>,
    desc: &rusb::DeviceDescriptor,
    device: &mut Device,
) {
    let Ok(handle) = dev.open() else { return };
    let Some(lang) = handle
        .read_languages(STRING_TIMEOUT)
        .ok()
        .and_then(|langs| langs.first().copied())
    else {
        return;
    };
    // Chosen by the device's maker (or an attacker): cleaned for every sink.
    let clean = |s: rusb::Result<String>| s.ok().and_then(|s| super::model::descriptor_string(&s));
    device.manufacturer = clean(handle.read_manufacturer_string(lang, desc, STRING_TIMEOUT));
    device.product = clean(handle.read_product_string(lang, desc, STRING_TIMEOUT));
    device.serial = clean(handle.read_serial_number_string(lang, desc, STRING_TIMEOUT));
}

pub(crate) fn enumerate(ctx: &Context, sysfs_root: &Path) -> Result<Vec<Device>, DeviceError> {
    let list = ctx.devices().map_err(|source| DeviceError::Usb {
        action: "listing USB devices",
        source,
    })?;
    let mut found = Vec::new();
    for dev in list.iter() {
        match device_from_usb(&dev, sysfs_root) {
            Ok(Some(device)) => found.push(device),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(bus = dev.bus_number(), address = dev.address(), error = %e, "skipping USB device")
            }
        }
    }
    found.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(found)
}

struct Forward {
    actions: UnboundedSender<Action>,
    sysfs_root: std::path::PathBuf,
}

impl rusb::Hotplug<Context> for Forward {
    fn device_arrived(&mut self, dev: rusb::Device<Context>) {
        // Descriptors are cached by libusb and sysfs reads are plain file reads:
        // both are allowed inside a hotplug callback.
        match device_from_usb(&dev, &self.sysfs_root) {
            Ok(Some(device)) => {
                let _ = self.actions.send(Action::Present(Box::new(device)));
            }
            Ok(None) => {}
            Err(e) => tracing::debug!(error = %e, "cannot read arriving USB device"),
        }
    }

    fn device_left(&mut self, dev: rusb::Device<Context>) {
        if let Some(id) = id_of(&dev) {
            let _ = self.actions.send(Action::Gone(id));
        }
    }
}

/// The thread that runs libusb's event loop (hotplug callbacks fire only inside
/// `handle_events`). Dropping it asks the thread to stop; it notices within
/// `EVENT_WAKEUP` and drops the callback registration on its way out.
pub(crate) struct HotplugThread {
    stop: Arc<AtomicBool>,
}

impl Drop for HotplugThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Registers the callback (before the caller enumerates, so nothing slips between)
/// and starts the event thread.
pub(crate) fn start_hotplug(
    ctx: &Context,
    sysfs_root: &Path,
    actions: UnboundedSender<Action>,
) -> Result<HotplugThread, DeviceError> {
    let forward = Forward {
        actions,
        sysfs_root: sysfs_root.to_owned(),
    };
    let registration = rusb::HotplugBuilder::new()
        .enumerate(false)
        .register(ctx, Box::new(forward))
        .map_err(|source| DeviceError::Usb {
            action: "registering a hotplug callback",
            source,
        })?;
    let stop = Arc::new(AtomicBool::new(false));
    let thread_stop = Arc::clone(&stop);
    let thread_ctx = ctx.clone();
    thread::Builder::new()
        .name("gatecmd-libusb".into())
        .spawn(move || {
            let _registration = registration;
            while !thread_stop.load(Ordering::Relaxed) {
                if let Err(e) = thread_ctx.handle_events(Some(EVENT_WAKEUP)) {
                    tracing::error!(error = %e, "libusb event loop failed; hotplug events are lost");
                    return;
                }
            }
        })
        .map_err(|e| DeviceError::BackendUnavailable {
            backend: "libusb hotplug",
            reason: format!("cannot start the event thread: {e}"),
        })?;
    Ok(HotplugThread { stop })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bcd_round_trips() {
        for raw in [0x0200, 0x0201, 0x0110, 0x0320, 0x1234, 0x0100] {
            assert_eq!(bcd(rusb::Version::from_bcd(raw)), raw, "{raw:04x}");
        }
    }
}
