//! Which lock key a device is taken under: its class's `lock_group`, or its VID:PID. Lock
//! policy, so it lives with the locks; the tools, the resources, the views and the
//! lost-device watcher all ask here.

use crate::config::{Config, DeviceClass};
use gatecmd_devices::Device;

use super::LockKey;

/// The class a device belongs to: the first `devices:` entry that matches it.
pub fn class_of<'a>(config: &'a Config, d: &Device) -> Option<&'a DeviceClass> {
    config.devices.iter().find(|c| c.matches(d))
}

/// The lock key of a device: its class's lock group, or its VID:PID.
pub fn lock_key_of(config: &Config, d: &Device) -> LockKey {
    match class_of(config, d).and_then(|c| c.lock_group.as_ref()) {
        Some(g) => LockKey::Group(g.clone()),
        None => LockKey::usb(d.vid, d.pid),
    }
}
