//! The registry: the one shared view of attached devices, and its change stream.
//!
//! Backends write to it (`upsert`, `remove`, `reconcile`); the MCP layer reads
//! snapshots and subscribes to `DeviceEvent`s. Each write to one id happens under
//! that id's map entry lock and publishes while holding it, so the events of one
//! device are published in the order the writes happened.

use std::collections::HashSet;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use gatecmd_core::events::{Broadcast, Events};
use serde::Serialize;

use super::model::{Device, DeviceEvent, DeviceId};

/// How many events a slow subscriber may fall behind before it sees `Lagged`
/// (and should take a fresh snapshot).
const EVENT_BUFFER: usize = 256;

/// Which mechanism currently keeps the registry up to date.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum EventSource {
    /// No monitor is running: the registry holds whatever was last written to it.
    Unmonitored,
    /// libudev netlink monitor fed by a running udev daemon.
    UdevMonitor,
    /// Raw kernel uevents (no udev daemon rebroadcasts events on this host).
    KernelUevents,
    /// Periodic rescan of sysfs.
    SysfsPoll { interval_ms: u64 },
    /// libusb hotplug callbacks.
    LibusbHotplug,
    /// Periodic libusb enumeration (libusb without hotplug support).
    LibusbPoll { interval_ms: u64 },
}

impl fmt::Display for EventSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EventSource::Unmonitored => f.write_str("none (no device monitor running)"),
            EventSource::UdevMonitor => f.write_str("udev monitor (events from the udev daemon)"),
            EventSource::KernelUevents => {
                f.write_str("kernel uevents (no udev daemon found, listening to the kernel)")
            }
            EventSource::SysfsPoll { interval_ms } => {
                write!(f, "sysfs rescan every {interval_ms} ms")
            }
            EventSource::LibusbHotplug => f.write_str("libusb hotplug callbacks"),
            EventSource::LibusbPoll { interval_ms } => {
                write!(
                    f,
                    "libusb rescan every {interval_ms} ms (no hotplug support)"
                )
            }
        }
    }
}

struct Shared {
    devices: DashMap<DeviceId, Device>,
    events: Broadcast<DeviceEvent>,
    source: RwLock<EventSource>,
    /// Bumped after every write that changes what a snapshot or `source` returns, so
    /// readers can keep answers derived from them until it moves (see `version`).
    version: AtomicU64,
}

/// Cheap to clone: all clones share one view.
#[derive(Clone)]
pub struct Registry {
    shared: Arc<Shared>,
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("devices", &self.shared.devices.len())
            .field("source", &self.source())
            .finish()
    }
}

impl Registry {
    pub fn new() -> Self {
        let events = Broadcast::new(EVENT_BUFFER);
        Registry {
            shared: Arc::new(Shared {
                devices: DashMap::new(),
                events,
                source: RwLock::new(EventSource::Unmonitored),
                version: AtomicU64::new(0),
            }),
        }
    }

    /// All attached devices, ordered by port path.
    pub fn snapshot(&self) -> Vec<Device> {
        let mut all: Vec<Device> = self
            .shared
            .devices
            .iter()
            .map(|entry| entry.value().clone())
            .collect();
        all.sort_by(|a, b| a.id.cmp(&b.id));
        all
    }

    pub fn get(&self, id: &DeviceId) -> Option<Device> {
        self.shared
            .devices
            .get(id)
            .map(|entry| entry.value().clone())
    }

    pub fn len(&self) -> usize {
        self.shared.devices.len()
    }

    pub fn is_empty(&self) -> bool {
        self.shared.devices.is_empty()
    }

    /// A number that changes after every change to the devices or the event source.
    /// Read it before deriving something from a snapshot: if it still has the same value
    /// later, the derived thing is still current.
    pub fn version(&self) -> u64 {
        self.shared.version.load(Ordering::Acquire)
    }

    fn touch(&self) {
        self.shared.version.fetch_add(1, Ordering::AcqRel);
    }

    pub fn subscribe(&self) -> Events<DeviceEvent> {
        self.shared.events.subscribe()
    }

    /// Records the device now on `d.id`: `Added` if the port was empty, `Changed` if
    /// anything but `first_seen` differs (the port's `first_seen` is kept), nothing
    /// if it is the same.
    pub fn upsert(&self, mut d: Device) {
        match self.shared.devices.entry(d.id.clone()) {
            Entry::Vacant(slot) => {
                slot.insert(d.clone());
                self.touch();
                self.publish(DeviceEvent::Added(d));
            }
            Entry::Occupied(mut slot) => {
                let old = slot.get();
                d.first_seen = old.first_seen;
                if *old == d {
                    return;
                }
                let old = slot.insert(d.clone());
                self.touch();
                self.publish(DeviceEvent::Changed { old, new: d });
            }
        }
    }

    /// Forgets the device on `id`, publishing `Removed` if there was one.
    pub fn remove(&self, id: &DeviceId) {
        // remove_if holds the shard lock while the closure runs; publishing there
        // keeps this device's events ordered against a concurrent upsert.
        // Touched before publishing, like the other writes, so that a subscriber who
        // reacts to the event finds a new version. A reader that takes the new version
        // and then a snapshot waits on the shard lock until the entry is gone.
        self.shared.devices.remove_if(id, |_, old| {
            self.touch();
            self.publish(DeviceEvent::Removed(old.clone()));
            true
        });
    }

    /// Makes the registry equal to a full rescan: adds, changes and removes.
    pub fn reconcile(&self, all: Vec<Device>) {
        let present: HashSet<DeviceId> = all.iter().map(|d| d.id.clone()).collect();
        for d in all {
            self.upsert(d);
        }
        for gone in self.ids_not_in(&present) {
            self.remove(&gone);
        }
    }

    /// Ids the registry holds that a rescan did not find.
    pub(crate) fn ids_not_in(&self, present: &HashSet<DeviceId>) -> Vec<DeviceId> {
        self.shared
            .devices
            .iter()
            .filter(|entry| !present.contains(entry.key()))
            .map(|entry| entry.key().clone())
            .collect()
    }

    pub fn source(&self) -> EventSource {
        match self.shared.source.read() {
            Ok(source) => *source,
            Err(poisoned) => *poisoned.into_inner(),
        }
    }

    pub(crate) fn set_source(&self, source: EventSource) {
        match self.shared.source.write() {
            Ok(mut slot) => *slot = source,
            Err(poisoned) => *poisoned.into_inner() = source,
        }
        self.touch();
    }

    fn publish(&self, event: DeviceEvent) {
        tracing::debug!(id = %event.id(), ?event, "device event");
        let name = match &event {
            DeviceEvent::Added(_) => "added",
            DeviceEvent::Removed(_) => "removed",
            DeviceEvent::Changed { .. } => "changed",
        };
        gatecmd_core::metrics::hotplug(name, event.device().kind.label());
        // Nobody subscribed right now is fine: the event is simply gone.
        self.shared.events.send(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Duration;
    use tokio::sync::broadcast::error::TryRecvError;

    fn dev(id: &str, devnum: u16) -> Device {
        Device::sample(id, devnum)
    }

    #[test]
    fn upsert_adds_changes_and_ignores_no_ops() {
        let reg = Registry::new();
        let mut rx = reg.subscribe();
        let first = dev("1-2", 2);
        reg.upsert(first.clone());
        assert!(matches!(rx.try_recv(), Ok(DeviceEvent::Added(d)) if d == first));

        // Same state, later timestamp: not a change.
        let mut again = first.clone();
        again.first_seen = first.first_seen + Duration::seconds(5);
        reg.upsert(again);
        assert!(matches!(rx.try_recv(), Err(TryRecvError::Empty)));

        let mut renum = dev("1-2", 5);
        renum.first_seen = first.first_seen + Duration::seconds(9);
        reg.upsert(renum);
        match rx.try_recv() {
            Ok(DeviceEvent::Changed { old, new }) => {
                assert_eq!(old.devnum, 2);
                assert_eq!(new.devnum, 5);
                assert_eq!(new.first_seen, first.first_seen, "Changed keeps first_seen");
            }
            other => panic!("expected Changed, got {other:?}"),
        }
        assert_eq!(reg.get(&first.id).unwrap().devnum, 5);
    }

    #[test]
    fn remove_publishes_once() {
        let reg = Registry::new();
        reg.upsert(dev("1-2", 2));
        let mut rx = reg.subscribe();
        reg.remove(&"1-2".parse().unwrap());
        reg.remove(&"1-2".parse().unwrap());
        assert!(matches!(rx.try_recv(), Ok(DeviceEvent::Removed(d)) if d.devnum == 2));
        assert!(matches!(rx.try_recv(), Err(TryRecvError::Empty)));
        assert!(reg.is_empty());
    }

    #[test]
    fn reconcile_matches_a_rescan_and_snapshot_is_sorted() {
        let reg = Registry::new();
        reg.upsert(dev("1-2", 2));
        reg.upsert(dev("1-3", 3));
        let mut rx = reg.subscribe();
        reg.reconcile(vec![dev("1-10", 7), dev("1-3", 4), dev("1-2", 2)]);
        let mut kinds = Vec::new();
        while let Ok(ev) = rx.try_recv() {
            kinds.push(match ev {
                DeviceEvent::Added(d) => format!("+{}", d.id),
                DeviceEvent::Removed(d) => format!("-{}", d.id),
                DeviceEvent::Changed { new, .. } => format!("~{}", new.id),
            });
        }
        kinds.sort();
        assert_eq!(kinds, ["+1-10", "~1-3"]);
        reg.reconcile(vec![dev("1-3", 4)]);
        let ids: Vec<String> = reg.snapshot().iter().map(|d| d.id.to_string()).collect();
        assert_eq!(ids, ["1-3"]);
        reg.reconcile(vec![dev("1-10", 1), dev("1-9", 1), dev("1-3", 4)]);
        let ids: Vec<String> = reg.snapshot().iter().map(|d| d.id.to_string()).collect();
        assert_eq!(ids, ["1-3", "1-9", "1-10"]);
    }

    #[test]
    fn source_defaults_to_unmonitored() {
        let reg = Registry::new();
        assert_eq!(reg.source(), EventSource::Unmonitored);
        reg.set_source(EventSource::SysfsPoll { interval_ms: 500 });
        assert_eq!(
            reg.clone().source().to_string(),
            "sysfs rescan every 500 ms"
        );
    }
}
