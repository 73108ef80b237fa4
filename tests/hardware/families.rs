//! Every board on the bench, not only Rockchip (issue 31): the real `gatecmd` under the
//! umockdev preload, one testbed holding a device for **every row** of the families table
//! (crates/gatecmd-devices/src/families/table.rs) plus devices of unknown vendors that carry
//! the fastboot or DFU interface class, and `list_devices` over MCP naming the family and
//! mode of each. The descriptors are real USB descriptor bytes (tests/common/umockdev.rs,
//! `device_at`), read by gatecmd as the kernel's `descriptors` attribute.
#![cfg(feature = "udev")]

use crate::common;
use crate::harness;

use std::collections::BTreeMap;
use std::time::Duration;

use common::ROOT_HUB;
use common::umockdev::{Testbed, device_at, is_inner_run, rerun_under_preload};
use gatecmd_devices::families::{ModeRule, PidRule, ROWS};
use harness::*;
use serde_json::{Value, json};

/// A device made of one row's own ids: the lowest product id the row takes, the first
/// bcdDevice of its range, its interface class if it needs one.
struct Case {
    port: u32,
    vid: u16,
    pid: u16,
    bcd_usb: u16,
    bcd_device: u16,
    interfaces: Vec<(u8, u8, u8)>,
    /// What list_devices must say: (family, mode, soc).
    want: (String, Option<String>, Option<String>),
}

/// (vid, pid, bcdUSB, interfaces, family, mode, soc) of a device named by hand.
type ByHand = (
    u16,
    u16,
    u16,
    &'static [(u8, u8, u8)],
    &'static str,
    Option<&'static str>,
    Option<&'static str>,
);

fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    let mut port = 2;
    // Each row, as its own device.
    for row in ROWS {
        let Some(vid) = row.vid else { continue };
        let pid = match row.pid {
            PidRule::Exact(p) | PidRule::Range(p, _) => p,
            PidRule::Any => 0x0100,
        };
        let interfaces: Vec<(u8, u8, u8)> = row
            .class
            .iter()
            .map(|c| (c.class, c.subclass, c.protocol))
            .collect();
        let mode = match row.mode {
            ModeRule::Fixed(m) => Some(m.to_string()),
            ModeRule::RockusbBcdUsb => Some("maskrom".to_string()),
            ModeRule::Unknown => None,
        };
        // A class-decided row whose ids another, more specific row of the same family
        // also takes (a vendor DFU id) keeps its family; its soc is that row's.
        out.push(Case {
            port,
            vid,
            pid,
            bcd_usb: 0x0200,
            bcd_device: row.bcd_device.map_or(0x0100, |(a, _)| a),
            interfaces,
            want: (row.family.to_string(), mode, row.soc.map(str::to_string)),
        });
        port += 1;
    }
    // Written out by hand, from the tools' own sources (docs/FAMILIES.md), independent of
    // the table: a wrong row would fail here.
    let by_hand: &[ByHand] = &[
        // A Rockchip board in U-Boot's fastboot keeps its rockusb id.
        (
            0x2207,
            0x350b,
            0x0200,
            &[(0xff, 0x42, 0x03)],
            "fastboot",
            Some("fastboot"),
            None,
        ),
        // An unknown vendor with the fastboot class; with DFU's, DFU mode and runtime.
        (
            0x1234,
            0x5678,
            0x0200,
            &[(0xff, 0x42, 0x03)],
            "fastboot",
            Some("fastboot"),
            None,
        ),
        (
            0x1209,
            0x0001,
            0x0200,
            &[(0xfe, 0x01, 0x02)],
            "dfu",
            Some("dfu"),
            None,
        ),
        (
            0x1209,
            0x0002,
            0x0200,
            &[(0x02, 0x02, 0x01), (0xfe, 0x01, 0x01)],
            "dfu",
            Some("dfu_runtime"),
            None,
        ),
        // sunxi-tools fel_lib.h: 1f3a:efe8, every Allwinner SoC.
        (
            0x1f3a,
            0xefe8,
            0x0200,
            &[(0xff, 0xff, 0xff)],
            "sunxi_fel",
            Some("fel"),
            None,
        ),
        // raspberrypi/usbboot main.c: 0a5c:2712 is the BCM2712's ROM.
        (
            0x0a5c,
            0x2712,
            0x0200,
            &[],
            "rpi_usbboot",
            Some("bootrom"),
            Some("BCM2712 (Pi 5/CM5)"),
        ),
        // picotool: 2e8a:000f is RP2350 BOOTSEL.
        (
            0x2e8a,
            0x000f,
            0x0200,
            &[],
            "rp_bootsel",
            Some("bootsel"),
            Some("RP2350"),
        ),
        // rkdeveloptool: bcdUSB bit 0 set is a loader.
        (
            0x2207,
            0x350b,
            0x0201,
            &[(0xff, 0x06, 0x05)],
            "rockusb",
            Some("loader"),
            Some("RK3588"),
        ),
        // Qualcomm EDL.
        (0x05c6, 0x9008, 0x0200, &[], "qcom_edl", Some("edl"), None),
    ];
    for (vid, pid, bcd_usb, ifs, family, mode, soc) in by_hand {
        out.push(Case {
            port,
            vid: *vid,
            pid: *pid,
            bcd_usb: *bcd_usb,
            bcd_device: 0x0100,
            interfaces: ifs.to_vec(),
            want: (
                family.to_string(),
                mode.map(str::to_string),
                soc.map(str::to_string),
            ),
        });
        port += 1;
    }
    out
}

fn config() -> String {
    format!(
        "clients:\n  - name: vm-a\n    token: {TOKEN_A}\ndevices:\n  - name: any-fastboot\n    match: {{vid: \"18d1\"}}\n"
    )
}

#[test]
fn every_row_of_the_families_table_is_named_by_list_devices() {
    if !is_inner_run() {
        rerun_under_preload(
            module_path!(),
            "every_row_of_the_families_table_is_named_by_list_devices",
        );
        return;
    }
    let cases = cases();
    assert!(cases.len() > 170, "{} cases", cases.len());
    let tb = Testbed::new();
    tb.add_from_string(ROOT_HUB);
    for c in &cases {
        tb.add_from_string(&device_at(
            c.port,
            c.vid,
            c.pid,
            c.bcd_usb,
            c.bcd_device,
            &c.interfaces,
        ));
    }
    let root = tb.root_dir();
    let s = Server::start_with(
        &config(),
        &[],
        &[
            ("LD_PRELOAD", "libumockdev-preload.so.0"),
            ("UMOCKDEV_DIR", root.to_str().expect("utf8")),
        ],
    );
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let c = connect(&s.url, Some(TOKEN_A), Era::Modern)
            .await
            .expect("connect");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let listed: BTreeMap<String, Value> = loop {
            let r = call(&c, "list_devices", json!({})).await;
            let devices = structured(&r)["devices"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if devices.len() >= cases.len() || std::time::Instant::now() > deadline {
                break devices
                    .into_iter()
                    .map(|d| (d["id"].as_str().unwrap_or_default().to_string(), d))
                    .collect();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let mut wrong = Vec::new();
        for case in &cases {
            let id = format!("1-{}", case.port);
            let Some(d) = listed.get(&id) else {
                wrong.push(format!(
                    "{id} ({:04x}:{:04x}) not listed",
                    case.vid, case.pid
                ));
                continue;
            };
            let got = (
                d["family"].as_str().unwrap_or_default().to_string(),
                d["mode"].as_str().map(str::to_string),
                d["soc"].as_str().map(str::to_string),
            );
            if got != case.want {
                wrong.push(format!(
                    "{id} {:04x}:{:04x} {:?}: want {:?}, got {got:?}",
                    case.vid, case.pid, case.interfaces, case.want
                ));
            }
        }
        assert!(
            wrong.is_empty(),
            "{} of {}:\n{}",
            wrong.len(),
            cases.len(),
            wrong.join("\n")
        );
        // The filters take family and mode; an unknown family is refused naming the known.
        let r = call(&c, "list_devices", json!({"family": "fastboot"})).await;
        let fastboot = structured(&r)["devices"].as_array().map_or(0, Vec::len);
        assert!(fastboot >= 20, "{fastboot} fastboot devices");
        let r = call(
            &c,
            "list_devices",
            json!({"family": "rockusb", "mode": "loader"}),
        )
        .await;
        let loaders = structured(&r)["devices"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(loaders.len(), 1, "{loaders:?}");
        let r = call(&c, "list_devices", json!({"family": "toaster"})).await;
        assert!(is_error(&r));
        assert!(text(&r).contains("families: rockusb"), "{}", text(&r));
    });
}
