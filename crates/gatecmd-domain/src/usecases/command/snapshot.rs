//! What one command call reads of the shared state, each read once: the
//! configuration in force and the attached devices. `prepare` decides on them, and what it
//! returns carries them, so the lock keys, the board an isolated command runs on, the
//! refusal's metrics label and the client cap it names all come from the same moment; a
//! reload or a hotplug in the middle of a call is seen by the next call.

use std::sync::{Arc, OnceLock};

use gatecmd_devices::{Device, DeviceId, Registry};

use crate::config::Config;
use crate::state::AppState;

/// One call's view of the configuration and the registry.
pub struct Snapshot {
    pub config: Arc<Config>,
    registry: Registry,
    /// Read at the first look, then kept: a command bound to no device reads nothing.
    devices: OnceLock<Vec<Device>>,
}

impl Snapshot {
    /// The configuration in force now; the devices at the first look.
    pub fn take(state: &AppState) -> Snapshot {
        Snapshot {
            config: state.config(),
            registry: state.registry.clone(),
            devices: OnceLock::new(),
        }
    }

    /// A snapshot of given devices (the registry it names is never read).
    #[cfg(test)]
    pub fn of(config: Config, devices: Vec<Device>) -> Snapshot {
        Snapshot {
            config: Arc::new(config),
            registry: Registry::new(),
            devices: OnceLock::from(devices),
        }
    }

    /// The attached devices, ordered by port path; the same list for the whole call.
    pub fn devices(&self) -> &[Device] {
        self.devices.get_or_init(|| self.registry.snapshot())
    }

    /// The attached device on port `id`, in this snapshot.
    pub fn device(&self, id: &DeviceId) -> Option<&Device> {
        self.devices().iter().find(|d| &d.id == id)
    }
}
