//! Why `flash_board` said no before its job started: the use case's refusals
//! (`usecases::flash::Refused`) worded for the agent, each classified once.

use gatecmd_core::refusal::common::UnknownBoard;
use gatecmd_core::refusal::{Classified, Refusal, RefusalReason};
use gatecmd_core::sanitizer::FileArgError;
use gatecmd_domain::usecases::flash::{Ask, Refused};

use crate::calls::reasons::file_reason;
use crate::console::board_talk::TalkRefusal;

/// Why `flash_board` said no before anything ran.
#[derive(Debug, thiserror::Error)]
pub enum FlashRefusal {
    #[error(
        "flash_board is off in this server's configuration (flash.enabled: false); an operator \
         turns it on (docs/CONFIG.md, `flash`). rkdeveloptool, where allowlisted, still works \
         through execute_command"
    )]
    Disabled,
    #[error(
        "board {board:?} is not among the boards flash_board may write (flash.boards: {allowed})"
    )]
    BoardNotAllowed { board: String, allowed: String },
    #[error("client {client:?} may not call flash_board (flash.clients)")]
    ClientNotAllowed { client: String },
    #[error(
        "the loader {path} is not among the loaders this server sends to this board (boards[].loaders, else flash.loaders: {allowed}); \
         pass one of those (list_boards shows them)"
    )]
    LoaderNotAllowed { path: String, allowed: String },
    #[error("the {what} {value:?} cannot be used: {error}")]
    File {
        what: &'static str,
        value: String,
        error: FileArgError,
    },
    #[error("wait_for is not a usable regex: {why}")]
    BadPattern { why: String },
    #[error("timeout_secs must be 1 to {max}; {given} was given")]
    TimeoutOutOfRange { given: u64, max: u64 },
    /// A flash takes one of the client's command slots, as a command does.
    #[error(
        "client {client:?} already runs {max} commands at once (limits.max_concurrent_per_client; \
         a flash counts as one); wait for one to finish, then retry"
    )]
    TooManyRunning { client: String, max: usize },
    /// A file could not be read to hash it for the approval.
    #[error("{path} {how}: {error}")]
    Unhashed {
        path: String,
        how: &'static str,
        error: String,
    },
    /// The approved files are not the bytes the flash would write now.
    #[error("{why}; nothing was written. Call flash_board again to ask for a new approval")]
    ChangedSinceApproval { why: String },
    #[error(transparent)]
    Talk(#[from] TalkRefusal),
}

impl Classified for FlashRefusal {
    fn reason(&self) -> RefusalReason {
        use RefusalReason as R;
        match self {
            FlashRefusal::Disabled => R::NotConfigured,
            FlashRefusal::BoardNotAllowed { .. }
            | FlashRefusal::ClientNotAllowed { .. }
            | FlashRefusal::LoaderNotAllowed { .. } => R::NotPermitted,
            FlashRefusal::File { error, .. } => file_reason(error),
            FlashRefusal::ChangedSinceApproval { .. } => R::ChangedSinceApproval,
            FlashRefusal::Unhashed { .. } => R::IoError,
            FlashRefusal::BadPattern { .. } => R::InvalidRequest,
            FlashRefusal::TimeoutOutOfRange { .. } => R::TimeoutTooLong,
            FlashRefusal::TooManyRunning { .. } => R::Limit,
            FlashRefusal::Talk(e) => e.reason(),
        }
    }
}

/// Words a refusal of the use case for `ask`.
pub(super) fn worded(r: Refused, ask: &Ask) -> Refusal {
    use FlashRefusal as F;
    let (client, board) = (ask.client.clone(), ask.board.clone());
    match r {
        Refused::Disabled => F::Disabled,
        Refused::ClientNotAllowed => F::ClientNotAllowed { client },
        Refused::BoardNotAllowed { allowed } => F::BoardNotAllowed {
            board,
            allowed: allowed.join(", "),
        },
        Refused::TimeoutOutOfRange { given, max } => F::TimeoutOutOfRange { given, max },
        Refused::BadPattern { why } => F::BadPattern { why },
        Refused::TooManyRunning { max } => F::TooManyRunning { client, max },
        Refused::UnknownBoard { known } => F::Talk(UnknownBoard { name: board, known }.into()),
        Refused::Lease(e) => F::Talk(e.into()),
        Refused::Lock(e) => F::Talk(e.into()),
        Refused::NoConsole => F::Talk(TalkRefusal::NoConsole { board }),
        Refused::File { what, value, error } => F::File { what, value, error },
        Refused::LoaderNotAllowed { path, allowed } => F::LoaderNotAllowed {
            path,
            allowed: allowed.join(", "),
        },
        Refused::Unhashed {
            path,
            error,
            reopen,
        } => F::Unhashed {
            path,
            error,
            how: match reopen {
                true => "could not be opened again for the approval",
                false => "could not be hashed for the approval request",
            },
        },
        Refused::ChangedSinceApproval { why } => F::ChangedSinceApproval { why },
        Refused::Approval(r) => return r,
    }
    .into()
}
