//! The libusb (rusb) backend against umockdev testbeds: the real libusb builds
//! its device list from the testbed's descriptors, and its hotplug callbacks are
//! driven by umockdev's emulated uevents. Strings come from sysfs (umockdev does
//! not emulate USB transfers).
//!
//! Each test re-runs itself under the umockdev preload (see `common::umockdev`).

mod common;

use std::time::Duration;

use common::umockdev::{Testbed, is_inner_run, rerun_under_preload};
use common::*;
use gatecmd::devices::{
    Backend, DeviceId, DeviceKind, EventSource, MonitorOptions, Registry, RockchipMode,
    start_monitor,
};

fn libusb_options(removal_grace: Duration) -> MonitorOptions {
    MonitorOptions {
        backend: Backend::Libusb,
        removal_grace,
        ..MonitorOptions::default()
    }
}

fn id(text: &str) -> DeviceId {
    text.parse().expect("valid id")
}

#[tokio::test]
async fn libusb_coldplug_enumerates_rockchip_and_ftdi() {
    if !is_inner_run() {
        return rerun_under_preload("libusb_coldplug_enumerates_rockchip_and_ftdi");
    }
    let tb = Testbed::new();
    // The root hub first: libusb needs it to work out port numbers.
    tb.add_from_string(ROOT_HUB);
    tb.add_from_string(RK3588_MASKROM_1_2);
    tb.add_from_string(FTDI_1_4);

    let registry = Registry::new();
    let monitor = start_monitor(registry.clone(), libusb_options(Duration::ZERO))
        .await
        .expect("monitor starts");
    assert_eq!(monitor.source(), EventSource::LibusbHotplug);

    let all = registry.snapshot();
    let ids: Vec<&str> = all.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, ["1-2", "1-4"]);

    let rk = &all[0];
    assert_eq!(
        (rk.vid, rk.pid, rk.bcd_usb, rk.bcd_device),
        (0x2207, 0x350b, 0x0200, 0x0100)
    );
    assert_eq!(rk.soc.as_deref(), Some("RK3588"));
    assert_eq!(rk.mode, Some(RockchipMode::MaskRom));
    assert_eq!(rk.kind, DeviceKind::Rockusb);
    assert_eq!((rk.busnum, rk.devnum), (1, 2));
    assert_eq!(rk.manufacturer.as_deref(), Some("Rockchip"));
    assert_eq!(rk.product.as_deref(), Some("USB-MSC"));
    assert_eq!(rk.serial.as_deref(), Some("RK3588-EVB-0001"));
    assert_eq!(rk.devnode.as_deref(), Some("/dev/bus/usb/001/002"));
    assert_eq!(rk.syspath, SYS_1_2);

    let ftdi = &all[1];
    assert_eq!((ftdi.vid, ftdi.pid), (0x0403, 0x6001));
    assert_eq!(ftdi.kind, DeviceKind::Other);
    assert_eq!(ftdi.manufacturer.as_deref(), Some("FTDI"));
    assert_eq!(ftdi.product.as_deref(), Some("FT232R USB UART"));
    assert_eq!(ftdi.serial.as_deref(), Some("A10KZP3X"));
}

#[tokio::test]
async fn libusb_hotplug_add_and_remove_are_broadcast() {
    if !is_inner_run() {
        return rerun_under_preload("libusb_hotplug_add_and_remove_are_broadcast");
    }
    let tb = Testbed::new();
    tb.add_from_string(ROOT_HUB);
    let registry = Registry::new();
    let _monitor = start_monitor(registry.clone(), libusb_options(Duration::ZERO))
        .await
        .expect("monitor starts");
    assert!(registry.is_empty());
    let mut rx = registry.subscribe();

    tb.add_from_string(RK3588_MASKROM_1_2);
    let d = expect_added(&mut rx, "1-2 added").await;
    assert_eq!(d.id, id("1-2"));
    assert_eq!(d.mode, Some(RockchipMode::MaskRom));
    assert_eq!(d.serial.as_deref(), Some("RK3588-EVB-0001"));
    tb.add_from_string(RK3588_MASKROM_1_3);
    let d = expect_added(&mut rx, "1-3 added").await;
    assert_eq!(d.id, id("1-3"));

    tb.unplug(SYS_1_2);
    let d = expect_removed(&mut rx, "1-2 removed").await;
    assert_eq!(d.id, id("1-2"));
    assert_eq!(registry.len(), 1);
}

#[tokio::test]
async fn libusb_reenumeration_in_loader_mode_is_one_change() {
    if !is_inner_run() {
        return rerun_under_preload("libusb_reenumeration_in_loader_mode_is_one_change");
    }
    let tb = Testbed::new();
    tb.add_from_string(ROOT_HUB);
    tb.add_from_string(RK3588_MASKROM_1_2);
    let registry = Registry::new();
    let _monitor = start_monitor(registry.clone(), libusb_options(Duration::from_secs(2)))
        .await
        .expect("monitor starts");
    let before = registry.get(&id("1-2")).expect("coldplugged");
    let mut rx = registry.subscribe();

    tb.unplug(SYS_1_2);
    tokio::time::sleep(Duration::from_millis(100)).await;
    tb.add_from_string(RK3588_LOADER_1_2);

    let (old, new) = expect_changed(&mut rx, "1-2 changed").await;
    assert_eq!(new.id, id("1-2"));
    assert_eq!((old.devnum, new.devnum), (2, 5));
    assert_eq!(old.mode, Some(RockchipMode::MaskRom));
    assert_eq!(new.mode, Some(RockchipMode::Loader));
    assert_eq!(new.bcd_usb, 0x0201);
    assert_eq!(new.first_seen, before.first_seen);
    assert_no_event(&mut rx, Duration::from_millis(2500)).await;
}

/// The last-resort source: a periodic sysfs rescan, here over the testbed's /sys.
#[tokio::test]
async fn sysfs_poll_sees_plug_and_reenumeration() {
    if !is_inner_run() {
        return rerun_under_preload("sysfs_poll_sees_plug_and_reenumeration");
    }
    let tb = Testbed::new();
    tb.add_from_string(ROOT_HUB);
    tb.add_from_string(FTDI_1_4);
    let registry = Registry::new();
    let opts = MonitorOptions {
        backend: Backend::Poll,
        poll_interval: Duration::from_millis(50),
        removal_grace: Duration::from_millis(500),
        ..MonitorOptions::default()
    };
    let monitor = start_monitor(registry.clone(), opts)
        .await
        .expect("monitor starts");
    assert_eq!(monitor.source(), EventSource::SysfsPoll { interval_ms: 50 });
    assert_eq!(registry.len(), 1);
    let mut rx = registry.subscribe();

    tb.add_from_string(RK3588_MASKROM_1_2);
    let d = expect_added(&mut rx, "1-2 added").await;
    assert_eq!(d.id, id("1-2"));
    assert_eq!(d.serial.as_deref(), Some("RK3588-EVB-0001"));
    assert_eq!(d.syspath, SYS_1_2);
    tb.unplug(SYS_1_2);
    tokio::time::sleep(Duration::from_millis(120)).await;
    tb.add_from_string(RK3588_LOADER_1_2);
    let (_, new) = expect_changed(&mut rx, "1-2 changed").await;
    assert_eq!(new.mode, Some(RockchipMode::Loader));
    tb.unplug(SYS_1_2);
    let d = expect_removed(&mut rx, "1-2 removed").await;
    assert_eq!(d.id, id("1-2"));
}
