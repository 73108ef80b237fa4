//! The board over USB, through the `rockusb` crate's libusb transport:
//!
//! - `port` — port paths (`1-1`, `3-2.4`), the board's identity across re-enumerations.
//! - `board` — finding, opening and waiting for the rockusb device at a port; its mode and
//!   chip info; reset.
//! - `download` — sending a loader to a board in MaskROM (`db`).
//! - `target` — a board in Loader mode as a [`crate::BlockTarget`].

pub mod board;
pub mod download;
pub mod port;
pub mod target;

use serde::Serialize;

pub use board::{ChipInfo, Reset, RockusbBoard, UsbInfo};
pub use download::DownloadReport;
pub use port::{BadPortPath, PortPath};
pub use target::{FlashInfo, LoaderTarget};

/// Rockchip's vendor id.
pub const ROCKCHIP_VID: u16 = 0x2207;

/// What a rockusb device is running, as the host tells it: bit 0 of bcdUSB (rkdeveloptool's
/// `RKScan.cpp`): 0 is the mask ROM, 1 a loader (usbplug or U-Boot's rockusb).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Mode {
    /// The boot ROM: takes a loader (`download boot`), has no flash driver.
    MaskRom,
    /// A loader: reads and writes the flash.
    Loader,
}

impl Mode {
    /// The mode a device descriptor's bcdUSB says.
    pub fn from_bcd_usb(bcd: u16) -> Mode {
        if bcd & 1 == 0 {
            Mode::MaskRom
        } else {
            Mode::Loader
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mode::MaskRom => "MaskROM",
            Mode::Loader => "Loader",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mode_is_bit_0_of_bcd_usb() {
        assert_eq!(Mode::from_bcd_usb(0x0200), Mode::MaskRom);
        assert_eq!(Mode::from_bcd_usb(0x0201), Mode::Loader);
        assert_eq!(Mode::from_bcd_usb(0x0210), Mode::MaskRom);
    }
}
