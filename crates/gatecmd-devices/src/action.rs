//! What a backend tells the monitor: the one message type on the channel between
//! the backends (udev, libusb, the sysfs poll) and the task that applies them to the
//! registry. It lives apart from the monitor so that the backends, which the monitor
//! starts, do not import the monitor back.

use super::model::{Device, DeviceId};

/// One thing a backend observed.
#[derive(Debug)]
pub(crate) enum Action {
    /// The device on this port is (now) in this state.
    Present(Box<Device>),
    /// The port is empty.
    Gone(DeviceId),
    /// A full rescan: exactly these devices are attached.
    Rescan(Vec<Device>),
}
