//! Board serial consoles: each configured console is captured continuously by its own task
//! into a per-board ring with absolute cursors (the server owns the tty; clients never open
//! it), reopened when the adapter re-enumerates, read with an optional regex wait and
//! written under the board's lease (the tools are gatecmd-mcp's `console_read` and
//! `console_write`), and talked to: a shell or U-Boot conversation with framed exit
//! statuses (`shell`, `session`, `uboot`; the tools are gatecmd-mcp's `board_run`,
//! `uboot_run` and `boot_board`).
//!
//! Wiring: [`Consoles::new`] takes the [`BoardAccess`] check (does a client hold a board's
//! lease); [`Consoles::start`] takes every `(board, ConsoleConfig)` and starts, keeps or
//! stops capture tasks to match (at start-up and on reload).

pub mod board;
pub mod capture;
pub mod config;
pub mod read;
pub mod ring;
pub mod session;
pub mod shell;
pub mod tty;
pub mod uboot;

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use tokio_util::sync::{CancellationToken, DropGuard};

pub use board::{Console, ConsoleState, ConsoleView, Tap, WriteError};
pub use config::{ConsoleConfig, ConsoleSettings};
pub use read::{ReadError, ReadSpec, Reading};

use gatecmd_devices::Registry;

/// Why a client may not use a board's console now (from the [`BoardAccess`] check).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoLease {
    /// Another client holds the board (as opposed to nobody).
    pub held_by_other: bool,
    /// For the agent: who holds it, since when, and what to do (`lock_board`).
    pub message: String,
}

/// Whether a client holds a board's lease; injected so the consoles do not depend on how
/// board leases are kept. A closure `Fn(client, board) -> Result<(), NoLease>` is one.
pub trait BoardAccess: Send + Sync {
    fn check_lease(&self, client: &str, board: &str) -> Result<(), NoLease>;
}

impl<F> BoardAccess for F
where
    F: Fn(&str, &str) -> Result<(), NoLease> + Send + Sync,
{
    fn check_lease(&self, client: &str, board: &str) -> Result<(), NoLease> {
        self(client, board)
    }
}

/// The check in force until board leases exist: nobody holds a board, so only `admin`
/// clients read consoles and nobody writes.
pub fn no_board_leases(_client: &str, board: &str) -> Result<(), NoLease> {
    Err(NoLease {
        held_by_other: false,
        message: format!(
            "you do not hold board {board}: take it with lock_board {{board: {board:?}}} first"
        ),
    })
}

struct Running {
    console: Console,
    // Cancelled when the board is dropped from the configuration or changes.
    stop: CancellationToken,
}

struct Shared {
    settings: ConsoleSettings,
    access: Arc<dyn BoardAccess>,
    boards: RwLock<BTreeMap<String, Running>>,
    /// Given to every console started from now on ([`Consoles::set_tap`]).
    tap: RwLock<Option<Tap>>,
    /// Board names whose console changed, at most 10 per second per board.
    changes: tokio::sync::broadcast::Sender<String>,
    /// Parent of every capture task's token.
    stop: CancellationToken,
    /// Stops every capture task when the last handle goes.
    _stop_all: DropGuard,
}

/// Every board's console; a cheap-to-clone handle.
#[derive(Clone)]
pub struct Consoles {
    shared: Arc<Shared>,
}

impl Consoles {
    /// No consoles yet; `access` decides who holds which board.
    pub fn new(settings: ConsoleSettings, access: Arc<dyn BoardAccess>) -> Consoles {
        let stop = CancellationToken::new();
        Consoles {
            shared: Arc::new(Shared {
                settings,
                access,
                boards: RwLock::new(BTreeMap::new()),
                tap: RwLock::new(None),
                changes: tokio::sync::broadcast::channel(64).0,
                _stop_all: stop.clone().drop_guard(),
                stop,
            }),
        }
    }

    /// Captures exactly `boards`' consoles: a board whose console config is unchanged keeps
    /// its task and its ring; a changed one starts over; a missing one stops. `registry`
    /// wakes port-configured consoles when their port changes. Needs a tokio runtime.
    pub fn start(
        &self,
        boards: impl IntoIterator<Item = (String, ConsoleConfig)>,
        registry: Option<&Registry>,
    ) {
        let wanted: BTreeMap<String, ConsoleConfig> = boards.into_iter().collect();
        let mut running = self
            .shared
            .boards
            .write()
            .unwrap_or_else(|e| e.into_inner());
        running.retain(|name, r| {
            let keep = wanted.get(name) == Some(r.console.config());
            if !keep {
                r.stop.cancel();
            }
            keep
        });
        for (name, config) in wanted {
            if running.contains_key(&name) {
                continue;
            }
            let tap = self
                .shared
                .tap
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            let console = Console::with_tap(&name, config, &self.shared.settings, tap);
            let stop = self.shared.stop.child_token();
            capture::spawn(
                console.clone(),
                self.shared.settings.clone(),
                stop.clone(),
                registry.map(Registry::subscribe),
                self.shared.changes.clone(),
            );
            running.insert(name, Running { console, stop });
        }
    }

    /// Every console started from now on hands its captured bytes to `tap` too (set it
    /// before the first [`Consoles::start`]).
    pub fn set_tap(&self, tap: Tap) {
        *self.shared.tap.write().unwrap_or_else(|e| e.into_inner()) = Some(tap);
    }

    /// The console of `board`, if it has one.
    pub fn get(&self, board: &str) -> Option<Console> {
        let boards = self.shared.boards.read().unwrap_or_else(|e| e.into_inner());
        boards.get(board).map(|r| r.console.clone())
    }

    /// Names of the boards with a console.
    pub fn boards(&self) -> Vec<String> {
        let boards = self.shared.boards.read().unwrap_or_else(|e| e.into_inner());
        boards.keys().cloned().collect()
    }

    /// `list_boards`' console column for `board`.
    pub fn view(&self, board: &str) -> Option<ConsoleView> {
        self.get(board).map(|c| c.view())
    }

    /// Names of boards whose console changed (output or state), coalesced to at most 10
    /// per second per board.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<String> {
        self.shared.changes.subscribe()
    }

    /// The injected lease check.
    pub fn access(&self) -> &dyn BoardAccess {
        self.shared.access.as_ref()
    }

    pub fn settings(&self) -> &ConsoleSettings {
        &self.shared.settings
    }
}

impl Default for Consoles {
    /// No consoles, and [`no_board_leases`].
    fn default() -> Self {
        Consoles::new(ConsoleSettings::default(), Arc::new(no_board_leases))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(path: &str) -> ConsoleConfig {
        ConsoleConfig {
            port: None,
            path: Some(path.into()),
            baud: 115200,
            buffer_bytes: 4096,
        }
    }

    #[tokio::test]
    async fn start_keeps_unchanged_consoles_and_replaces_the_rest() {
        let c = Consoles::default();
        c.start([("a".to_string(), at("/nonexistent/a"))], None);
        c.get("a").expect("a").append(b"kept");
        c.start(
            [
                ("a".to_string(), at("/nonexistent/a")),
                ("b".to_string(), at("/nonexistent/b")),
            ],
            None,
        );
        assert_eq!(c.boards(), ["a", "b"]);
        assert_eq!(
            c.get("a").expect("a").bounds(),
            (0, 4),
            "same config, same ring"
        );
        // A new ring size is a changed console too: the reload gives it its new ring.
        let bigger = ConsoleConfig {
            buffer_bytes: 8192,
            ..at("/nonexistent/a")
        };
        c.start([("a".to_string(), bigger)], None);
        let a = c.get("a").expect("a");
        assert_eq!((a.bounds(), a.view().buffer_bytes), ((0, 0), 8192));
        c.start([("a".to_string(), at("/nonexistent/other"))], None);
        assert_eq!(c.boards(), ["a"]);
        assert_eq!(
            c.get("a").expect("a").bounds(),
            (0, 0),
            "new config, new ring"
        );
        let view = c.view("a").expect("view");
        assert_eq!(view.state, ConsoleState::Absent);
        assert!(c.view("b").is_none());
    }

    #[test]
    fn until_board_leases_exist_nobody_holds_a_board() {
        let c = Consoles::default();
        let e = c.access().check_lease("alice", "b1").expect_err("no lease");
        assert!(!e.held_by_other);
        assert!(e.message.contains("lock_board"), "{}", e.message);
    }
}
