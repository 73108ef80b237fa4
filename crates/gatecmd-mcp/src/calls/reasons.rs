//! The stable [`RefusalReason`] of each lower layer's error, mapped here in the MCP surface
//! so that the lock manager, the staging code and the isolation code need not know about
//! refusals; and the refusal every board tool words the same (an unknown board name).

use gatecmd_core::refusal::common::UnknownBoard;
use gatecmd_core::refusal::{Refusal, RefusalReason};
use gatecmd_core::sanitizer;
use gatecmd_core::sanitizer::FileArgError;
use gatecmd_domain::config::Config;
use gatecmd_domain::exec::isolation::IsolationError;
use gatecmd_domain::locks::LockError;
use gatecmd_domain::staging::StagingError;

/// The class of a lock manager refusal. Exhaustive on purpose: a new variant must be
/// classified here before it builds.
pub fn lock_reason(e: &LockError) -> RefusalReason {
    match e {
        LockError::Busy(_) => RefusalReason::DeviceBusy,
        LockError::NotYourLease { .. } | LockError::UnknownLease { .. } => {
            RefusalReason::LeaseInvalid
        }
        LockError::AlreadyHeld { .. } => RefusalReason::AlreadyHeld,
        LockError::TtlTooLong { .. } => RefusalReason::Limit,
        LockError::ZeroTtl { .. } => RefusalReason::InvalidRequest,
        LockError::ShutDown => RefusalReason::ShuttingDown,
        LockError::TooManyLeases { .. }
        | LockError::TooManyWaiters { .. }
        | LockError::NoteTooLong { .. } => RefusalReason::Limit,
    }
}

/// A lock manager refusal with its message.
pub fn lock_refusal(e: &LockError) -> Refusal {
    Refusal::from_error(lock_reason(e), e)
}

/// The class of a file staging refusal. Exhaustive on purpose, like [`lock_reason`].
pub fn staging_reason(e: &StagingError) -> RefusalReason {
    use StagingError as E;
    match e {
        E::NoRoots => RefusalReason::NotConfigured,
        E::OutsideRoots { .. } | E::UnknownRoot { .. } => RefusalReason::OutsideRoots,
        E::BadPath { .. } | E::ReservedName { .. } => RefusalReason::InvalidPath,
        E::NotWritable { .. } => RefusalReason::NotPermitted,
        E::Symlink { .. } => RefusalReason::Symlink,
        E::NotADirectory { .. }
        | E::NotRegular { .. }
        | E::IsDirectory { .. }
        | E::HardLinked { .. }
        | E::TempNameTaken { .. } => RefusalReason::WrongFileType,
        E::NotFound { .. } => RefusalReason::NotFound,
        E::ChunkTooLarge { .. }
        | E::FileTooLarge { .. }
        | E::QuotaExceeded { .. }
        | E::EntryQuotaExceeded { .. }
        | E::TooDeep { .. }
        | E::TooManyNewDirs { .. }
        | E::TooManyUploads { .. } => RefusalReason::Limit,
        E::WrongOffset { .. }
        | E::NoUpload { .. }
        | E::UploadInProgress { .. }
        | E::UploadReceiving { .. } => RefusalReason::UploadState,
        E::TruncateNeedsZeroOffset(_) | E::BadBase64(_) | E::BadSha256 => {
            RefusalReason::InvalidRequest
        }
        E::HashMismatch { .. } => RefusalReason::HashMismatch,
        E::Io { .. } => RefusalReason::IoError,
    }
}

/// The class of a failure to build an isolated view: a board that went away is absent.
pub fn isolation_reason(e: &IsolationError) -> RefusalReason {
    match e {
        IsolationError::NotInSysfs { .. } => RefusalReason::DeviceAbsent,
        _ => RefusalReason::IsolationUnavailable,
    }
}

/// The class of an argument refusal. A file argument refused for a symbolic link is
/// `symlink`, as file staging calls it; every other way the arguments miss the patterns
/// (a file outside the roots or not a regular file included) is `no_pattern_matched`,
/// with the message naming the cause.
pub fn args_reason(e: &sanitizer::Refusal) -> RefusalReason {
    match e {
        sanitizer::Refusal::ForbiddenChar { .. } => RefusalReason::ForbiddenCharacter,
        sanitizer::Refusal::NoMatch { file: Some(f), .. } if f.is_symlink() => {
            RefusalReason::Symlink
        }
        sanitizer::Refusal::NoMatch { .. } | sanitizer::Refusal::FirstWord { .. } => {
            RefusalReason::NoPatternMatched
        }
    }
}

/// The reason of a file argument that could not be opened beneath the roots (a tool's own
/// file argument: `flash_board`'s image, bmap and loader, `run_test_plan`'s `plan_file`).
pub fn file_reason(e: &FileArgError) -> RefusalReason {
    use RefusalReason as R;
    match e {
        e if e.is_symlink() => R::Symlink,
        FileArgError::OutsideRoots { .. } | FileArgError::NoRoots => R::OutsideRoots,
        FileArgError::NotFound { .. } => R::NotFound,
        FileArgError::NotRegular { .. } => R::WrongFileType,
        FileArgError::ParentDir | FileArgError::BadPath { .. } => R::InvalidPath,
        _ => R::IoError,
    }
}

/// The refusal for a board name that is not configured: it lists the boards that are.
pub fn unknown_board(config: &Config, name: &str) -> UnknownBoard {
    UnknownBoard {
        name: name.to_string(),
        known: config.board_names(),
    }
}
