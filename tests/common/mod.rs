//! Shared helpers for the device integration tests.

#![allow(dead_code)]

pub mod umockdev;

use std::time::Duration;

use gatecmd_core::events::Events as Receiver;
use gatecmd_devices::{Device, DeviceEvent};

pub const ROOT_HUB: &str = include_str!("../fixtures/usb1-root-hub.umockdev");
pub const RK3588_MASKROM_1_2: &str = include_str!("../fixtures/rk3588-maskrom-1-2.umockdev");
pub const RK3588_LOADER_1_2: &str = include_str!("../fixtures/rk3588-loader-1-2.umockdev");
pub const RK3588_MASKROM_1_3: &str = include_str!("../fixtures/rk3588-maskrom-1-3.umockdev");
pub const FTDI_1_4: &str = include_str!("../fixtures/ftdi-1-4.umockdev");

pub const SYS_1_2: &str = "/sys/devices/pci0000:00/0000:00:14.0/usb1/1-2";
pub const SYS_1_3: &str = "/sys/devices/pci0000:00/0000:00:14.0/usb1/1-3";
pub const SYS_1_4: &str = "/sys/devices/pci0000:00/0000:00:14.0/usb1/1-4";

/// The next event, or a panic naming what was awaited.
pub async fn next_event(rx: &mut Receiver<DeviceEvent>, what: &str) -> DeviceEvent {
    match tokio::time::timeout(Duration::from_secs(5), rx.recv()).await {
        Ok(Ok(event)) => event,
        Ok(Err(e)) => panic!("event channel failed while waiting for {what}: {e}"),
        Err(_) => panic!("no device event within 5 s while waiting for {what}"),
    }
}

/// Asserts that no event arrives within `quiet`.
pub async fn assert_no_event(rx: &mut Receiver<DeviceEvent>, quiet: Duration) {
    if let Ok(event) = tokio::time::timeout(quiet, rx.recv()).await {
        panic!("unexpected device event: {event:?}");
    }
}

/// The next event, which must be `Added`.
pub async fn expect_added(rx: &mut Receiver<DeviceEvent>, what: &str) -> Device {
    match next_event(rx, what).await {
        DeviceEvent::Added(d) => d,
        other => panic!("expected Added ({what}), got {other:?}"),
    }
}

/// The next event, which must be `Removed`.
pub async fn expect_removed(rx: &mut Receiver<DeviceEvent>, what: &str) -> Device {
    match next_event(rx, what).await {
        DeviceEvent::Removed(d) => d,
        other => panic!("expected Removed ({what}), got {other:?}"),
    }
}

/// The next event, which must be `Changed`: (old, new).
pub async fn expect_changed(rx: &mut Receiver<DeviceEvent>, what: &str) -> (Device, Device) {
    match next_event(rx, what).await {
        DeviceEvent::Changed { old, new } => (old, new),
        other => panic!("expected Changed ({what}), got {other:?}"),
    }
}
