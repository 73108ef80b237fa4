//! USB devices attached to the host: the model, Rockchip identification, the
//! shared registry with its change stream, and the backends that keep it current.
//!
//! # Layout
//!
//! - [`model`]: `Device`, `DeviceId` (the physical port path), `VidPid`, events.
//! - [`families`]: which SoC family's recovery or flashing mode a device is in (rockusb,
//!   fastboot, DFU, i.MX SDP, sunxi FEL, …): the table of USB identities with their
//!   sources, interface classes from the descriptors, and the rule that picks a row.
//! - [`registry`]: the one source of truth (dashmap) and its broadcast channel.
//! - `udev` (feature `udev`): libudev enumeration + netlink monitor on tokio.
//! - `libusb`: rusb enumeration + hotplug, for hosts or builds without udev.
//! - `sysfs`: attribute parsing and the periodic-rescan fallback.
//! - `action`: what a backend reports to the monitor (one channel message type).
//! - `monitor`: backend choice, start/stop, and the re-enumeration grace.
//! - `error`: the device layer's errors, worded for the agent or operator.
//!
//! See `docs/DEVICES.md` for the semantics.

mod action;
mod error;
pub mod families;
mod libusb;
pub mod model;
mod monitor;
pub mod registry;
mod sysfs;
#[cfg(feature = "udev")]
mod udev;

pub use error::DeviceError;
pub use model::{Device, DeviceEvent, DeviceId, DeviceKind, RockchipMode, VidPid};
pub use monitor::{
    Backend, DEFAULT_REMOVAL_GRACE, MonitorError, MonitorHandle, MonitorOptions, start_monitor,
};
pub use registry::{EventSource, Registry};
