//! The device monitor's backends against umockdev testbeds: one set of scenarios, run once per
//! backend. The real `udev` crate and libudev, the real libusb (rusb) and plain sysfs reads all
//! see the testbed's fake devices and hear its emulated uevents.
//!
//! Each backend has a thin entry point (`udev::…`, `libusb::…`, `poll::…`: the same scenario
//! names in each). Where a backend cannot do a scenario, its entry point says so with an
//! `#[ignore = "why"]` test of the same name. Each test re-runs itself under the umockdev
//! preload (see `common::umockdev`).
//!
//! No test sleeps to let the monitor "get there first". Events from one backend reach the
//! registry in order, so a scenario that needs the monitor to have seen an unplug plugs a
//! second board afterwards (the *barrier*) and waits for that board's `Added`: by then the
//! unplug has been applied.

use crate::common;
use crate::harness;

use std::time::{Duration, Instant};

use common::umockdev::Testbed;
use common::*;
use gatecmd_core::events::Events as Receiver;
use gatecmd_devices::{
    Backend, DeviceId, DeviceKind, EventSource, MonitorOptions, Registry, RockchipMode,
    start_monitor,
};

/// How often the poll backend rescans in these tests.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// The backend a scenario runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Under {
    Udev,
    Libusb,
    /// The last-resort source: a periodic sysfs rescan, here over the testbed's /sys.
    Poll,
}

impl Under {
    fn options(self, removal_grace: Duration) -> MonitorOptions {
        let backend = match self {
            Under::Udev => Backend::Udev,
            Under::Libusb => Backend::Libusb,
            Under::Poll => Backend::Poll,
        };
        MonitorOptions {
            backend,
            removal_grace,
            poll_interval: POLL_INTERVAL,
            ..MonitorOptions::default()
        }
    }

    /// The event source the backend must report under umockdev (`UMOCKDEV_DIR` is set: the
    /// emulated udev monitor is live, no fallback).
    fn source(self) -> EventSource {
        match self {
            Under::Udev => EventSource::UdevMonitor,
            Under::Libusb => EventSource::LibusbHotplug,
            Under::Poll => EventSource::SysfsPoll {
                interval_ms: POLL_INTERVAL.as_millis() as u64,
            },
        }
    }
}

fn id(text: &str) -> DeviceId {
    text.parse().expect("valid id")
}

/// Plugs the FTDI adapter on 1-4 and asserts that the very next event is its `Added`. Events
/// from a backend are applied in order, so afterwards everything sent before the plug has
/// been applied, and nothing in between produced an event.
async fn barrier(tb: &Testbed, rx: &mut Receiver<gatecmd_devices::DeviceEvent>, after: &str) {
    tb.add_from_string(FTDI_1_4);
    let d = expect_added(
        rx,
        &format!("the barrier board (1-4) plugged after {after}"),
    )
    .await;
    assert_eq!(
        d.id,
        id("1-4"),
        "the next event after {after} was not the barrier"
    );
}

/// The scenarios, each written once for every backend.
mod scenarios {
    use super::*;

    pub async fn coldplug_enumerates_rockchip_and_ftdi(under: Under) {
        let tb = Testbed::new();
        // The root hub first: libusb needs it to work out port numbers.
        tb.add_from_string(ROOT_HUB);
        tb.add_from_string(RK3588_MASKROM_1_2);
        tb.add_from_string(FTDI_1_4);

        let registry = Registry::new();
        let monitor = start_monitor(registry.clone(), under.options(Duration::ZERO))
            .await
            .expect("monitor starts");
        assert_eq!(monitor.source(), under.source());
        assert_eq!(registry.source(), under.source());

        let all = registry.snapshot();
        let ids: Vec<&str> = all.iter().map(|d| d.id.as_str()).collect();
        assert_eq!(
            ids,
            ["1-2", "1-4"],
            "root hub and interfaces are not devices"
        );

        let rk = &all[0];
        assert_eq!(
            (rk.vid, rk.pid, rk.bcd_usb, rk.bcd_device),
            (0x2207, 0x350b, 0x0200, 0x0100)
        );
        assert_eq!(rk.soc, Some("RK3588"));
        assert_eq!(rk.rockusb_mode(), Some(RockchipMode::MaskRom));
        assert_eq!(rk.kind, DeviceKind::Rockusb);
        assert_eq!((rk.busnum, rk.devnum), (1, 2));
        assert_eq!(rk.speed.as_deref(), Some("480"));
        assert_eq!(rk.manufacturer.as_deref(), Some("Rockchip"));
        assert_eq!(rk.product.as_deref(), Some("USB-MSC"));
        assert_eq!(rk.serial.as_deref(), Some("RK3588-EVB-0001"));
        assert_eq!(rk.devnode.as_deref(), Some("/dev/bus/usb/001/002"));
        assert_eq!(rk.driver.as_deref(), Some("usb"));
        assert_eq!(rk.syspath, SYS_1_2);

        let ftdi = &all[1];
        assert_eq!((ftdi.vid, ftdi.pid), (0x0403, 0x6001));
        assert_eq!(ftdi.kind, DeviceKind::Other);
        assert_eq!((ftdi.soc, ftdi.mode, ftdi.family), (None, None, None));
        assert_eq!(ftdi.manufacturer.as_deref(), Some("FTDI"));
        assert_eq!(ftdi.product.as_deref(), Some("FT232R USB UART"));
        assert_eq!(ftdi.serial.as_deref(), Some("A10KZP3X"));
        assert_eq!(ftdi.speed.as_deref(), Some("12"));

        let json = serde_json::to_value(&all).expect("serializes");
        assert_eq!(json[0]["vid"], "2207");
        assert_eq!(json[0]["pid"], "350b");
        assert_eq!(json[0]["mode"], "maskrom");
        assert_eq!(json[1]["vid"], "0403");
        drop(monitor);
        assert_eq!(registry.source(), EventSource::Unmonitored);
    }

    pub async fn hotplug_add_and_remove_are_broadcast(under: Under) {
        let tb = Testbed::new();
        tb.add_from_string(ROOT_HUB);
        let registry = Registry::new();
        let _monitor = start_monitor(registry.clone(), under.options(Duration::ZERO))
            .await
            .expect("monitor starts");
        assert!(registry.is_empty());
        let mut rx = registry.subscribe();

        tb.add_from_string(RK3588_MASKROM_1_2);
        let d = expect_added(&mut rx, "1-2 added").await;
        assert_eq!(d.id, id("1-2"));
        assert_eq!(d.rockusb_mode(), Some(RockchipMode::MaskRom));
        assert_eq!(d.serial.as_deref(), Some("RK3588-EVB-0001"));
        assert_eq!(d.syspath, SYS_1_2);

        // A second, identical board: told apart by its port only.
        tb.add_from_string(RK3588_MASKROM_1_3);
        let d = expect_added(&mut rx, "1-3 added").await;
        assert_eq!(d.id, id("1-3"));
        assert_eq!(registry.len(), 2);

        // bind after add, as the kernel sends: same state, no event (the barrier's Added is
        // the next event).
        tb.uevent(SYS_1_2, "bind");
        barrier(&tb, &mut rx, "a bind uevent").await;

        tb.unplug(SYS_1_2);
        let d = expect_removed(&mut rx, "1-2 removed").await;
        assert_eq!(d.id, id("1-2"));
        assert!(registry.get(&id("1-2")).is_none());
        assert!(registry.get(&id("1-3")).is_some());
        assert_eq!(registry.len(), 2, "1-3 and the barrier board on 1-4 remain");
    }

    /// A `change` uevent on a board that stays plugged in: the device is re-read.
    pub async fn change_in_place_is_one_change(under: Under) {
        let tb = Testbed::new();
        tb.add_from_string(ROOT_HUB);
        tb.add_from_string(RK3588_MASKROM_1_2);
        let registry = Registry::new();
        let _monitor = start_monitor(registry.clone(), under.options(Duration::ZERO))
            .await
            .expect("monitor starts");
        let before = registry.get(&id("1-2")).expect("coldplugged");
        let mut rx = registry.subscribe();

        tb.set_attribute(SYS_1_2, "version", " 2.01");
        tb.uevent(SYS_1_2, "change");
        let (old, new) = expect_changed(&mut rx, "1-2 changed in place").await;
        assert_eq!(new.id, id("1-2"));
        assert_eq!((old.devnum, new.devnum), (2, 2), "same device number");
        assert_eq!(old.rockusb_mode(), Some(RockchipMode::MaskRom));
        assert_eq!(new.rockusb_mode(), Some(RockchipMode::Loader));
        assert_eq!(new.bcd_usb, 0x0201);
        assert_eq!(
            new.first_seen, before.first_seen,
            "Changed keeps first_seen"
        );
        assert_eq!(registry.len(), 1);
    }

    pub async fn reenumeration_in_loader_mode_is_one_change(under: Under) {
        let tb = Testbed::new();
        tb.add_from_string(ROOT_HUB);
        tb.add_from_string(RK3588_MASKROM_1_2);
        let registry = Registry::new();
        let _monitor = start_monitor(registry.clone(), under.options(Duration::from_secs(2)))
            .await
            .expect("monitor starts");
        let before = registry.get(&id("1-2")).expect("coldplugged");
        let mut rx = registry.subscribe();

        // What `rkdeveloptool db` looks like: the board drops off the bus and comes back on
        // the same port with a new device number, now in Loader mode. The barrier makes sure
        // the monitor saw it gone (and that the departure raised no event) before it returns.
        tb.unplug(SYS_1_2);
        barrier(&tb, &mut rx, "unplugging 1-2 within the grace").await;
        tb.add_from_string(RK3588_LOADER_1_2);

        let (old, new) = expect_changed(&mut rx, "1-2 changed").await;
        assert_eq!(old.id, new.id);
        assert_eq!(new.id, id("1-2"));
        assert_eq!((old.devnum, new.devnum), (2, 5));
        assert_eq!(old.rockusb_mode(), Some(RockchipMode::MaskRom));
        assert_eq!(new.rockusb_mode(), Some(RockchipMode::Loader));
        assert_eq!(new.bcd_usb, 0x0201);
        assert_eq!(new.devnode.as_deref(), Some("/dev/bus/usb/001/005"));
        assert_eq!(
            new.first_seen, before.first_seen,
            "Changed keeps first_seen"
        );
        // The grace (2 s) passes without a late Removed.
        assert_no_event(&mut rx, Duration::from_millis(2500)).await;
        assert_eq!(registry.get(&id("1-2")).map(|d| d.devnum), Some(5));
    }

    pub async fn unplug_past_the_grace_is_removed(under: Under) {
        let grace = Duration::from_secs(2);
        let tb = Testbed::new();
        tb.add_from_string(ROOT_HUB);
        tb.add_from_string(RK3588_MASKROM_1_2);
        let registry = Registry::new();
        let _monitor = start_monitor(registry.clone(), under.options(grace))
            .await
            .expect("monitor starts");
        let mut rx = registry.subscribe();
        let unplugged = Instant::now();
        tb.unplug(SYS_1_2);
        // The barrier proves the monitor has seen the unplug: still listed during the grace
        // period…
        barrier(&tb, &mut rx, "unplugging 1-2").await;
        assert!(
            unplugged.elapsed() < grace,
            "the barrier took longer than the grace; the check below would prove nothing"
        );
        assert!(registry.get(&id("1-2")).is_some());
        // …and removed once it has passed.
        let d = expect_removed(&mut rx, "1-2 removed after grace").await;
        assert_eq!(d.id, id("1-2"));
        assert!(
            unplugged.elapsed() >= grace,
            "removed after {:?}, before the grace of {grace:?}",
            unplugged.elapsed()
        );
        assert!(
            registry.get(&id("1-4")).is_some(),
            "the barrier board stays"
        );
    }

    /// Plug, re-enumerate, unplug: the sequence the poll backend used to be tested with
    /// alone, now for every backend.
    pub async fn plug_reenumerate_unplug(under: Under) {
        let tb = Testbed::new();
        tb.add_from_string(ROOT_HUB);
        tb.add_from_string(RK3588_MASKROM_1_3);
        let registry = Registry::new();
        let _monitor = start_monitor(registry.clone(), under.options(Duration::from_millis(500)))
            .await
            .expect("monitor starts");
        assert_eq!(registry.len(), 1);
        let mut rx = registry.subscribe();

        tb.add_from_string(RK3588_MASKROM_1_2);
        let d = expect_added(&mut rx, "1-2 added").await;
        assert_eq!(d.id, id("1-2"));
        assert_eq!(d.serial.as_deref(), Some("RK3588-EVB-0001"));
        assert_eq!(d.syspath, SYS_1_2);
        tb.unplug(SYS_1_2);
        barrier(&tb, &mut rx, "unplugging 1-2 within the grace").await;
        tb.add_from_string(RK3588_LOADER_1_2);
        let (_, new) = expect_changed(&mut rx, "1-2 changed").await;
        assert_eq!(new.rockusb_mode(), Some(RockchipMode::Loader));
        tb.unplug(SYS_1_2);
        let d = expect_removed(&mut rx, "1-2 removed").await;
        assert_eq!(d.id, id("1-2"));
        tb.unplug(SYS_1_4);
        let d = expect_removed(&mut rx, "1-4 removed").await;
        assert_eq!(d.id, id("1-4"));
    }
}

/// One backend's entry points: a test per scenario, each re-running itself under the preload,
/// and an ignored test, with the reason, per scenario the backend cannot do.
macro_rules! backend_suite {
    (
        $module:ident, $under:expr,
        runs: [$($scenario:ident),* $(,)?],
        cannot: [$($missing:ident: $why:literal),* $(,)?] $(,)?
    ) => {
        mod $module {
            use super::*;
            use common::umockdev::{is_inner_run, rerun_under_preload};

            $(
                #[tokio::test]
                async fn $scenario() {
                    if !is_inner_run() {
                        return rerun_under_preload(module_path!(), stringify!($scenario));
                    }
                    scenarios::$scenario($under).await;
                }
            )*

            $(
                #[test]
                #[ignore = $why]
                fn $missing() {
                    harness::skip(
                        concat!(stringify!($module), "::", stringify!($missing)),
                        harness::Unavailable::BackendCannot,
                        $why,
                    );
                }
            )*
        }
    };
}

#[cfg(feature = "udev")]
backend_suite!(udev, Under::Udev,
    runs: [
        coldplug_enumerates_rockchip_and_ftdi,
        hotplug_add_and_remove_are_broadcast,
        change_in_place_is_one_change,
        reenumeration_in_loader_mode_is_one_change,
        unplug_past_the_grace_is_removed,
        plug_reenumerate_unplug,
    ],
    cannot: [],
);

#[cfg(not(feature = "udev"))]
backend_suite!(udev, Under::Udev,
    runs: [],
    cannot: [
        coldplug_enumerates_rockchip_and_ftdi: "built without the `udev` feature",
        hotplug_add_and_remove_are_broadcast: "built without the `udev` feature",
        change_in_place_is_one_change: "built without the `udev` feature",
        reenumeration_in_loader_mode_is_one_change: "built without the `udev` feature",
        unplug_past_the_grace_is_removed: "built without the `udev` feature",
        plug_reenumerate_unplug: "built without the `udev` feature",
    ],
);

backend_suite!(libusb, Under::Libusb,
    runs: [
        coldplug_enumerates_rockchip_and_ftdi,
        hotplug_add_and_remove_are_broadcast,
        reenumeration_in_loader_mode_is_one_change,
        unplug_past_the_grace_is_removed,
        plug_reenumerate_unplug,
    ],
    cannot: [
        change_in_place_is_one_change: "libusb's hotplug API reports arrivals and departures \
            only: a `change` uevent for a board that stays plugged in never reaches it",
    ],
);

backend_suite!(poll, Under::Poll,
    runs: [
        coldplug_enumerates_rockchip_and_ftdi,
        hotplug_add_and_remove_are_broadcast,
        change_in_place_is_one_change,
        reenumeration_in_loader_mode_is_one_change,
        unplug_past_the_grace_is_removed,
        plug_reenumerate_unplug,
    ],
    cannot: [],
);

/// On the real host (no preload): the detection rule picks the source, and a machine without
/// a USB bus simply has no devices.
#[cfg(feature = "udev")]
#[tokio::test]
async fn auto_backend_on_this_host_reports_its_source() {
    if std::env::var_os("UMOCKDEV_DIR").is_some() {
        return harness::skip(
            "auto_backend_on_this_host_reports_its_source",
            harness::Unavailable::HostProperty,
            "UMOCKDEV_DIR is set: this test is about the real host, not a testbed",
        );
    }
    let registry = Registry::new();
    let monitor = start_monitor(registry.clone(), MonitorOptions::default())
        .await
        .expect("monitor starts");
    let expected = if std::path::Path::new("/run/udev/control").exists() {
        EventSource::UdevMonitor
    } else {
        EventSource::KernelUevents
    };
    // A sandbox that forbids netlink sockets ends up on the sysfs rescan.
    assert!(
        monitor.source() == expected || matches!(monitor.source(), EventSource::SysfsPoll { .. }),
        "unexpected source {}",
        monitor.source()
    );
    println!("live source here: {}", monitor.source());
    if !std::path::Path::new("/sys/bus/usb").exists() {
        assert!(registry.is_empty());
    }
}
