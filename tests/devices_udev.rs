//! The udev backend against umockdev testbeds: the real `udev` crate and libudev
//! see fake sysfs devices and hear emulated uevents.
//!
//! Each test re-runs itself under the umockdev preload (see `common::umockdev`).
#![cfg(feature = "udev")]

mod common;

use std::time::Duration;

use common::umockdev::{Testbed, is_inner_run, rerun_under_preload};
use common::*;
use gatecmd::devices::{
    Backend, DeviceId, DeviceKind, EventSource, MonitorOptions, Registry, RockchipMode,
    start_monitor,
};

fn udev_options(removal_grace: Duration) -> MonitorOptions {
    MonitorOptions {
        backend: Backend::Udev,
        removal_grace,
        ..MonitorOptions::default()
    }
}

fn id(text: &str) -> DeviceId {
    text.parse().expect("valid id")
}

#[tokio::test]
async fn udev_coldplug_enumerates_rockchip_and_ftdi() {
    if !is_inner_run() {
        return rerun_under_preload("udev_coldplug_enumerates_rockchip_and_ftdi");
    }
    let tb = Testbed::new();
    tb.add_from_string(ROOT_HUB);
    tb.add_from_string(RK3588_MASKROM_1_2);
    tb.add_from_string(FTDI_1_4);

    let registry = Registry::new();
    let monitor = start_monitor(registry.clone(), udev_options(Duration::ZERO))
        .await
        .expect("monitor starts");
    // UMOCKDEV_DIR is set: the emulated udev monitor is live, no fallback.
    assert_eq!(monitor.source(), EventSource::UdevMonitor);
    assert_eq!(registry.source(), EventSource::UdevMonitor);

    let all = registry.snapshot();
    let ids: Vec<&str> = all.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(
        ids,
        ["1-2", "1-4"],
        "root hub and interfaces are not devices"
    );

    let rk = &all[0];
    assert_eq!((rk.vid, rk.pid), (0x2207, 0x350b));
    assert_eq!(rk.bcd_usb, 0x0200);
    assert_eq!(rk.bcd_device, 0x0100);
    assert_eq!(rk.soc.as_deref(), Some("RK3588"));
    assert_eq!(rk.mode, Some(RockchipMode::MaskRom));
    assert_eq!(rk.kind, DeviceKind::Rockusb);
    assert_eq!((rk.busnum, rk.devnum), (1, 2));
    assert_eq!(rk.speed.as_deref(), Some("480"));
    assert_eq!(rk.manufacturer.as_deref(), Some("Rockchip"));
    assert_eq!(rk.serial.as_deref(), Some("RK3588-EVB-0001"));
    assert_eq!(rk.devnode.as_deref(), Some("/dev/bus/usb/001/002"));
    assert_eq!(rk.driver.as_deref(), Some("usb"));
    assert_eq!(rk.syspath, SYS_1_2);

    let ftdi = &all[1];
    assert_eq!((ftdi.vid, ftdi.pid), (0x0403, 0x6001));
    assert_eq!(ftdi.kind, DeviceKind::Other);
    assert_eq!((ftdi.soc.as_deref(), ftdi.mode), (None, None));
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

#[tokio::test]
async fn udev_hotplug_add_and_remove_are_broadcast() {
    if !is_inner_run() {
        return rerun_under_preload("udev_hotplug_add_and_remove_are_broadcast");
    }
    let tb = Testbed::new();
    tb.add_from_string(ROOT_HUB);
    let registry = Registry::new();
    let _monitor = start_monitor(registry.clone(), udev_options(Duration::ZERO))
        .await
        .expect("monitor starts");
    assert!(registry.is_empty());
    let mut rx = registry.subscribe();

    tb.add_from_string(RK3588_MASKROM_1_2);
    let d = expect_added(&mut rx, "1-2 added").await;
    assert_eq!(d.id, id("1-2"));
    assert_eq!(d.mode, Some(RockchipMode::MaskRom));
    assert_eq!(d.serial.as_deref(), Some("RK3588-EVB-0001"));

    // A second, identical board: told apart by its port only.
    tb.add_from_string(RK3588_MASKROM_1_3);
    let d = expect_added(&mut rx, "1-3 added").await;
    assert_eq!(d.id, id("1-3"));
    assert_eq!(registry.len(), 2);

    // bind after add, as the kernel sends: same state, no event.
    tb.uevent(SYS_1_2, "bind");
    assert_no_event(&mut rx, Duration::from_millis(200)).await;

    tb.unplug(SYS_1_2);
    let d = expect_removed(&mut rx, "1-2 removed").await;
    assert_eq!(d.id, id("1-2"));
    assert!(registry.get(&id("1-2")).is_none());
    assert!(registry.get(&id("1-3")).is_some());
}

#[tokio::test]
async fn udev_reenumeration_in_loader_mode_is_one_change() {
    if !is_inner_run() {
        return rerun_under_preload("udev_reenumeration_in_loader_mode_is_one_change");
    }
    let tb = Testbed::new();
    tb.add_from_string(ROOT_HUB);
    tb.add_from_string(RK3588_MASKROM_1_2);
    let registry = Registry::new();
    let _monitor = start_monitor(registry.clone(), udev_options(Duration::from_secs(2)))
        .await
        .expect("monitor starts");
    let before = registry.get(&id("1-2")).expect("coldplugged");
    let mut rx = registry.subscribe();

    // What `rkdeveloptool db` looks like: the board drops off the bus and comes
    // back on the same port with a new device number, now in Loader mode.
    tb.unplug(SYS_1_2);
    tokio::time::sleep(Duration::from_millis(100)).await;
    tb.add_from_string(RK3588_LOADER_1_2);

    let (old, new) = expect_changed(&mut rx, "1-2 changed").await;
    assert_eq!(old.id, new.id);
    assert_eq!(new.id, id("1-2"));
    assert_eq!((old.devnum, new.devnum), (2, 5));
    assert_eq!(old.mode, Some(RockchipMode::MaskRom));
    assert_eq!(new.mode, Some(RockchipMode::Loader));
    assert_eq!(new.bcd_usb, 0x0201);
    assert_eq!(new.devnode.as_deref(), Some("/dev/bus/usb/001/005"));
    assert_eq!(
        new.first_seen, before.first_seen,
        "Changed keeps first_seen"
    );
    assert_no_event(&mut rx, Duration::from_millis(2500)).await;
    assert_eq!(registry.get(&id("1-2")).map(|d| d.devnum), Some(5));
}

#[tokio::test]
async fn udev_unplug_past_the_grace_is_removed() {
    if !is_inner_run() {
        return rerun_under_preload("udev_unplug_past_the_grace_is_removed");
    }
    let tb = Testbed::new();
    tb.add_from_string(ROOT_HUB);
    tb.add_from_string(RK3588_MASKROM_1_2);
    let registry = Registry::new();
    let _monitor = start_monitor(registry.clone(), udev_options(Duration::from_millis(300)))
        .await
        .expect("monitor starts");
    let mut rx = registry.subscribe();
    tb.unplug(SYS_1_2);
    // Still listed during the grace period…
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(registry.get(&id("1-2")).is_some());
    // …and removed once it has passed.
    let d = expect_removed(&mut rx, "1-2 removed after grace").await;
    assert_eq!(d.id, id("1-2"));
}

/// On the real host (no preload): the detection rule picks the source, and a
/// machine without a USB bus simply has no devices.
#[tokio::test]
async fn auto_backend_on_this_host_reports_its_source() {
    if is_inner_run() || std::env::var_os("UMOCKDEV_DIR").is_some() {
        return;
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
