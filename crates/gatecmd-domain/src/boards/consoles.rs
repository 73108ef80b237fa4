//! Joins the serial consoles (src/console/) to boards: which consoles to capture, who may
//! use one (the holder of the board's `board:NAME` lease), and the console column of
//! `list_boards`.

use std::sync::Arc;

use crate::config::Config;
use crate::config::ConsoleConfig;
use crate::console::{BoardAccess, Consoles, NoLease};
use crate::locks::{LockKey, LockManager};

use super::Boards;

/// The consoles the configuration asks for: `(board name, console)` of every board with one.
pub fn wanted(config: &Config) -> Vec<(String, ConsoleConfig)> {
    config
        .boards
        .iter()
        .filter_map(|b| b.console.clone().map(|c| (b.name.clone(), c)))
        .collect()
}

/// The console check: a client may use a board's console while it holds the board's lease.
pub fn access(locks: LockManager) -> Arc<dyn BoardAccess> {
    Arc::new(move |client: &str, board: &str| -> Result<(), NoLease> {
        let lease = locks
            .key_state(&LockKey::Board(board.to_string()))
            .and_then(|s| s.lease);
        match lease {
            Some(l) if l.holder.0 == client => Ok(()),
            Some(l) => Err(NoLease {
                held_by_other: true,
                message: format!(
                    "board {board} is leased by client {:?} since {} (until {} unless renewed); \
                     wait for it with lock_board {{board: {board:?}, wait_secs: …}}",
                    l.holder.0,
                    l.acquired_at.format("%H:%M:%S UTC"),
                    l.expires_at.format("%H:%M:%S UTC"),
                ),
            }),
            None => Err(NoLease {
                held_by_other: false,
                message: format!(
                    "you do not hold board {board}: take it with lock_board {{board: {board:?}}} first"
                ),
            }),
        }
    })
}

/// Shows each board's console state in `list_boards` and the board resources.
pub fn show_in(boards: &Boards, consoles: &Consoles) {
    let consoles = consoles.clone();
    boards.set_console_provider(Arc::new(move |name: &str| {
        consoles
            .view(name)
            .and_then(|v| serde_json::to_value(v).ok())
    }));
}
