//! The rockusb device at a port: found by port path among libusb's devices, checked (VID
//! 0x2207 and a vendor interface ff/06/05, as rkdeveloptool's `InitializeUsb` looks for),
//! opened through the `rockusb` crate; its mode, chip info, and reset.

use std::thread;
use std::time::{Duration, Instant};

use rockusb::protocol::ResetOpcode;
use rusb::UsbContext;
use serde::Serialize;

use super::{DeviceId, Mode, ROCKCHIP_VID};
use crate::error::FlashError;

/// How often a port is looked at while waiting for a re-enumeration.
const POLL: Duration = Duration::from_millis(50);

/// How long a board whose reset's answer was lost is given to leave its port.
const RESET_GONE: Duration = Duration::from_secs(2);

/// What the host sees of the device at a port.
#[derive(Debug, Clone, Serialize)]
pub struct UsbInfo {
    /// The port path.
    pub port: DeviceId,
    /// Vendor id.
    pub vid: u16,
    /// Product id (the SoC: 0x350b is RK3588).
    pub pid: u16,
    /// bcdUSB of the device descriptor.
    pub bcd_usb: u16,
    /// MaskROM or Loader (bit 0 of bcdUSB).
    pub mode: Mode,
    /// Bus number (changes with nothing; part of the port path).
    pub bus: u8,
    /// Device address (changes at every re-enumeration).
    pub address: u8,
}

/// A rockusb device, open.
pub struct RockusbBoard {
    pub(crate) dev: rockusb::libusb::Device,
    pub(crate) usb: UsbInfo,
}

/// `READ_CHIP_INFO`: 16 bytes as the ROM keeps them.
#[derive(Debug, Clone, Serialize)]
pub struct ChipInfo {
    /// The bytes as received.
    pub raw: Vec<u8>,
    /// Each 4-byte group reversed, printable characters kept (e.g. `3588…`).
    pub text: String,
}

impl ChipInfo {
    fn from_raw(raw: &[u8]) -> ChipInfo {
        let text = raw
            .chunks(4)
            .flat_map(|g| g.iter().rev())
            .filter(|b| b.is_ascii_graphic())
            .map(|&b| b as char)
            .collect();
        ChipInfo {
            raw: raw.to_vec(),
            text,
        }
    }
}

/// How to reset a board.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Reset {
    /// Reboot and boot from flash (`rd`).
    Boot,
    /// Reboot into the mask ROM (`rd 3`).
    MaskRom,
}

fn bcd(v: rusb::Version) -> u16 {
    let major = v.major() as u16;
    ((major / 10) << 12) | ((major % 10) << 8) | ((v.minor() as u16) << 4) | v.sub_minor() as u16
}

fn list_err(e: rusb::Error, port: &DeviceId) -> FlashError {
    FlashError::Usb {
        port: port.clone(),
        step: "listing USB devices".into(),
        reason: e.to_string(),
        advice: "libusb cannot read this machine's USB devices (is /dev/bus/usb there?)".into(),
    }
}

/// The device libusb lists at `port`, and what its descriptor says (not opened).
pub fn probe(
    port: &DeviceId,
) -> Result<Option<(rusb::Device<rusb::GlobalContext>, UsbInfo)>, FlashError> {
    let list = rusb::GlobalContext::default()
        .devices()
        .map_err(|e| list_err(e, port))?;
    for d in list.iter() {
        if super::port_of(&d).as_ref() != Some(port) {
            continue;
        }
        let desc = d.device_descriptor().map_err(|e| list_err(e, port))?;
        let bcd_usb = bcd(desc.usb_version());
        let info = UsbInfo {
            port: port.clone(),
            vid: desc.vendor_id(),
            pid: desc.product_id(),
            bcd_usb,
            mode: super::mode_of(bcd_usb),
            bus: d.bus_number(),
            address: d.address(),
        };
        return Ok(Some((d, info)));
    }
    Ok(None)
}

/// Whether the device has the rockusb vendor interface (class ff, subclass 06, protocol 05).
fn has_rockusb_interface(d: &rusb::Device<rusb::GlobalContext>) -> bool {
    let Ok(cfg) = d
        .active_config_descriptor()
        .or_else(|_| d.config_descriptor(0))
    else {
        return false;
    };
    cfg.interfaces().any(|i| {
        i.descriptors().any(|a| {
            a.class_code() == 0xff && a.sub_class_code() == 0x06 && a.protocol_code() == 0x05
        })
    })
}

impl RockusbBoard {
    /// Opens the rockusb device at `port`.
    pub fn open(port: &DeviceId) -> Result<RockusbBoard, FlashError> {
        let Some((d, usb)) = probe(port)? else {
            return Err(FlashError::NoDevice { port: port.clone() });
        };
        if usb.vid != ROCKCHIP_VID {
            return Err(FlashError::NotRockusb {
                port: port.clone(),
                vid: usb.vid,
                pid: usb.pid,
                why: "not Rockchip's vendor id 2207",
            });
        }
        if !has_rockusb_interface(&d) {
            return Err(FlashError::NotRockusb {
                port: port.clone(),
                vid: usb.vid,
                pid: usb.pid,
                why: "no rockusb interface ff/06/05: an Android (adb/MTP) or mass-storage mode",
            });
        }
        let handle = d.open().map_err(|source| FlashError::DeviceOpen {
            port: port.clone(),
            hint: match source {
                rusb::Error::Access => {
                    ": this user may not open it: install the project's udev rules (udev-rules/) and replug, or run as the service's group"
                }
                rusb::Error::Busy => ": another program holds it (rkdeveloptool?)",
                _ => "",
            },
            source,
        })?;
        let dev = rockusb::libusb::Device::from_usb_device(handle).map_err(|e| {
            FlashError::DeviceOpen {
                port: port.clone(),
                hint: match e.error {
                    rusb::Error::Busy => ": another program holds its interface (rkdeveloptool?)",
                    _ => "",
                },
                source: e.error,
            }
        })?;
        Ok(RockusbBoard { dev, usb })
    }

    /// Waits up to `timeout` for a rockusb device in `mode` at `port` (a board that
    /// re-enumerates after a loader download or a reset), and opens it. An open refused while
    /// udev is still applying permissions is retried until the deadline.
    pub fn wait(
        port: &DeviceId,
        mode: Mode,
        timeout: Duration,
    ) -> Result<RockusbBoard, FlashError> {
        let t0 = Instant::now();
        let mut seen = String::from("nothing");
        loop {
            match probe(port)? {
                Some((_, u)) if u.vid == ROCKCHIP_VID && u.mode == mode => {
                    match RockusbBoard::open(port) {
                        Ok(b) => return Ok(b),
                        Err(e) => seen = format!("a {mode} device that could not be opened ({e})"),
                    }
                }
                Some((_, u)) => {
                    seen = format!("{:04x}:{:04x} in {} mode", u.vid, u.pid, u.mode);
                }
                None => {}
            }
            if t0.elapsed() >= timeout {
                return Err(FlashError::Timeout {
                    port: port.clone(),
                    what: match mode {
                        Mode::Loader => "come back in Loader mode",
                        Mode::MaskRom => "come back in MaskROM mode",
                    },
                    secs: timeout.as_secs_f64(),
                    seen: format!(" (last seen there: {seen})"),
                });
            }
            thread::sleep(POLL);
        }
    }

    /// What the host sees of it.
    pub fn usb(&self) -> &UsbInfo {
        &self.usb
    }

    /// MaskROM or Loader.
    pub fn mode(&self) -> Mode {
        self.usb.mode
    }

    /// `READ_CHIP_INFO` (answered in both modes).
    pub fn chip_info(&mut self) -> Result<ChipInfo, FlashError> {
        let c = self
            .dev
            .chip_info()
            .map_err(|e| usb_err(&self.usb.port, "READ_CHIP_INFO", e, "nothing was written"))?;
        Ok(ChipInfo::from_raw(c.inner()))
    }

    /// Resets the board (`DEVICE_RESET`); it leaves the bus and comes back booted from flash
    /// or in MaskROM. Loader mode only (the mask ROM has no reset command).
    pub fn reset(mut self, how: Reset) -> Result<(), FlashError> {
        if self.usb.mode != Mode::Loader {
            return Err(FlashError::WrongMode {
                port: self.usb.port.clone(),
                found: self.usb.mode,
                needed: Mode::Loader,
                step: "reset",
                advice: "the mask ROM has no reset command: power-cycle the board instead",
            });
        }
        let op = match how {
            Reset::Boot => ResetOpcode::Reset,
            Reset::MaskRom => ResetOpcode::Maskrom,
        };
        match self.dev.reset_device(op) {
            Ok(()) => Ok(()),
            // A loader resets right after its answer, and a slow host may read the answer
            // after the device went (seen in the service lane's guest under load: an I/O
            // error, the board already booting). A device gone from the port, or back at
            // another address, did reset.
            Err(rockusb::device::Error::UsbError(
                rusb::Error::Io | rusb::Error::NoDevice | rusb::Error::Pipe,
            )) if self.left_within(RESET_GONE) => Ok(()),
            Err(e) => Err(usb_err(
                &self.usb.port,
                "DEVICE_RESET",
                e,
                "the flash was not touched",
            )),
        }
    }

    /// Whether the device left its port (or is there at another address, re-enumerated)
    /// within `wait`.
    fn left_within(&self, wait: Duration) -> bool {
        let t0 = Instant::now();
        loop {
            match probe(&self.usb.port) {
                Ok(None) => return true,
                Ok(Some((_, u))) if u.address != self.usb.address => return true,
                Ok(Some(_)) | Err(_) => {}
            }
            if t0.elapsed() >= wait {
                return false;
            }
            thread::sleep(POLL);
        }
    }
}

/// A rockusb command's failure, worded for the agent: the board's refusal (failed status) or
/// the transport's error.
pub(crate) fn usb_err(
    port: &DeviceId,
    step: &str,
    e: rockusb::device::Error<rusb::Error>,
    written: &str,
) -> FlashError {
    use rockusb::operation::UsbOperationError;
    let (reason, advice) = match &e {
        rockusb::device::Error::OperationError(UsbOperationError::FailedStatus) => (
            "the board answered with a failed status".to_string(),
            format!("{written}; a board in MaskROM refuses flash commands (send a loader first)"),
        ),
        rockusb::device::Error::UsbError(rusb::Error::NoDevice) => (
            "the device left the bus".to_string(),
            format!(
                "{written}; the board was reset, unplugged or powered off: power it on into MaskROM and start again"
            ),
        ),
        rockusb::device::Error::UsbError(rusb::Error::Timeout) => (
            "no answer within 5 s".to_string(),
            format!("{written}; the board hangs: power-cycle it into MaskROM and start again"),
        ),
        other => (
            other.to_string(),
            format!("{written}; power-cycle the board into MaskROM and start again"),
        ),
    };
    FlashError::Usb {
        port: port.clone(),
        step: step.to_string(),
        reason,
        advice,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bcd_usb_is_rebuilt_from_rusbs_version() {
        assert_eq!(bcd(rusb::Version::from_bcd(0x0201)), 0x0201);
        assert_eq!(bcd(rusb::Version::from_bcd(0x0200)), 0x0200);
        assert_eq!(bcd(rusb::Version::from_bcd(0x0310)), 0x0310);
    }

    #[test]
    fn chip_info_reads_as_the_rom_keeps_it() {
        let c = ChipInfo::from_raw(b"8853001V\0\0\0\0\0\0\0\0");
        assert_eq!(c.text, "3588V100");
    }
}
