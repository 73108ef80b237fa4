//! Errors of the device layer, worded for the agent or operator who reads them.

use std::io;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("`{text}` is not a USB device id: {reason}")]
    InvalidId { text: String, reason: &'static str },

    #[error("`{text}` is not a VID:PID; expected two hex numbers like 2207:350b")]
    InvalidVidPid { text: String },

    #[error(
        "USB device {device}: attribute `{attr}` is missing (was it unplugged while being read?)"
    )]
    MissingAttribute { device: String, attr: &'static str },

    #[error("USB device {device}: attribute `{attr}` has unexpected value {value:?}")]
    BadAttribute {
        device: String,
        attr: &'static str,
        value: String,
    },

    #[error("reading {}: {source}", path.display())]
    Sysfs {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    #[error("udev: {action} failed: {source}")]
    Udev {
        action: &'static str,
        #[source]
        source: io::Error,
    },

    #[error("libusb: {action} failed: {source}")]
    Usb {
        action: &'static str,
        #[source]
        source: rusb::Error,
    },

    #[error("the {backend} device backend is not available: {reason}")]
    BackendUnavailable {
        backend: &'static str,
        reason: String,
    },
}
