//! Linux udev backend: libudev enumeration at start, then a netlink monitor
//! (subsystem `usb`, devtype `usb_device`) driven by tokio through `AsyncFd`.
//!
//! Which netlink source to listen to is decided by [`detect_event_source`]: the
//! "udev" source only carries events a running udev daemon rebroadcasts after
//! processing them; without a daemon it stays silent forever, so we listen to raw
//! kernel uevents instead (and the caller falls back to a sysfs rescan when even
//! that socket cannot be opened).

use std::os::unix::io::{AsRawFd, RawFd};
use std::path::Path;

use ::udev as libudev;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc::UnboundedSender;

use super::action::Action;
use super::error::DeviceError;
use super::model::{Device, DeviceId};
use super::sysfs::{self, Attributes, Location};

/// The socket systemd-udevd (and eudev) create while the daemon runs.
const UDEV_CONTROL: &str = "/run/udev/control";

/// Which netlink multicast group carries USB events on this host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UdevEvents {
    /// A udev daemon processes kernel events and rebroadcasts them ("udev" group).
    Daemon,
    /// No daemon: only the kernel's own uevents ("kernel" group) arrive.
    Kernel,
}

/// The detection rule, kept pure so it can be tested:
/// - `UMOCKDEV_DIR` set → `Daemon`: umockdev's preload emulates the "udev" monitor
///   socket (and no real daemon exists inside a testbed, so the second rule would
///   wrongly pick the kernel source, which umockdev does not feed).
/// - `/run/udev/control` exists → `Daemon`.
/// - otherwise → `Kernel`.
pub(crate) fn detect_event_source(umockdev_dir_set: bool, udev_control_exists: bool) -> UdevEvents {
    if umockdev_dir_set || udev_control_exists {
        UdevEvents::Daemon
    } else {
        UdevEvents::Kernel
    }
}

pub(crate) fn detect() -> UdevEvents {
    detect_event_source(
        std::env::var_os("UMOCKDEV_DIR").is_some(),
        Path::new(UDEV_CONTROL).exists(),
    )
}

struct UdevAttrs<'a>(&'a libudev::Device);

impl Attributes for UdevAttrs<'_> {
    fn attr(&self, name: &str) -> Option<String> {
        let value = self.0.attribute_value(name)?;
        Some(value.to_string_lossy().trim_end_matches('\n').to_owned())
    }
}

/// The model for a libudev device; `Ok(None)` for root hubs and interfaces.
fn device_from_udev(dev: &libudev::Device) -> Result<Option<Device>, DeviceError> {
    if dev.devtype().is_some_and(|t| t != "usb_device") {
        return Ok(None);
    }
    let Some(id) = id_of(dev) else {
        return Ok(None);
    };
    let at = Location {
        id,
        syspath: dev.syspath().to_string_lossy().into_owned(),
        devnode: dev.devnode().map(|p| p.to_string_lossy().into_owned()),
        driver: dev.driver().map(|d| d.to_string_lossy().into_owned()),
    };
    sysfs::device_from_attributes(at, &UdevAttrs(dev)).map(Some)
}

/// The port path is the sysname; `usbN` (root hub) does not parse and is skipped.
fn id_of(dev: &libudev::Device) -> Option<DeviceId> {
    dev.sysname().to_str()?.parse().ok()
}

/// Every attached USB device, root hubs excluded.
pub(crate) fn enumerate() -> Result<Vec<Device>, DeviceError> {
    let udev_err = |action| move |source| DeviceError::Udev { action, source };
    let mut en = libudev::Enumerator::new().map_err(udev_err("creating an enumerator"))?;
    en.match_subsystem("usb")
        .map_err(udev_err("filtering on subsystem usb"))?;
    en.match_property("DEVTYPE", "usb_device")
        .map_err(udev_err("filtering on devtype usb_device"))?;
    let mut found = Vec::new();
    for dev in en
        .scan_devices()
        .map_err(udev_err("scanning USB devices"))?
    {
        match device_from_udev(&dev) {
            Ok(Some(device)) => found.push(device),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(syspath = %dev.syspath().display(), error = %e, "skipping USB device")
            }
        }
    }
    found.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(found)
}

/// A listening monitor socket that may move to the tokio worker running its task.
pub(crate) struct MonitorSocket(libudev::MonitorSocket);

// SAFETY: libudev objects are not thread-safe for *concurrent* use, but moving one
// to another thread is fine. This wrapper is private to the device layer and owned
// by exactly one watch task, which is the only code that touches the socket and
// the devices it yields (created and dropped within one poll, never across an
// await); tokio may resume that task on another worker, never run it twice at once.
unsafe impl Send for MonitorSocket {}
// SAFETY: see above; `AsyncFd::readable` holds `&MonitorSocket` across an await,
// which requires Sync, but no second reference ever exists outside that task.
unsafe impl Sync for MonitorSocket {}

impl AsRawFd for MonitorSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// Opens the monitor before enumerating, so no event between the two is lost.
pub(crate) fn open_monitor(events: UdevEvents) -> Result<MonitorSocket, DeviceError> {
    let udev_err = |action| move |source| DeviceError::Udev { action, source };
    let builder = match events {
        UdevEvents::Daemon => libudev::MonitorBuilder::new(),
        UdevEvents::Kernel => libudev::MonitorBuilder::new_kernel(),
    }
    .map_err(udev_err("creating a netlink monitor"))?;
    let socket = builder
        .match_subsystem_devtype("usb", "usb_device")
        .map_err(udev_err("filtering the monitor on usb/usb_device"))?
        .listen()
        .map_err(udev_err("listening on the netlink monitor"))?;
    Ok(MonitorSocket(socket))
}

/// What one uevent means for the registry.
fn action_for(event: &libudev::Event) -> Option<Action> {
    let dev = event.device();
    match event.event_type() {
        libudev::EventType::Remove => id_of(&dev).map(Action::Gone),
        // add, change, bind, unbind: re-read the device as it is now.
        libudev::EventType::Add
        | libudev::EventType::Change
        | libudev::EventType::Bind
        | libudev::EventType::Unbind => match device_from_udev(&dev) {
            Ok(found) => found.map(|d| Action::Present(Box::new(d))),
            Err(e) => {
                // Usually the device went away between the event and the read; its
                // remove event follows.
                tracing::debug!(syspath = %dev.syspath().display(), error = %e, "cannot read USB device after uevent");
                None
            }
        },
        libudev::EventType::Unknown => None,
    }
}

/// Forwards monitor events as actions until the receiver goes away.
pub(crate) async fn watch(socket: MonitorSocket, actions: UnboundedSender<Action>) {
    // SAFETY: the fd belongs to the libudev monitor inside `socket`, which the
    // AsyncFd owns; it stays open and unchanged until the AsyncFd is dropped.
    let registered = unsafe { AsyncFd::register_with_interest(socket, Interest::READABLE) };
    let fd = match registered {
        Ok(fd) => fd,
        Err(e) => {
            tracing::error!(error = %e, "cannot register the udev monitor with tokio; hotplug events are lost");
            return;
        }
    };
    loop {
        let mut ready = match fd.readable().await {
            Ok(ready) => ready,
            Err(e) => {
                tracing::error!(error = %e, "udev monitor failed; hotplug events are lost");
                return;
            }
        };
        // libudev returns None once the non-blocking socket is drained.
        for event in ready.get_inner().0.iter() {
            tracing::trace!(action = %event.event_type(), sysname = ?event.sysname(), "uevent");
            if let Some(action) = action_for(&event)
                && actions.send(action).is_err()
            {
                return;
            }
        }
        ready.clear_ready();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection_rule() {
        assert_eq!(detect_event_source(true, false), UdevEvents::Daemon);
        assert_eq!(detect_event_source(false, true), UdevEvents::Daemon);
        assert_eq!(detect_event_source(true, true), UdevEvents::Daemon);
        assert_eq!(detect_event_source(false, false), UdevEvents::Kernel);
    }
}
