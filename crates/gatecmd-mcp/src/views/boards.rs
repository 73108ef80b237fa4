//! A board as every surface shows it (`list_boards`, the board resources, the bench page):
//! the device at its port, its console, its power state and its lock, as the caller may
//! see them.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Serialize;

use super::devices::{DeviceView, LockView};
use gatecmd_domain::boards::PowerState;
use gatecmd_domain::config::{BoardConfig, Config};
use gatecmd_domain::locks::LockKey;
use gatecmd_domain::state::AppState;

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
    /// The attached device's family (rockusb, fastboot, dfu, …; docs/FAMILIES.md).
    pub family: Option<&'static str>,
    /// The attached device's mode within its family (maskrom, loader, fastboot, dfu, …).
    pub mode: Option<&'static str>,
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
    /// Whether you may flash this board and which loaders may be sent to it.
    pub flash: FlashView,
}

/// A board's flashing policy in `list_boards`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct FlashView {
    /// flash_board may write this board for you (`flash.enabled`, `flash.boards`,
    /// `flash.clients`).
    pub enabled: bool,
    /// The loader files that may be sent to it, by flash_board's `loader` or
    /// execute_command's loader arguments (e.g. `rkdeveloptool db`); null: any file in
    /// the file roots.
    pub loaders: Option<Vec<String>>,
}

impl FlashView {
    fn of(config: &Config, board: &BoardConfig, caller: &str) -> FlashView {
        let f = &config.flash;
        FlashView {
            enabled: f.enabled && f.allows_board(&board.name) && f.allows_client(caller),
            loaders: gatecmd_domain::flash::allowed_loader_files(board.loaders(f)),
        }
    }
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
    let dev = state.registry.get(&board.usb);
    let soc = board.tags.get("soc").cloned().or_else(|| {
        dev.as_ref()
            .and_then(|d| d.soc.map(str::to_ascii_lowercase))
    });
    let mode = dev.as_ref().and_then(|d| d.mode);
    let family = dev.as_ref().and_then(|d| d.family);
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
        usb: board.usb.to_string(),
        device: dev.map(|d| DeviceView::new(state, config, d, caller)),
        soc,
        family,
        mode,
        console,
        power: board.power.as_ref().map(|p| PowerView {
            backend: p.backend().into(),
            state: state.boards.power_state(&board.name),
        }),
        lock: LockView::of(&state.locks, &LockKey::Board(board.name.clone()), caller),
        match_waiting: state.boards.queue.waiting_for(&board.name),
        flash: FlashView::of(config, board, caller),
    }
}

/// Every board as `caller` sees it.
pub fn boards_view(state: &AppState, caller: &str) -> BoardList {
    let config = state.config();
    BoardList {
        boards: config
            .boards
            .iter()
            .map(|b| board_view(state, &config, b, caller))
            .collect(),
    }
}
