//! `list_boards`: every configured board with the device at its port, its console, its
//! power state and its lock, as the caller may see them.

use std::collections::BTreeMap;

use rmcp::model::CallToolResult;
use schemars::JsonSchema;
use serde::Serialize;

use crate::boards::PowerState;
use crate::config::{BoardConfig, Config};
use crate::devices::RockchipMode;
use crate::locks::LockKey;
use crate::state::AppState;
use crate::tools::boards::device_at;
use crate::tools::devices::{DeviceView, LockView};

/// One board in `list_boards`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct BoardView {
    pub name: String,
    pub tags: BTreeMap<String, String>,
    /// Its flashing USB port path.
    pub usb: String,
    /// The device at its usb port now (any mode), or null.
    pub device: Option<DeviceView>,
    /// The `soc` tag, else the attached rockusb device's SoC in lower case (as tags are
    /// written; `match` compares either way).
    pub soc: Option<String>,
    /// The attached device's rockusb mode, if it is in one.
    pub mode: Option<RockchipMode>,
    /// The serial console: the capture's view when it runs, else the configuration
    /// (`{configured: true, port|path, baud}`); null when the board has none.
    pub console: Option<serde_json::Value>,
    /// The power switch and the state gatecmd last switched it to; null when none.
    pub power: Option<PowerView>,
    /// The board's lease (`board:NAME`) and who holds it.
    pub lock: LockView,
    /// `lock_board {match}` requests queued that this board would serve (they wait in
    /// one queue for every board of their match, so `lock.queue_len` does not count them).
    pub match_waiting: usize,
}

/// A board's power switch in `list_boards`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct PowerView {
    /// `uhubctl` or `commands`.
    pub backend: String,
    pub state: PowerState,
}

/// Result of `list_boards`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct BoardList {
    pub boards: Vec<BoardView>,
}

/// The view of `board` for `caller`.
pub fn board_view(
    state: &AppState,
    config: &Config,
    board: &BoardConfig,
    caller: &str,
) -> BoardView {
    let dev = device_at(state, &board.usb);
    let soc = board.tags.get("soc").cloned().or_else(|| {
        dev.as_ref()
            .and_then(|d| d.soc.as_deref().map(str::to_ascii_lowercase))
    });
    let mode = dev.as_ref().and_then(|d| d.mode);
    let console = board.console.as_ref().map(|c| {
        state.boards.console_view(&board.name).unwrap_or_else(|| {
            let mut v = serde_json::json!({"configured": true, "baud": c.baud});
            if let Some(p) = &c.port {
                v["port"] = p.clone().into();
            }
            if let Some(p) = &c.path {
                v["path"] = p.display().to_string().into();
            }
            v
        })
    });
    BoardView {
        name: board.name.clone(),
        tags: board.tags.clone(),
        usb: board.usb.clone(),
        device: dev.map(|d| DeviceView::new(state, config, d, caller)),
        soc,
        mode,
        console,
        power: board.power.as_ref().map(|p| PowerView {
            backend: p.backend().into(),
            state: state.boards.power_state(&board.name),
        }),
        lock: LockView::of(&state.locks, &LockKey::Board(board.name.clone()), caller),
        match_waiting: state.boards.queue.waiting_for(&board.name),
    }
}

/// Every board as `caller` sees it.
pub fn view(state: &AppState, caller: &str) -> BoardList {
    let config = state.config();
    BoardList {
        boards: config
            .boards
            .iter()
            .map(|b| board_view(state, &config, b, caller))
            .collect(),
    }
}

/// `list_boards`.
pub fn list(state: &AppState, caller: &str) -> CallToolResult {
    let v = view(state, caller);
    let mut text = String::new();
    for b in &v.boards {
        text.push_str(&format!("{} (usb {}", b.name, b.usb));
        if !b.tags.is_empty() {
            let tags: Vec<String> = b.tags.iter().map(|(k, v)| format!("{k}={v}")).collect();
            text.push_str(&format!(", {}", tags.join(" ")));
        }
        text.push_str("): ");
        match &b.device {
            Some(d) => text.push_str(&format!(
                "{:04x}:{:04x} attached{}",
                d.device.vid,
                d.device.pid,
                b.mode.map(|m| format!(" in {m}")).unwrap_or_default()
            )),
            None => text.push_str("nothing attached"),
        }
        if let Some(p) = &b.power {
            text.push_str(&format!(
                "; power {} ({})",
                serde_json::to_value(p.state)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                p.backend
            ));
        }
        match (&b.lock.holder, b.lock.held) {
            (Some(h), true) => text.push_str(&format!(
                "; held by {h} ({}), {} waiting",
                b.lock.held_by.as_deref().unwrap_or("lease"),
                b.lock.queue_len + b.match_waiting
            )),
            _ => text.push_str("; free"),
        }
        text.push('\n');
    }
    if v.boards.is_empty() {
        text.push_str("No boards are configured (the server's config has no boards: section).\n");
    }
    super::structured(&v, text)
}
