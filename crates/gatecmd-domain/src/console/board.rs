//! One board's console as the rest of the server sees it: the captured output (a ring with
//! absolute cursors and a watch on its end), the tty's state, and writing to it.

use std::fs::File;
use std::io::{self, Write};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use schemars::JsonSchema;
use serde::Serialize;
use tokio::io::unix::AsyncFd;
use tokio::sync::watch;

use super::config::{ConsoleConfig, ConsoleSettings};
use super::ring::{Ring, Slice};

/// Whether the tty is captured now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ConsoleState {
    /// Open and captured.
    Open,
    /// Not there (adapter unplugged, tty path missing); tried again until it is.
    Absent,
    /// There but unusable (permissions, not a tty, baud refused); see `error`.
    Error,
}

impl ConsoleState {
    /// The serialised name.
    pub fn as_str(self) -> &'static str {
        match self {
            ConsoleState::Open => "open",
            ConsoleState::Absent => "absent",
            ConsoleState::Error => "error",
        }
    }
}

/// A console's state for `list_boards` and the tools.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct ConsoleView {
    pub state: ConsoleState,
    /// The tty captured (or last tried), e.g. "/dev/ttyUSB0".
    pub tty: Option<String>,
    pub baud: u32,
    /// Bytes held in the ring now.
    pub buffered_bytes: u64,
    /// The ring's size (`console.buffer_bytes`): older output is dropped and counted.
    pub buffer_bytes: u64,
    /// Bytes captured since the capture started (at server start, or at the reload that
    /// changed this console): the cursor after the newest byte.
    pub end_cursor: u64,
    /// Why the tty is absent or unusable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Why bytes did not reach the board.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error(
        "the console of board {board} is not open ({why}); nothing was written. \
         console_read shows its state; retry once the adapter is back"
    )]
    NotOpen { board: String, why: String },
    #[error(
        "the console of board {board} did not take the bytes within {secs} s (flow control?); \
         {written} of {len} bytes were written"
    )]
    Stalled {
        board: String,
        secs: u64,
        written: usize,
        len: usize,
    },
    #[error("writing to the console of board {board} failed after {written} bytes: {source}")]
    Io {
        board: String,
        written: usize,
        source: io::Error,
    },
}

struct Status {
    state: ConsoleState,
    tty: Option<String>,
    error: Option<String>,
}

struct Shared {
    board: String,
    config: ConsoleConfig,
    write_timeout: std::time::Duration,
    // A std mutex: held for a memcpy into or out of the ring, never across an await.
    ring: Mutex<Ring>,
    /// The ring's end cursor, sent after each append: readers wait on it, not on the ring.
    end: watch::Sender<u64>,
    status: Mutex<Status>,
    /// The open tty, shared by the capture task (reads) and writers.
    port: Mutex<Option<Arc<AsyncFd<File>>>>,
    /// One writer at a time, so two writes never interleave on the wire.
    writer: tokio::sync::Mutex<()>,
    /// Sees every appended byte, in order (the boot reports, `crate::boards::boot_reports`).
    tap: Option<Tap>,
}

/// Called with the board's name and each appended piece, on the appending task, after the
/// ring took it.
pub type Tap = Arc<dyn Fn(&str, &[u8]) + Send + Sync>;

/// A cheap-to-clone handle to one board's console.
#[derive(Clone)]
pub struct Console {
    shared: Arc<Shared>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding these leaves plain data behind; keep serving it.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Console {
    /// A console with an empty ring, not yet captured (state absent).
    pub fn new(board: &str, config: ConsoleConfig, settings: &ConsoleSettings) -> Console {
        Console::with_tap(board, config, settings, None)
    }

    /// [`Console::new`] whose appended bytes also go to `tap`.
    pub fn with_tap(
        board: &str,
        config: ConsoleConfig,
        settings: &ConsoleSettings,
        tap: Option<Tap>,
    ) -> Console {
        let ring = Ring::new(config.buffer_bytes);
        Console {
            shared: Arc::new(Shared {
                board: board.to_string(),
                config,
                write_timeout: settings.write_timeout,
                ring: Mutex::new(ring),
                end: watch::channel(0).0,
                status: Mutex::new(Status {
                    state: ConsoleState::Absent,
                    tty: None,
                    error: Some("not opened yet".into()),
                }),
                port: Mutex::new(None),
                writer: tokio::sync::Mutex::new(()),
                tap,
            }),
        }
    }

    pub fn board(&self) -> &str {
        &self.shared.board
    }

    pub fn config(&self) -> &ConsoleConfig {
        &self.shared.config
    }

    /// Appends captured bytes and wakes every waiting reader.
    pub fn append(&self, bytes: &[u8]) {
        let end = {
            let mut ring = lock(&self.shared.ring);
            ring.push(bytes);
            ring.end()
        };
        self.shared.end.send_replace(end);
        if let Some(tap) = &self.shared.tap {
            tap(&self.shared.board, bytes);
        }
    }

    /// Up to `max` bytes from cursor `at`.
    pub fn slice(&self, at: u64, max: usize) -> Slice {
        lock(&self.shared.ring).read(at, max)
    }

    /// The oldest and the next cursor.
    pub fn bounds(&self) -> (u64, u64) {
        let ring = lock(&self.shared.ring);
        (ring.start(), ring.end())
    }

    /// A receiver that sees every later append and state change (subscribe before reading
    /// the ring, so nothing appended in between is missed).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.shared.end.subscribe()
    }

    /// How many receivers watch this console's end cursor now (readers waiting in `read`,
    /// the change announcer): a caller can see that a reader it started is waiting.
    pub fn watchers(&self) -> usize {
        self.shared.end.receiver_count()
    }

    /// The capture task opened `tty`.
    pub(crate) fn set_open(&self, tty: &Path, fd: Arc<AsyncFd<File>>) {
        *lock(&self.shared.port) = Some(fd);
        self.set_status(ConsoleState::Open, Some(tty), None);
    }

    /// The capture task lost (or could not open) the tty.
    pub(crate) fn set_closed(&self, state: ConsoleState, tty: Option<&Path>, why: String) {
        *lock(&self.shared.port) = None;
        self.set_status(state, tty, Some(why));
    }

    fn set_status(&self, state: ConsoleState, tty: Option<&Path>, error: Option<String>) {
        let mut s = lock(&self.shared.status);
        let changed = s.state != state;
        if changed || s.error != error {
            tracing::info!(board = %self.shared.board, ?state, tty = ?tty, error = ?error, "console");
        }
        *s = Status {
            state,
            tty: tty.map(|p| p.display().to_string()),
            error,
        };
        drop(s);
        if changed {
            // Same end cursor, but subscribers (the resource notifier) see a change; a
            // waiting reader only looks again.
            self.shared.end.send_modify(|_| {});
        }
    }

    /// State, tty, baud and how much is buffered.
    pub fn view(&self) -> ConsoleView {
        let (len, end) = {
            let ring = lock(&self.shared.ring);
            (ring.len() as u64, ring.end())
        };
        let s = lock(&self.shared.status);
        ConsoleView {
            state: s.state,
            tty: s.tty.clone(),
            baud: self.shared.config.baud,
            buffered_bytes: len,
            buffer_bytes: self.shared.config.buffer_bytes as u64,
            end_cursor: end,
            error: s.error.clone(),
        }
    }

    /// Writes `bytes` to the board, all or an error saying how many went out.
    pub async fn write(&self, bytes: &[u8]) -> Result<(), WriteError> {
        let board = || self.shared.board.clone();
        let _one_writer = self.shared.writer.lock().await;
        let fd = lock(&self.shared.port).clone();
        let Some(fd) = fd else {
            let why = self.view().error.unwrap_or_else(|| "closed".into());
            return Err(WriteError::NotOpen {
                board: board(),
                why,
            });
        };
        let mut written = 0;
        let all = async {
            while written < bytes.len() {
                let mut ready = fd.writable().await?;
                match ready.try_io(|f| f.get_ref().write(&bytes[written..])) {
                    Ok(Ok(n)) => written += n,
                    Ok(Err(e)) => return Err(e),
                    Err(_would_block) => continue,
                }
            }
            Ok(())
        };
        match tokio::time::timeout(self.shared.write_timeout, all).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(source)) => Err(WriteError::Io {
                board: board(),
                written,
                source,
            }),
            Err(_) => Err(WriteError::Stalled {
                board: board(),
                secs: self.shared.write_timeout.as_secs(),
                written,
                len: bytes.len(),
            }),
        }
    }
}
