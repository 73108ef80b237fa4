//! The board over USB, through the `rockusb` crate's libusb transport:
//!
//! - `board` — finding, opening and waiting for the rockusb device at a port; its mode and
//!   chip info; reset.
//! - `download` — sending a loader to a board in MaskROM (`db`).
//! - `target` — a board in Loader mode as a [`crate::BlockTarget`].
//! - `transfer_size` — each transfer's size, chosen from the rate measured so far.
//!
//! The port path and mode types are [`crate::port`]'s, re-exported here.

pub mod board;
pub mod download;
pub mod target;
pub mod transfer_size;

pub use board::{ChipInfo, Reset, RockusbBoard, UsbInfo};
pub use download::DownloadReport;
pub use target::{FlashInfo, LoaderTarget};

/// Rockchip's vendor id.
pub const ROCKCHIP_VID: u16 = 0x2207;

/// A rockusb device's state (MaskROM or Loader) and a board's port path, the engine's own
/// types (gatecmd's domain converts its device layer's to them).
pub use crate::port::{BadPort, DeviceId, Mode};

/// The port path of a device libusb lists (`None` for a root hub, which has no port).
pub fn port_of<T: rusb::UsbContext>(device: &rusb::Device<T>) -> Option<DeviceId> {
    let ports = device.port_numbers().ok()?;
    DeviceId::from_ports(device.bus_number(), &ports).ok()
}

/// The mode a device descriptor's bcdUSB says (bit 0, rkdeveloptool's `RKScan.cpp`).
pub fn mode_of(bcd_usb: u16) -> Mode {
    Mode::from_bcd_usb(bcd_usb)
}
