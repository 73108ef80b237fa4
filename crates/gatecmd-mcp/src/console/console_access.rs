//! A board's console as the console tools and the console resource reach it: which console a
//! board name gives, who may use it (the board's lease, or `admin` to read), and why not.

use serde::Serialize;

use gatecmd_core::identity::ClientIdentity;
use gatecmd_core::refusal::common::UnknownBoard;
use gatecmd_core::refusal::{Classified, Refusal, RefusalReason};
use gatecmd_domain::console::{Console, Consoles, NoLease, ReadError, WriteError};
use gatecmd_domain::limits::quotas::Full;

/// Why `console_read` or `console_write` (or the console resource) said no.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    /// No board of that name at all: `not_found`, as from every tool.
    #[error("{0}")]
    UnknownBoard(#[from] UnknownBoard),
    /// A configured board without a `console:`.
    #[error(
        "board {board:?} has no console here ({}); list_boards shows every board",
        if with_console.is_empty() {
            "no board has a console configured".to_string()
        } else {
            format!("boards with a console: {}", with_console.join(", "))
        }
    )]
    NoConsole {
        board: String,
        with_console: Vec<String>,
    },
    /// The caller does not hold the board (`held_by_other`: someone else does).
    #[error("{}", .0.message)]
    NoLease(NoLease),
    #[error("max_bytes must be at least 1")]
    ZeroMaxBytes,
    #[error("timeout_secs must be at least 1")]
    ZeroTimeout,
    #[error(
        "timeout_secs {given} is above the maximum {max}; wait again with the returned next_cursor"
    )]
    TimeoutTooLong { given: u64, max: u64 },
    #[error("wait_for is longer than {max} characters")]
    PatternTooLong { max: usize },
    #[error("wait_for is not a valid regex: {0}")]
    BadPattern(regex::Error),
    #[error(
        "console_read with wait_for refused: {0}; wait for one of them to answer, or read without wait_for"
    )]
    WaitingReadsFull(Full),
    #[error("{0}")]
    Read(#[from] ReadError),
    #[error("text is empty; nothing to write")]
    EmptyText,
    #[error("text is {bytes} bytes; one console_write sends at most {max}")]
    TextTooLong { bytes: usize, max: usize },
    #[error("{0}")]
    Write(#[from] WriteError),
}

impl Classified for ConsoleError {
    fn reason(&self) -> RefusalReason {
        use RefusalReason as R;
        match self {
            ConsoleError::UnknownBoard(e) => e.reason(),
            ConsoleError::NoConsole { .. } => R::NotConfigured,
            ConsoleError::NoLease(e) if e.held_by_other => R::DeviceBusy,
            ConsoleError::NoLease(_) => R::LeaseMissing,
            ConsoleError::ZeroMaxBytes
            | ConsoleError::ZeroTimeout
            | ConsoleError::PatternTooLong { .. }
            | ConsoleError::BadPattern(_)
            | ConsoleError::EmptyText
            | ConsoleError::Read(ReadError::CursorAhead { .. }) => R::InvalidRequest,
            ConsoleError::TimeoutTooLong { .. } => R::TimeoutTooLong,
            ConsoleError::WaitingReadsFull(_) | ConsoleError::TextTooLong { .. } => R::Limit,
            ConsoleError::Read(ReadError::Cancelled) => R::Cancelled,
            ConsoleError::Write(WriteError::NotOpen { .. }) => R::DeviceAbsent,
            ConsoleError::Write(WriteError::Stalled { .. } | WriteError::Io { .. }) => R::IoError,
        }
    }
}

/// The board's console, or why not: no such board (`boards`: the configured boards'
/// names), or a board without a console.
pub fn console_of(
    consoles: &Consoles,
    boards: &[String],
    board: &str,
) -> Result<Console, ConsoleError> {
    if !boards.iter().any(|b| b == board) {
        return Err(UnknownBoard {
            name: board.to_string(),
            known: boards.to_vec(),
        }
        .into());
    }
    consoles.get(board).ok_or_else(|| ConsoleError::NoConsole {
        board: board.to_string(),
        with_console: consoles.boards(),
    })
}

/// The board's console if `who` may read it (and its boot reports): the board's lease, or
/// `admin`, as for `console_read`.
pub fn readable(
    consoles: &Consoles,
    boards: &[String],
    who: &ClientIdentity,
    board: &str,
) -> Result<Console, ConsoleError> {
    let console = console_of(consoles, boards, board)?;
    if !who.admin {
        consoles
            .access()
            .check_lease(&who.name, board)
            .map_err(ConsoleError::NoLease)?;
    }
    Ok(console)
}

/// The `gatecmd://boards/{name}/console` resource: the console's state and its recent
/// output (the last 4 KiB, cleaned), with the cursors to go on with `console_read`.
#[derive(Debug, Serialize)]
pub struct ConsoleSnapshot {
    pub board: String,
    pub console: gatecmd_domain::console::ConsoleView,
    pub text: String,
    pub cursor: u64,
    pub next_cursor: u64,
}

/// The console resource of `board` for `who` (the lease, or `admin`, as for `console_read`).
pub fn snapshot(
    consoles: &Consoles,
    boards: &[String],
    who: &ClientIdentity,
    board: &str,
) -> Result<ConsoleSnapshot, Refusal> {
    let console = console_of(consoles, boards, board)?;
    if !who.admin {
        consoles
            .access()
            .check_lease(&who.name, board)
            .map_err(ConsoleError::NoLease)?;
    }
    let (start, end) = console.bounds();
    let tail = console.slice(
        end.saturating_sub(gatecmd_domain::console::read::DEFAULT_TAIL_BYTES)
            .max(start),
        usize::MAX,
    );
    Ok(ConsoleSnapshot {
        board: board.to_string(),
        console: console.view(),
        text: gatecmd_core::output::clean(&tail.bytes),
        cursor: tail.from,
        next_cursor: tail.to,
    })
}
