//! Why `board_run`, `uboot_run` or `boot_board` said no: the refusals the three console
//! conversation tools share (taking the board, the command line, the conversation), each
//! variant classified once. What only `boot_board` refuses is its own (`BootRefusal`).

use crate::calls::reasons::lock_reason;
use gatecmd_core::refusal::common::{LeaseMissing, UnknownBoard};
use gatecmd_core::refusal::{Classified, RefusalReason};
use gatecmd_domain::console::WriteError;
use gatecmd_domain::console::session::TalkError;
use gatecmd_domain::locks::LockError;

/// A refusal of a console conversation tool.
#[derive(Debug, thiserror::Error)]
pub enum TalkRefusal {
    #[error(transparent)]
    UnknownBoard(#[from] UnknownBoard),
    /// The board's prompt settings do not compile.
    #[error("board {board:?}: {why}")]
    BadPrompts {
        board: String,
        why: gatecmd_domain::config::ValueError,
    },
    #[error(transparent)]
    Lease(#[from] LeaseMissing),
    #[error("{0}")]
    Lock(#[from] LockError),
    /// The command line is empty, too long or holds a control character (`control`).
    #[error("{why}")]
    BadCommand { why: String, control: bool },
    #[error("timeout_secs must be 1 to {max}; {given} was given")]
    TimeoutOutOfRange { given: u64, max: u64 },
    #[error("board {board:?} has no console configured (boards[].console)")]
    NoConsole { board: String },
    /// The board is not where the tool needs it; `next` names the tool that gets it there.
    #[error("board {board} shows {shows}; {next}")]
    WrongState {
        board: String,
        shows: String,
        next: &'static str,
    },
    /// A login prompt, no `console.login` configured and no `login` given: the agent's
    /// two ways in.
    #[error(
        "board {board} shows a login prompt and its operator configured no login: call board_run again with login: {{user: \"root\"}} (add password when the board asks one), or log in yourself: console_write {{board: \"{board}\", text: \"root\\n\"}}, then console_read {{board: \"{board}\", wait_for: \"[#$] ?$\"}}"
    )]
    LoginNeeded { board: String },
    /// The caller's `login` cannot be typed as given.
    #[error(
        "{what} must be 1 to {max} printable characters{}",
        if *control { " (no line ends or other control characters)" } else { "" }
    )]
    BadLogin {
        what: &'static str,
        max: usize,
        control: bool,
    },
    /// A conversation error before the command ran.
    #[error("board {board}: {error}")]
    Talk { board: String, error: TalkError },
}

impl Classified for TalkRefusal {
    fn reason(&self) -> RefusalReason {
        use RefusalReason as R;
        match self {
            TalkRefusal::UnknownBoard(e) => e.reason(),
            TalkRefusal::BadPrompts { .. } | TalkRefusal::NoConsole { .. } => R::NotConfigured,
            TalkRefusal::Lease(e) => e.reason(),
            TalkRefusal::Lock(e) => lock_reason(e),
            TalkRefusal::BadCommand { control: true, .. } => R::ForbiddenCharacter,
            TalkRefusal::BadCommand { control: false, .. } => R::InvalidRequest,
            TalkRefusal::TimeoutOutOfRange { .. } => R::TimeoutTooLong,
            TalkRefusal::WrongState { .. } => R::WrongState,
            TalkRefusal::LoginNeeded { .. } => R::LoginNeeded,
            TalkRefusal::BadLogin { control: true, .. } => R::ForbiddenCharacter,
            TalkRefusal::BadLogin { control: false, .. } => R::InvalidRequest,
            TalkRefusal::Talk { error, .. } => talk_reason(error),
        }
    }
}

/// The class of a conversation error.
fn talk_reason(e: &TalkError) -> RefusalReason {
    match e {
        TalkError::Timeout { .. } => RefusalReason::Timeout,
        TalkError::Cancelled { .. } => RefusalReason::Cancelled,
        TalkError::Write(WriteError::NotOpen { .. }) => RefusalReason::DeviceAbsent,
        TalkError::Write(_) => RefusalReason::IoError,
        TalkError::Gone { .. } => RefusalReason::DeviceAbsent,
        TalkError::LoginFailed { .. } => RefusalReason::LoginFailed,
        TalkError::NoLogin { .. } | TalkError::NoPassword(_) => RefusalReason::NotConfigured,
        TalkError::NoCallerPassword { .. } => RefusalReason::LoginNeeded,
    }
}
