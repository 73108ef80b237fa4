//! Whether the device a command ran on left the bus while it ran (unplugged, powered off,
//! or reset by the command itself), for the result: a tool's own words for a vanished
//! device ("Write LBA failed!") do not say so, and the agent's next step depends on it.
//!
//! Two witnesses, because either may be late: the registry's events (removal, or a
//! re-enumeration with a new device number) received during the run, and the device number
//! in sysfs at the end (the kernel removes the entry before the tool has printed its error;
//! the udev event may arrive after the tool exited).

use std::path::PathBuf;

use gatecmd_core::events::{Events, TryRecvError};

use gatecmd_devices::{DeviceEvent, DeviceId, Registry};

use crate::config::Config;
use crate::state::AppState;

/// The device a command ran on left the bus while it ran (the surface words it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Left {
    pub device: DeviceId,
    /// Whether something is attached at its port again now.
    pub attached_now: bool,
    /// Its mode now, when it is back and the registry knows it.
    pub mode_now: Option<String>,
}

/// Watches one device from just before the spawn to the end of the run.
pub struct Watch {
    id: DeviceId,
    devnum: u16,
    events: Events<DeviceEvent>,
    devnum_file: PathBuf,
}

impl Watch {
    /// `None` when the command is bound to no device, or it is not attached.
    /// `config` is the call's snapshot (where sysfs is).
    pub fn start(state: &AppState, config: &Config, device: Option<&DeviceId>) -> Option<Watch> {
        let id = device?.clone();
        // Subscribed before the look, so that a removal between the two is an event.
        let events = state.registry.subscribe();
        // The registry now, not the call's snapshot: the call may have queued for its locks
        // while the board re-enumerated, and what counts is the device the child gets.
        let devnum = state.registry.get(&id)?.devnum;
        let devnum_file = config
            .monitor
            .sysfs_root
            .join("bus/usb/devices")
            .join(id.as_str())
            .join("devnum");
        Some(Watch {
            id,
            devnum,
            events,
            devnum_file,
        })
    }

    /// What happened to the device, if it left; call when the child is gone.
    pub fn finish(mut self, registry: &Registry) -> Option<Left> {
        let mut left = false;
        loop {
            match self.events.try_recv() {
                Ok(DeviceEvent::Removed(d)) if d.id == self.id => left = true,
                Ok(DeviceEvent::Added(d)) if d.id == self.id && d.devnum != self.devnum => {
                    left = true
                }
                Ok(DeviceEvent::Changed { new, .. })
                    if new.id == self.id && new.devnum != self.devnum =>
                {
                    left = true
                }
                Ok(_) | Err(TryRecvError::Lagged(_)) => {}
                Err(TryRecvError::Empty | TryRecvError::Closed) => break,
            }
        }
        let in_sysfs = std::fs::read_to_string(&self.devnum_file)
            .ok()
            .and_then(|s| s.trim().parse::<u16>().ok());
        left |= in_sysfs != Some(self.devnum);
        if !left {
            return None;
        }
        let now = in_sysfs.and(registry.get(&self.id));
        Some(Left {
            mode_now: now.as_ref().and_then(|d| d.mode).map(|m| m.to_string()),
            attached_now: in_sysfs.is_some(),
            device: self.id,
        })
    }
}
