//! Starting and stopping the device monitor: pick a backend, enumerate once
//! synchronously, then keep the registry current from that backend's events.
//!
//! Every backend produces [`Action`]s on one channel; a single task applies them
//! to the registry. That task also owns the re-enumeration grace: a device that
//! disappears is kept for `removal_grace`, and if the same port comes back within
//! it (a Rockchip board after `db` or `rd`) the registry reports one `Changed`
//! instead of `Removed` + `Added`, keeping `first_seen`.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::action::Action;
use super::error::DeviceError;
use super::libusb;
use super::model::{Device, DeviceId};
use super::registry::{EventSource, Registry};
use super::sysfs;

/// Which backend to run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    /// udev when built with it (falling back as needed), libusb otherwise.
    #[default]
    Auto,
    Udev,
    Libusb,
    /// Periodic sysfs rescan only.
    Poll,
}

impl FromStr for Backend {
    type Err = DeviceError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "auto" => Ok(Backend::Auto),
            "udev" => Ok(Backend::Udev),
            "libusb" => Ok(Backend::Libusb),
            "poll" => Ok(Backend::Poll),
            other => Err(DeviceError::BackendUnavailable {
                backend: "requested",
                reason: format!("unknown backend `{other}`; use auto, udev, libusb or poll"),
            }),
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Auto => "auto",
            Backend::Udev => "udev",
            Backend::Libusb => "libusb",
            Backend::Poll => "poll",
        })
    }
}

#[derive(Clone, Debug)]
pub struct MonitorOptions {
    /// Where sysfs is mounted; only tests point it elsewhere.
    pub sysfs_root: PathBuf,
    pub backend: Backend,
    /// Rescan interval for the polling sources.
    pub poll_interval: Duration,
    /// How long a vanished device is kept in case its port re-enumerates; zero
    /// reports removals at once (and re-enumeration as Removed + Added).
    pub removal_grace: Duration,
}

/// Removals are reported at once by default (DESIGN: subscribers hear of a board leaving
/// within milliseconds); a board that re-enumerates is then `Removed` + `Added` on the same id.
/// The configuration's `monitor.removal_grace_ms` sets another value.
pub const DEFAULT_REMOVAL_GRACE: Duration = Duration::ZERO;

impl Default for MonitorOptions {
    fn default() -> Self {
        MonitorOptions {
            sysfs_root: PathBuf::from("/sys"),
            backend: Backend::Auto,
            poll_interval: Duration::from_secs(1),
            removal_grace: DEFAULT_REMOVAL_GRACE,
        }
    }
}

/// Something that must be stopped when the monitor stops.
enum Producer {
    Task(JoinHandle<()>),
    Thread(#[allow(dead_code)] libusb::HotplugThread),
}

/// Keeps the monitor running; dropping it stops the watching task(s).
pub struct MonitorHandle {
    source: EventSource,
    registry: Registry,
    applier: JoinHandle<()>,
    producers: Vec<Producer>,
}

impl MonitorHandle {
    /// Which event source is live.
    pub fn source(&self) -> EventSource {
        self.source
    }
}

impl fmt::Debug for MonitorHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MonitorHandle")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl Drop for MonitorHandle {
    fn drop(&mut self) {
        self.applier.abort();
        for producer in &self.producers {
            if let Producer::Task(task) = producer {
                task.abort();
            }
        }
        self.registry.set_source(EventSource::Unmonitored);
    }
}

/// What a started backend hands back.
struct Started {
    source: EventSource,
    initial: Vec<Device>,
    producers: Vec<Producer>,
}

/// Why the device monitor could not start (or a rescan failed).
#[derive(Debug, thiserror::Error)]
pub enum MonitorError {
    #[error("{0}")]
    Device(#[from] DeviceError),
    /// The blocking enumeration task died; `what` names it.
    #[error("{what}: {source}")]
    Panicked {
        what: &'static str,
        #[source]
        source: tokio::task::JoinError,
    },
}

/// The result of a blocking enumeration task, its panic named by `what`.
fn joined<T>(
    r: Result<Result<T, DeviceError>, tokio::task::JoinError>,
    what: &'static str,
) -> Result<T, MonitorError> {
    Ok(r.map_err(|source| MonitorError::Panicked { what, source })??)
}

/// Enumerates (the registry is complete when this returns), then watches.
pub async fn start_monitor(
    registry: Registry,
    opts: MonitorOptions,
) -> Result<MonitorHandle, MonitorError> {
    let (tx, rx) = mpsc::unbounded_channel();
    let started = match opts.backend {
        Backend::Auto if cfg!(feature = "udev") => start_udev(&opts, tx).await?,
        Backend::Auto | Backend::Libusb => start_libusb(&opts, tx).await?,
        Backend::Udev => start_udev(&opts, tx).await?,
        Backend::Poll => start_sysfs_poll(&opts, tx).await?,
    };
    tracing::info!(source = %started.source, devices = started.initial.len(), "device monitor started");
    registry.reconcile(started.initial);
    registry.set_source(started.source);
    let applier = tokio::spawn(apply_actions(registry.clone(), rx, opts.removal_grace));
    Ok(MonitorHandle {
        source: started.source,
        registry,
        applier,
        producers: started.producers,
    })
}

#[cfg(feature = "udev")]
async fn start_udev(
    opts: &MonitorOptions,
    tx: UnboundedSender<Action>,
) -> Result<Started, MonitorError> {
    use super::udev::{self, UdevEvents};

    let wanted = udev::detect();
    let opened = match udev::open_monitor(wanted) {
        Ok(socket) => Ok((socket, wanted)),
        Err(e) if wanted == UdevEvents::Daemon => {
            tracing::warn!(error = %e, "cannot open the udev monitor; trying kernel uevents");
            udev::open_monitor(UdevEvents::Kernel).map(|socket| (socket, UdevEvents::Kernel))
        }
        Err(e) => Err(e),
    };
    let (socket, events) = match opened {
        Ok(opened) => opened,
        Err(e) => {
            tracing::warn!(error = %e, "no netlink uevent socket; falling back to a sysfs rescan");
            return start_sysfs_poll(opts, tx).await;
        }
    };
    let source = match events {
        UdevEvents::Daemon => EventSource::UdevMonitor,
        UdevEvents::Kernel => {
            tracing::info!(
                "no udev daemon found (/run/udev/control is absent): listening to kernel uevents"
            );
            EventSource::KernelUevents
        }
    };
    let initial = joined(
        tokio::task::spawn_blocking(udev::enumerate).await,
        "udev enumeration panicked",
    )?;
    let watcher = tokio::spawn(udev::watch(socket, tx));
    Ok(Started {
        source,
        initial,
        producers: vec![Producer::Task(watcher)],
    })
}

#[cfg(not(feature = "udev"))]
async fn start_udev(
    _: &MonitorOptions,
    _: UnboundedSender<Action>,
) -> Result<Started, MonitorError> {
    Err(DeviceError::BackendUnavailable {
        backend: "udev",
        reason: "gatecmd was built without the `udev` feature; use the libusb or poll backend"
            .into(),
    }
    .into())
}

async fn start_libusb(
    opts: &MonitorOptions,
    tx: UnboundedSender<Action>,
) -> Result<Started, MonitorError> {
    let ctx = libusb::open_context()?;
    let root = opts.sysfs_root.clone();
    if rusb::has_hotplug() {
        // Register before enumerating so nothing plugged in between is missed.
        let thread = libusb::start_hotplug(&ctx, &root, tx)?;
        let initial = joined(
            tokio::task::spawn_blocking(move || libusb::enumerate(&ctx, &root)).await,
            "libusb enumeration panicked",
        )?;
        return Ok(Started {
            source: EventSource::LibusbHotplug,
            initial,
            producers: vec![Producer::Thread(thread)],
        });
    }
    let interval = opts.poll_interval;
    let scan = move || {
        let (ctx, root) = (ctx.clone(), root.clone());
        async move {
            joined(
                tokio::task::spawn_blocking(move || libusb::enumerate(&ctx, &root)).await,
                "libusb enumeration panicked",
            )
        }
    };
    let initial = scan().await?;
    Ok(Started {
        source: EventSource::LibusbPoll {
            interval_ms: millis(interval),
        },
        initial,
        producers: vec![Producer::Task(tokio::spawn(poll(interval, tx, scan)))],
    })
}

async fn start_sysfs_poll(
    opts: &MonitorOptions,
    tx: UnboundedSender<Action>,
) -> Result<Started, MonitorError> {
    let root = opts.sysfs_root.clone();
    let interval = opts.poll_interval;
    let scan = move || {
        let root = root.clone();
        async move {
            joined(
                tokio::task::spawn_blocking(move || sysfs::scan(&root)).await,
                "sysfs scan panicked",
            )
        }
    };
    let initial = scan().await?;
    Ok(Started {
        source: EventSource::SysfsPoll {
            interval_ms: millis(interval),
        },
        initial,
        producers: vec![Producer::Task(tokio::spawn(poll(interval, tx, scan)))],
    })
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Rescans every `interval` (the first scan was the synchronous enumeration).
async fn poll<F, Fut>(interval: Duration, tx: UnboundedSender<Action>, scan: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<Vec<Device>, MonitorError>>,
{
    let mut ticks = tokio::time::interval(interval.max(Duration::from_millis(10)));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        match scan().await {
            Ok(all) => {
                if tx.send(Action::Rescan(all)).is_err() {
                    return;
                }
            }
            // Keep the last good view; a transient failure should not unplug everything.
            Err(e) => tracing::warn!(error = %e, "device rescan failed"),
        }
    }
}

/// Applies backend actions to the registry, holding removals for the grace period.
struct Applier {
    registry: Registry,
    grace: Duration,
    /// Ports that went empty, and when their device is finally reported removed.
    departing: HashMap<DeviceId, Instant>,
}

impl Applier {
    fn apply(&mut self, action: Action, now: Instant) {
        match action {
            Action::Present(device) => self.present(*device),
            Action::Gone(id) => self.gone(id, now),
            Action::Rescan(all) => {
                let seen: HashSet<DeviceId> = all.iter().map(|d| d.id.clone()).collect();
                for device in all {
                    self.present(device);
                }
                for id in self.registry.ids_not_in(&seen) {
                    if !self.departing.contains_key(&id) {
                        self.gone(id, now);
                    }
                }
            }
        }
    }

    fn present(&mut self, device: Device) {
        self.departing.remove(&device.id);
        self.registry.upsert(device);
    }

    fn gone(&mut self, id: DeviceId, now: Instant) {
        if self.grace.is_zero() {
            self.registry.remove(&id);
        } else if self.registry.get(&id).is_some() {
            self.departing.insert(id, now + self.grace);
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.departing.values().min().copied()
    }

    fn expire(&mut self, now: Instant) {
        let due: Vec<DeviceId> = self
            .departing
            .iter()
            .filter(|(_, deadline)| **deadline <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in due {
            self.departing.remove(&id);
            self.registry.remove(&id);
        }
    }
}

async fn apply_actions(registry: Registry, mut rx: UnboundedReceiver<Action>, grace: Duration) {
    let mut applier = Applier {
        registry,
        grace,
        departing: HashMap::new(),
    };
    loop {
        let deadline = applier.next_deadline();
        tokio::select! {
            action = rx.recv() => match action {
                Some(action) => applier.apply(action, Instant::now()),
                None => return,
            },
            () = sleep_until(deadline) => applier.expire(Instant::now()),
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::DeviceEvent;

    fn dev(id: &str, devnum: u16) -> Device {
        Device::sample(id, devnum)
    }

    #[test]
    fn return_within_grace_is_one_change() {
        let registry = Registry::new();
        let mut applier = Applier {
            registry: registry.clone(),
            grace: Duration::from_secs(2),
            departing: HashMap::new(),
        };
        let t0 = Instant::now();
        applier.apply(Action::Present(Box::new(dev("1-2", 2))), t0);
        let mut rx = registry.subscribe();
        applier.apply(Action::Gone("1-2".parse().unwrap()), t0);
        applier.expire(t0 + Duration::from_secs(1));
        assert!(registry.get(&"1-2".parse().unwrap()).is_some());
        applier.apply(
            Action::Present(Box::new(dev("1-2", 5))),
            t0 + Duration::from_secs(1),
        );
        assert!(matches!(rx.try_recv(), Ok(DeviceEvent::Changed { .. })));
        applier.expire(t0 + Duration::from_secs(10));
        assert!(rx.try_recv().is_err(), "returned device must not expire");
        assert_eq!(applier.next_deadline(), None);
    }

    #[test]
    fn absence_past_grace_is_a_removal() {
        let registry = Registry::new();
        let mut applier = Applier {
            registry: registry.clone(),
            grace: Duration::from_millis(500),
            departing: HashMap::new(),
        };
        let t0 = Instant::now();
        applier.apply(Action::Rescan(vec![dev("1-2", 2), dev("1-3", 3)]), t0);
        let mut rx = registry.subscribe();
        applier.apply(Action::Rescan(vec![dev("1-3", 3)]), t0);
        // A later rescan must not push the deadline back.
        applier.apply(
            Action::Rescan(vec![dev("1-3", 3)]),
            t0 + Duration::from_millis(400),
        );
        assert_eq!(
            applier.next_deadline(),
            Some(t0 + Duration::from_millis(500))
        );
        applier.expire(t0 + Duration::from_millis(500));
        assert!(matches!(rx.try_recv(), Ok(DeviceEvent::Removed(d)) if d.id.as_str() == "1-2"));
        assert_eq!(registry.len(), 1);
    }

    #[test]
    fn zero_grace_removes_at_once() {
        let registry = Registry::new();
        let mut applier = Applier {
            registry: registry.clone(),
            grace: Duration::ZERO,
            departing: HashMap::new(),
        };
        let t0 = Instant::now();
        applier.apply(Action::Present(Box::new(dev("1-2", 2))), t0);
        applier.apply(Action::Gone("1-2".parse().unwrap()), t0);
        assert!(registry.is_empty());
    }

    #[test]
    fn backend_names() {
        for name in ["auto", "udev", "libusb", "poll"] {
            assert_eq!(name.parse::<Backend>().unwrap().to_string(), name);
        }
        assert!("usb".parse::<Backend>().is_err());
    }
}
