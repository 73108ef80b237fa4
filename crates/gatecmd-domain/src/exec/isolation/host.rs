//! The host side of isolation: where the real sysfs and devfs are, and which right to
//! mount this process has.

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::Serialize;

/// Where the real sysfs and devfs are (tests point them at a umockdev testbed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roots {
    pub sysfs: PathBuf,
    pub devfs: PathBuf,
}

impl Roots {
    /// The directory whose listing libudev and libusb enumerate.
    pub fn listing(&self) -> PathBuf {
        self.sysfs.join("bus/usb/devices")
    }

    /// The usbfs device directory (`/dev/bus/usb`).
    pub fn usbfs(&self) -> PathBuf {
        self.devfs.join("bus/usb")
    }
}

/// How the child gets the right to mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Privilege {
    /// gatecmd runs as root: a mount namespace is enough.
    Root,
    /// Unprivileged: a user namespace mapping only gatecmd's own uid and gid, then a
    /// mount namespace inside it.
    UserNamespace,
}

impl Privilege {
    /// The mode this process would use.
    pub fn current() -> Self {
        if nix::unistd::geteuid().is_root() {
            Privilege::Root
        } else {
            Privilege::UserNamespace
        }
    }
}
