//! Boards at run time (docs/BOARDS.md): which configured boards a `lock_board {match}`
//! request may take, the fair queue of such requests across every matching board, each
//! board's last known power state, and the hook through which the console capture shows
//! itself in `list_boards`, and what a lease on a board holds. Configuration is in
//! `src/config/boards.rs`; the tools are gatecmd-mcp's `lock_board` and `power_board`.
//!
//! - `matching`: a `match` and whether a board (with the device at its port) satisfies it.
//! - `queue`: FIFO across boards for match waiters.
//! - `boot`: `boot_board`'s plan from where a board is to the state asked for.
//! - `boot_reports`: one record per power-on or console-seen boot, with the stages and
//!   faults its console showed, a bounded transcript and an outcome (`boot_report`).

pub mod boot;
pub mod boot_reports;
pub mod consoles;
mod matching;
mod queue;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use schemars::JsonSchema;
use serde::Serialize;

use crate::config::{BoardConfig, Config};
use crate::locks::{LockKey, lock_key_of};
use gatecmd_devices::Device;

pub use matching::BoardMatch;
pub use queue::{MAX_MATCH_WAITERS, MatchQueue, QueueFull, QueueTicket};

/// The `board:NAME` keys of the boards whose usb port holds one of `devices`: a command
/// on such a device takes them, so that another client's board lease keeps it out.
pub fn board_keys(config: &Config, devices: &[Device]) -> Vec<LockKey> {
    devices
        .iter()
        .filter_map(|d| config.board_at(&d.id.to_string()))
        .map(|b| LockKey::Board(b.name.clone()))
        .collect()
}

/// The keys a lease on `board` holds shared besides its own `board:NAME`: the board's
/// `port:` key and the VID:PID (or group) key of `attached`, the device at its usb port
/// now, so that nobody else's command or lease reaches the board while it is leased
/// (docs/LOCKS.md "Boards"). `lock_board`, `lock_device {key: "board:NAME"}` and a labgrid
/// place's lease all take these.
pub fn lease_shared_keys(
    config: &Config,
    board: &BoardConfig,
    attached: Option<&Device>,
) -> Vec<LockKey> {
    let mut shared = vec![LockKey::Port(board.usb.to_string())];
    shared.extend(attached.map(|d| lock_key_of(config, d)));
    shared
}

/// What `list_boards` shows of a board's console, given its name; `None` when the
/// capture has nothing to say (the tool then shows the configured console).
pub type ConsoleProvider = Arc<dyn Fn(&str) -> Option<serde_json::Value> + Send + Sync>;

/// A board's power as gatecmd last switched it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PowerState {
    On,
    Off,
    /// Never switched since the server started (or the last action failed).
    Unknown,
}

/// Run-time board state shared by every session (a field of `AppState`).
#[derive(Default)]
pub struct Boards {
    /// Waiters of `lock_board {match}`, served in arrival order.
    pub queue: MatchQueue,
    // A std mutex: held for a map lookup or insert, never across an await.
    power: Mutex<HashMap<String, PowerState>>,
    console: RwLock<Option<ConsoleProvider>>,
}

impl Boards {
    /// The last power state of `board`.
    pub fn power_state(&self, board: &str) -> PowerState {
        self.power
            .lock()
            .map(|m| m.get(board).copied().unwrap_or(PowerState::Unknown))
            .unwrap_or(PowerState::Unknown)
    }

    /// Records the power state of `board` after an action.
    pub fn set_power_state(&self, board: &str, state: PowerState) {
        if let Ok(mut m) = self.power.lock() {
            m.insert(board.to_string(), state);
        }
    }

    /// Installs the console capture's view (called once at start-up by the console module).
    pub fn set_console_provider(&self, provider: ConsoleProvider) {
        if let Ok(mut p) = self.console.write() {
            *p = Some(provider);
        }
    }

    /// The console capture's view of `board`, if a provider is installed and knows it.
    pub fn console_view(&self, board: &str) -> Option<serde_json::Value> {
        let provider = self.console.read().ok()?.clone()?;
        provider(board)
    }
}
