//! `console_read` and `console_write`: a board's serial console, captured by the server
//! (src/console/), read since a cursor with an optional regex wait, written under the
//! board's lease.

use std::time::Duration;

use rmcp::model::CallToolResult;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use crate::tools::{refusal, structured};
use gatecmd_core::identity::ClientIdentity;
use gatecmd_core::refusal::common::UnknownBoard;
use gatecmd_core::refusal::{Classified, Refusal, RefusalReason};
use gatecmd_domain::audit::{Audit, ConsoleWriteRecord};
use gatecmd_domain::console::{
    Console, ConsoleState, Consoles, NoLease, ReadError, ReadSpec, WriteError,
};
use gatecmd_domain::quotas::Full;

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
            ConsoleError::NoLease(_) => R::NotPermitted,
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

/// Default and longest `timeout_secs` of a `wait_for`.
pub const DEFAULT_TIMEOUT_SECS: u64 = 10;
pub const MAX_TIMEOUT_SECS: u64 = 300;
/// Default `max_bytes`; the longest is the ring's size.
pub const DEFAULT_MAX_BYTES: usize = 64 * 1024;
/// Longest `wait_for` pattern, and the compiled regex's size limit: an agent's regex must
/// not cost the server more than a small, fixed amount.
pub const MAX_PATTERN_CHARS: usize = 1024;
const REGEX_SIZE_LIMIT: usize = 1 << 20;
/// Most bytes one `console_write` sends (a command line, a few keystrokes, a short script).
pub const MAX_WRITE_BYTES: usize = 16 * 1024;

/// Arguments of `console_read`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConsoleReadRequest {
    /// Board name (see list_boards).
    pub board: String,
    /// Read from this cursor (a previous answer's next_cursor). Default: the last 4 KiB, or
    /// with wait_for, only output that arrives from now on.
    #[serde(default)]
    pub cursor: Option<u64>,
    /// Most bytes of raw output returned (default 65536); read on from next_cursor.
    #[serde(default)]
    pub max_bytes: Option<usize>,
    /// A regex to wait for in the (cleaned) output from the cursor on, e.g. "Hit any key"
    /// or "login:". The answer comes as soon as it appears, or after timeout_secs.
    #[serde(default)]
    pub wait_for: Option<String>,
    /// Longest wait for wait_for, in seconds (default 10, at most 300).
    #[serde(default)]
    pub timeout_secs: Option<u64>,
}

/// Result of `console_read` (or a refusal in its place).
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(transform = crate::tools::or_refusal)]
pub struct ConsoleReadResult {
    pub board: String,
    /// Output from cursor to next_cursor, ANSI codes removed and `\r` overwrites applied.
    pub text: String,
    /// Cursor of the text's first byte (later than asked when the buffer lost output).
    pub cursor: u64,
    /// Pass as cursor to read on.
    pub next_cursor: u64,
    /// Bytes between the asked cursor and `cursor` that the buffer no longer held.
    pub dropped_bytes: u64,
    /// wait_for was found.
    pub matched: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub match_text: Option<String>,
    /// The console's state now: open, absent (adapter unplugged) or error.
    pub state: ConsoleState,
}

/// Arguments of `console_write`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConsoleWriteRequest {
    /// Board name; you must hold its lease (lock_board).
    pub board: String,
    /// Sent as given, control characters included: "\u0003" (Ctrl-C) stops U-Boot's
    /// autoboot; end a command line with "\n" (or "\r" where the board expects it).
    pub text: String,
}

/// Result of `console_write`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(transform = crate::tools::or_refusal)]
pub struct ConsoleWriteResult {
    pub board: String,
    pub bytes_written: usize,
    /// Read the board's answer from here (console_read cursor).
    pub cursor: u64,
}

/// The board's console, or why not: no such board (`boards`: the configured boards'
/// names), or a board without a console.
fn console_of(
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

/// The configured boards' names, in config order.
pub fn board_names(config: &gatecmd_domain::config::Config) -> Vec<String> {
    config.boards.iter().map(|b| b.name.clone()).collect()
}

/// Builds the read from the request, or the refusal.
fn read_spec(req: &ConsoleReadRequest, ring_bytes: usize) -> Result<ReadSpec, ConsoleError> {
    let max_bytes = req.max_bytes.unwrap_or(DEFAULT_MAX_BYTES);
    if max_bytes == 0 {
        return Err(ConsoleError::ZeroMaxBytes);
    }
    let timeout = req.timeout_secs.unwrap_or(DEFAULT_TIMEOUT_SECS);
    if timeout == 0 {
        return Err(ConsoleError::ZeroTimeout);
    }
    if timeout > MAX_TIMEOUT_SECS {
        return Err(ConsoleError::TimeoutTooLong {
            given: timeout,
            max: MAX_TIMEOUT_SECS,
        });
    }
    let wait_for = match &req.wait_for {
        None => None,
        Some(p) if p.chars().count() > MAX_PATTERN_CHARS => {
            return Err(ConsoleError::PatternTooLong {
                max: MAX_PATTERN_CHARS,
            });
        }
        Some(p) => Some(
            regex::RegexBuilder::new(p)
                .size_limit(REGEX_SIZE_LIMIT)
                .dfa_size_limit(REGEX_SIZE_LIMIT)
                .build()
                .map_err(ConsoleError::BadPattern)?,
        ),
    };
    Ok(ReadSpec {
        cursor: req.cursor,
        max_bytes: max_bytes.min(ring_bytes.max(1)),
        wait_for,
        timeout: Duration::from_secs(timeout),
    })
}

/// `console_read` for a client of `state`: a read that waits for `wait_for` takes one of
/// the client's `limits.max_waiting_reads_per_client` for its wait.
pub async fn read_for(
    state: &gatecmd_domain::state::AppState,
    who: &ClientIdentity,
    req: ConsoleReadRequest,
    cancel: &CancellationToken,
) -> CallToolResult {
    let _waiting = if req.wait_for.is_some() {
        let cap = state.config().limits.max_waiting_reads_per_client;
        match state.quotas.take(
            &who.name,
            gatecmd_domain::quotas::Kind::WaitingReads,
            1,
            cap,
        ) {
            Ok(t) => Some(t),
            Err(full) => return refusal(ConsoleError::WaitingReadsFull(full).into()),
        }
    } else {
        None
    };
    read(
        &state.consoles,
        &board_names(&state.config()),
        who,
        req,
        cancel,
    )
    .await
}

/// `console_read`: needs the board's lease, unless the client is `admin`.
pub async fn read(
    consoles: &Consoles,
    boards: &[String],
    who: &ClientIdentity,
    req: ConsoleReadRequest,
    cancel: &CancellationToken,
) -> CallToolResult {
    let console = match console_of(consoles, boards, &req.board) {
        Ok(c) => c,
        Err(e) => return refusal(e.into()),
    };
    if !who.admin
        && let Err(e) = consoles.access().check_lease(&who.name, &req.board)
    {
        return refusal(ConsoleError::NoLease(e).into());
    }
    let spec = match read_spec(&req, console.config().buffer_bytes) {
        Ok(s) => s,
        Err(e) => return refusal(e.into()),
    };
    let r = match console.read(&spec, cancel).await {
        Ok(r) => r,
        Err(e) => return refusal(ConsoleError::from(e).into()),
    };
    let state = console.view().state;
    let text = render_read(&req.board, &r, state, spec.wait_for.is_some());
    let result = ConsoleReadResult {
        board: req.board,
        text: r.text,
        cursor: r.cursor,
        next_cursor: r.next_cursor,
        dropped_bytes: r.dropped_bytes,
        matched: r.matched,
        match_text: r.match_text,
        state,
    };
    structured(&result, text)
}

fn render_read(
    board: &str,
    r: &gatecmd_domain::console::Reading,
    state: ConsoleState,
    waited: bool,
) -> String {
    let mut head = format!(
        "console {board} ({}), bytes {}..{}",
        state.as_str(),
        r.cursor,
        r.next_cursor
    );
    if r.dropped_bytes > 0 {
        head.push_str(&format!(", {} bytes lost before cursor", r.dropped_bytes));
    }
    if waited {
        match &r.match_text {
            Some(m) => head.push_str(&format!(", matched {m:?}")),
            None => head.push_str(", wait_for not seen before the timeout"),
        }
    }
    format!("{head}; next_cursor {}\n{}", r.next_cursor, r.text)
}

/// `console_write`: needs the board's lease; audited by length and SHA-256, never the bytes.
pub async fn write(
    consoles: &Consoles,
    boards: &[String],
    audit: &Audit,
    who: &ClientIdentity,
    req: ConsoleWriteRequest,
) -> CallToolResult {
    let bytes = req.text.as_bytes();
    let sha256 = hex::encode(Sha256::digest(bytes));
    let record = |outcome: &str, detail: Option<&str>| {
        audit.record(&ConsoleWriteRecord {
            client: &who.name,
            board: &req.board,
            bytes: bytes.len(),
            sha256: &sha256,
            outcome,
            detail,
        });
    };
    let refuse = |e: ConsoleError| {
        let r = Refusal::of(&e);
        record("refused", Some(r.reason.as_str()));
        refusal(r)
    };
    if bytes.is_empty() {
        return refuse(ConsoleError::EmptyText);
    }
    if bytes.len() > MAX_WRITE_BYTES {
        return refuse(ConsoleError::TextTooLong {
            bytes: bytes.len(),
            max: MAX_WRITE_BYTES,
        });
    }
    let console = match console_of(consoles, boards, &req.board) {
        Ok(c) => c,
        Err(e) => return refuse(e),
    };
    if let Err(e) = consoles.access().check_lease(&who.name, &req.board) {
        return refuse(ConsoleError::NoLease(e));
    }
    let cursor = console.bounds().1;
    match console.write(bytes).await {
        Ok(()) => {
            record("written", None);
            let result = ConsoleWriteResult {
                board: req.board.clone(),
                bytes_written: bytes.len(),
                cursor,
            };
            let text = format!(
                "wrote {} bytes to the console of {}; read the answer with console_read cursor {cursor}",
                bytes.len(),
                req.board
            );
            structured(&result, text)
        }
        Err(e) => refuse(e.into()),
    }
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
