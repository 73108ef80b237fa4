//! `prepare` decides on the snapshot it is given, and what it returns carries that
//! snapshot: the lock keys, the device and the isolation target come from its devices (the
//! device by reference, looked up once), and the wait limit is checked there, dry run or
//! not. A device id is parsed as the call is read, and refused in its turn.

use gatecmd_core::identity::ClientIdentity;
use gatecmd_devices::Device;

use super::super::ask::Ask;
use super::{Refused, Snapshot, prepare};
use crate::config::Config;
use crate::locks::LockKey;

const CONFIG: &str = r#"
auth_token: x
devices:
  - name: rockusb
    match: {vid: "2207"}
isolation:
  sysfs_root: /nonexistent/sys
  devfs_root: /nonexistent/dev
boards:
  - name: rk1
    usb: "1-2"
commands:
  - name: ld
    binary: /bin/true
    device: rockusb
    allowed_args:
      - pattern: ld
  - name: iso
    binary: /bin/true
    device: rockusb
    isolate: true
    allowed_args:
      - pattern: ld
  - name: plain
    binary: /bin/true
    allowed_args:
      - pattern: go
"#;

fn snapshot(devices: Vec<Device>) -> Snapshot {
    let config = Config::parse(CONFIG, "test.yaml").expect("test config");
    Snapshot::of(config, devices)
}

fn request(json: serde_json::Value) -> Ask {
    serde_json::from_value(json).expect("request")
}

fn who() -> ClientIdentity {
    ClientIdentity::local("default")
}

#[test]
fn lock_keys_and_board_come_from_the_snapshot_it_carries() {
    // Two devices of the class, one on the board's port: in no registry, only here.
    let snap = snapshot(vec![Device::sample("1-2", 7), Device::sample("1-3", 9)]);
    let p = prepare(
        &snap,
        &who(),
        request(serde_json::json!({"command": "ld", "args": ["ld"]})),
    )
    .expect("prepared");
    assert!(std::ptr::eq(p.snapshot, &snap), "not the snapshot given");
    assert!(std::ptr::eq(&*p.snapshot.config, &*snap.config));
    assert_eq!(
        p.keys,
        [LockKey::usb(0x2207, 0x350b), LockKey::Board("rk1".into())],
        "keys of the snapshot's devices (the board at 1-2 among them)"
    );
    assert!(p.device.is_none());
    assert_eq!(p.isolate(), None);
}

#[test]
fn an_isolated_command_runs_on_the_snapshot_s_only_board() {
    let snap = snapshot(vec![Device::sample("1-3", 9)]);
    let p = prepare(
        &snap,
        &who(),
        request(serde_json::json!({"command": "iso", "args": ["ld"]})),
    )
    .expect("prepared");
    assert_eq!(p.isolate().map(|d| d.as_str()), Some("1-3"));
    assert_eq!(p.keys, [LockKey::Port("1-3".into())]);
    assert_eq!(p.shared_keys, [LockKey::usb(0x2207, 0x350b)]);
    // The same snapshot with a second board: which one is ambiguous, from it alone.
    let snap = snapshot(vec![Device::sample("1-3", 9), Device::sample("1-4", 3)]);
    let r = prepare(
        &snap,
        &who(),
        request(serde_json::json!({"command": "iso", "args": ["ld"]})),
    );
    assert!(matches!(r, Err(Refused::Ambiguous { .. })), "{:?}", r.err());
}

#[test]
fn a_board_named_by_the_call_is_looked_up_in_the_snapshot() {
    let empty = snapshot(vec![]);
    let r = prepare(
        &empty,
        &who(),
        request(serde_json::json!({"command": "ld", "args": ["ld"], "board": "rk1"})),
    );
    assert!(
        matches!(r, Err(Refused::BoardEmpty { .. })),
        "{:?}",
        r.err()
    );
    let snap = snapshot(vec![Device::sample("1-2", 7)]);
    let p = prepare(
        &snap,
        &who(),
        request(serde_json::json!({"command": "ld", "args": ["ld"], "board": "rk1"})),
    )
    .expect("prepared");
    let dev = p.device.expect("the board's device");
    assert!(
        std::ptr::eq(dev, &snap.devices()[0]),
        "the snapshot's device itself, not a second look"
    );
    assert_eq!(p.board.map(|b| b.name.as_str()), Some("rk1"));
}

#[test]
fn the_wait_limit_is_a_check_of_prepare_dry_run_or_not() {
    let snap = snapshot(vec![]);
    let max = crate::locks::MAX_WAIT_SECS;
    for dry_run in [false, true] {
        let r = prepare(
            &snap,
            &who(),
            request(serde_json::json!({
                "command": "plain", "args": ["go"], "dry_run": dry_run, "wait_secs": max + 1,
            })),
        );
        match r {
            Err(Refused::WaitTooLong { wait, max: m }) => {
                assert_eq!((wait, m), (max + 1, max), "dry_run {dry_run}");
            }
            other => panic!("dry_run {dry_run}: {:?}", other.err()),
        }
        let p = prepare(
            &snap,
            &who(),
            request(serde_json::json!({
                "command": "plain", "args": ["go"], "dry_run": dry_run, "wait_secs": max,
            })),
        )
        .expect("the maximum itself is allowed");
        assert_eq!(p.wait, std::time::Duration::from_secs(max));
    }
}

#[test]
fn a_device_id_is_parsed_as_the_request_is_read_and_refused_in_its_turn() {
    let snap = snapshot(vec![Device::sample("1-2", 7)]);
    // Wrong arguments and a malformed id: the arguments are the first reason, as before.
    let r = prepare(
        &snap,
        &who(),
        request(serde_json::json!({"command": "ld", "args": ["nope"], "device": "usb1"})),
    );
    assert!(matches!(r, Err(Refused::Args(_))), "{:?}", r.err());
    // Right arguments: the malformed id is refused (not the request as a whole).
    let r = prepare(
        &snap,
        &who(),
        request(serde_json::json!({"command": "ld", "args": ["ld"], "device": "usb1"})),
    );
    assert!(matches!(r, Err(Refused::BadDeviceId(_))), "{:?}", r.err());
    // A port path: the device on it, by reference into the snapshot, and its board.
    let p = prepare(
        &snap,
        &who(),
        request(serde_json::json!({"command": "ld", "args": ["ld"], "device": "1-2"})),
    )
    .expect("prepared");
    assert!(
        p.device
            .is_some_and(|d| std::ptr::eq(d, &snap.devices()[0]))
    );
    assert_eq!(p.board.map(|b| b.name.as_str()), Some("rk1"));
    assert_eq!(
        p.keys,
        [LockKey::usb(0x2207, 0x350b), LockKey::Board("rk1".into())]
    );
    let r = prepare(
        &snap,
        &who(),
        request(serde_json::json!({"command": "ld", "args": ["ld"], "device": "1-9"})),
    );
    assert!(
        matches!(r, Err(Refused::NotAttached { .. })),
        "{:?}",
        r.err()
    );
}

#[test]
fn an_unknown_command_says_whether_it_is_configured_for_others() {
    let snap = snapshot(vec![]);
    let only_plain = ClientIdentity {
        commands: Some(["plain".to_string()].into()),
        ..who()
    };
    let mut visible = Vec::new();
    for (command, configured) in [("ld", true), ("nope", false)] {
        let r = prepare(
            &snap,
            &only_plain,
            request(serde_json::json!({"command": command, "args": []})),
        );
        match r {
            Err(e @ Refused::UnknownCommand { .. }) => {
                assert_eq!(e.names_configured_command(), configured, "{command}");
                let Refused::UnknownCommand { visible: v, .. } = e else {
                    unreachable!()
                };
                visible.push(v);
            }
            other => panic!("{command}: {:?}", other.err()),
        }
    }
    assert_eq!(
        visible[0], visible[1],
        "what the refusal shows does not tell them apart"
    );
    assert_eq!(visible[0], ["plain"]);
}
