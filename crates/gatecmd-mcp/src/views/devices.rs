//! A device and a lock key as every surface shows them: `list_devices`, the device
//! resources, the bench page, `gatecmd devices` and the board views render these; and what
//! became of the device a command ran on (`device_left`, in `execute_command`'s result and
//! in a job's summary).

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use gatecmd_devices::{Device, DeviceKind, RockchipMode};
use gatecmd_domain::config::Config;
use gatecmd_domain::locks::{HeldBy, KeyState, LockKey, LockManager, class_of, lock_key_of};
use gatecmd_domain::state::AppState;

/// A key's lock state as any client may see it (no lease ids, except the caller's own).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct LockView {
    /// The lock key (`usb:VVVV:PPPP`, `group:NAME` or `port:ID`).
    pub key: String,
    /// Whether a lease or a running command holds the key.
    pub held: bool,
    /// Client holding the lease, or running the command.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// `lease` or `command`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_by: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub since: Option<DateTime<Utc>>,
    /// When the lease ends unless renewed.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// The command running on the key now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub running: Option<String>,
    /// Requests waiting for the key.
    pub queue_len: usize,
    /// The lease id, shown only to its holder.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_id: Option<String>,
    /// Boards holding this key shared through their own `port:` key (an isolated
    /// command or a board lease). A command or lease on this whole key waits for them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shared_by: Vec<SharedView>,
}

/// One board's shared hold on a VID:PID (or group) key.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SharedView {
    /// The board's key (`port:1-2`).
    pub via: String,
    pub holder: String,
    /// `lease` or `command`.
    pub held_by: String,
    /// The command running on the board, if a command holds it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub running: Option<String>,
}

impl LockView {
    /// The view of `key` for `caller`.
    pub fn of(locks: &LockManager, key: &LockKey, caller: &str) -> LockView {
        Self::from_state(key, locks.key_state(key).as_ref(), caller)
    }

    /// The view of a key's state for `caller` (`None`: free).
    pub fn from_state(key: &LockKey, st: Option<&KeyState>, caller: &str) -> LockView {
        let mut v = LockView {
            key: key.to_string(),
            held: false,
            holder: None,
            held_by: None,
            note: None,
            since: None,
            lease_expires_at: None,
            running: None,
            queue_len: 0,
            lease_id: None,
            shared_by: vec![],
        };
        let Some(st) = st else { return v };
        v.queue_len = st.queue_len;
        v.shared_by = st
            .shared
            .iter()
            .map(|h| SharedView {
                via: h.via.to_string(),
                holder: h.client.0.clone(),
                held_by: held_by(h.held_by),
                running: h.command.clone(),
            })
            .collect();
        if let Some(r) = &st.running {
            v.held = true;
            v.holder = Some(r.client.0.clone());
            v.held_by = Some(held_by(HeldBy::Command));
            v.since = Some(r.since);
            v.running = Some(r.command.clone());
        }
        if let Some(l) = &st.lease {
            v.held = true;
            v.holder = Some(l.holder.0.clone());
            v.held_by = Some(held_by(HeldBy::Lease));
            v.note = l.note.clone();
            v.since = Some(l.acquired_at);
            v.lease_expires_at = Some(l.expires_at);
            if l.holder.0 == caller {
                v.lease_id = Some(l.lease_id.0.clone());
            }
        }
        v
    }
}

fn held_by(h: HeldBy) -> String {
    match h {
        HeldBy::Lease => "lease".into(),
        HeldBy::Command => "command".into(),
    }
}

/// A device as `list_devices` and the device resources show it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct DeviceView {
    #[serde(flatten)]
    pub device: Device,
    /// The config's device class, if one matches.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// The device's lock key and who holds it.
    pub lock: LockView,
    /// For a board of a class with isolated commands: its own key (`port:ID`), which
    /// isolated commands and board leases take.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub board_lock: Option<LockView>,
    /// The configured board whose usb port this device is on (docs/BOARDS.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub board: Option<String>,
}

impl DeviceView {
    /// The view of `d` for `caller`.
    pub fn new(state: &AppState, config: &Config, d: Device, caller: &str) -> DeviceView {
        let key = lock_key_of(config, &d);
        let class = class_of(config, &d);
        let board_lock = class
            .filter(|c| config.class_is_isolated(&c.name))
            .map(|_| LockView::of(&state.locks, &LockKey::Port(d.id.to_string()), caller));
        DeviceView {
            class: class.map(|c| c.name.clone()),
            lock: LockView::of(&state.locks, &key, caller),
            board_lock,
            board: config.board_at(&d.id.to_string()).map(|b| b.name.clone()),
            device: d,
        }
    }
}

/// Result of `list_devices` (and what `gatecmd devices --json` prints).
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(transform = crate::calls::answer::or_refusal)]
pub struct DeviceList {
    pub devices: Vec<DeviceView>,
    /// Which event source keeps the list current (udev monitor, kernel uevents, rescan…).
    pub event_source: String,
}

/// `device_left` of an `execute_command` result.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct DeviceLeft {
    /// The device (port path) the command ran on.
    pub device: String,
    /// Whether a device is attached on that port again at the end of the command.
    pub attached_now: bool,
    /// Its rockusb mode then, when it is a Rockchip board.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode_now: Option<String>,
    /// The same in words.
    pub message: String,
}

impl DeviceLeft {
    /// What the command use case saw (`Watch`), in words.
    pub fn of(l: gatecmd_domain::usecases::command::Left) -> DeviceLeft {
        let message = match (l.attached_now, &l.mode_now) {
            (false, _) => format!(
                "device {} went away while the command ran (unplugged, powered off, or reset by the command itself as db and rd do); nothing is attached there now: wait_for_device to see it return",
                l.device
            ),
            (true, Some(mode)) => format!(
                "device {} went away while the command ran and is attached again now ({mode} mode)",
                l.device
            ),
            (true, None) => format!(
                "device {} went away while the command ran and is attached again now",
                l.device
            ),
        };
        DeviceLeft {
            device: l.device.to_string(),
            attached_now: l.attached_now,
            mode_now: l.mode_now,
            message,
        }
    }
}

/// One line per device, for people.
pub fn render_device(v: &DeviceView) -> String {
    let d = &v.device;
    let mut s = format!("{}  {:04x}:{:04x}", d.id, d.vid, d.pid);
    if let Some(soc) = &d.soc {
        s.push_str(&format!("  {soc}"));
    }
    match (d.rockusb_mode(), d.kind, d.family) {
        (Some(RockchipMode::MaskRom), ..) => s.push_str(" MaskROM"),
        (Some(RockchipMode::Loader), ..) => s.push_str(" Loader"),
        (None, DeviceKind::RockchipOther, _) => s.push_str(" (Rockchip, not rockusb)"),
        (None, _, Some(family)) => {
            s.push_str(&format!("  {family}"));
            if let Some(mode) = d.mode {
                s.push_str(&format!(" {mode}"));
            }
        }
        _ => {}
    }
    for part in [&d.manufacturer, &d.product].into_iter().flatten() {
        s.push_str(&format!("  {part}"));
    }
    if let Some(serial) = &d.serial {
        s.push_str(&format!("  serial {serial}"));
    }
    s.push_str(&format!("  bus {} dev {}", d.busnum, d.devnum));
    if let Some(c) = &v.class {
        s.push_str(&format!("  class {c}"));
    }
    for lock in std::iter::once(&v.lock).chain(&v.board_lock) {
        if lock.held {
            s.push_str(&format!(
                "  [{} held by {}]",
                lock.key,
                lock.holder.as_deref().unwrap_or("?")
            ));
        }
    }
    s
}
