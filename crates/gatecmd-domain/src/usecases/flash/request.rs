//! What a flash call asks and why it may be refused, shared by the steps that check it
//! (`prepare`) and hold it for a person (`approval`), and the files it opened.

use std::time::Instant;

use gatecmd_core::refusal::Refusal;
use gatecmd_core::refusal::common::LeaseMissing;
use gatecmd_core::sanitizer::FileArgError;

use crate::flash::OpenFile;
use crate::locks::{LockError, SessionId};

/// A flash request as the use case reads it (the surface's arguments, and who asks).
pub struct Ask {
    /// The surface's name for the action (`flash_board`): the lease refusal, the job, the
    /// running row and the approval request name it.
    pub tool: &'static str,
    pub client: String,
    pub session: Option<SessionId>,
    pub lease: Option<String>,
    pub board: String,
    pub image: String,
    pub bmap: Option<String>,
    pub loader: Option<String>,
    pub wait_for: Option<String>,
    pub timeout_secs: Option<u64>,
    /// Why, for the approver.
    pub note: Option<String>,
    /// When the call arrived (the `accept` step and `took_ms` count from here).
    pub received: Instant,
}

/// Why a flash was refused before its job started; the surface words each.
#[derive(Debug)]
pub enum Refused {
    /// `flash.enabled` is false.
    Disabled,
    /// Not in `flash.clients`.
    ClientNotAllowed,
    /// A configured board not in `flash.boards` (those named).
    BoardNotAllowed {
        allowed: Vec<String>,
    },
    TimeoutOutOfRange {
        given: u64,
        max: u64,
    },
    BadPattern {
        why: String,
    },
    /// The client's command slots are all taken (`limits.max_concurrent_per_client`).
    TooManyRunning {
        max: usize,
    },
    /// No such board (the boards there are).
    UnknownBoard {
        known: Vec<String>,
    },
    Lease(LeaseMissing),
    Lock(LockError),
    /// `wait_for` was given and the board has no console.
    NoConsole,
    /// An input file that cannot be used (`what`: `image`, `bmap`, `loader`).
    File {
        what: &'static str,
        value: String,
        error: FileArgError,
    },
    /// The loader (as it resolved) is not in `flash.loaders` (those named).
    LoaderNotAllowed {
        path: String,
        allowed: Vec<String>,
    },
    /// A file could not be read for the approval (`reopen`: not even duplicated).
    Unhashed {
        path: String,
        error: String,
        reopen: bool,
    },
    /// The files are not the bytes approved (or were being written when hashed).
    ChangedSinceApproval {
        why: String,
    },
    /// The surface's approval round trip said no (worded by the surface).
    Approval(Refusal),
}

/// The flash's open files.
pub(super) struct Files {
    pub image: OpenFile,
    pub bmap: Option<OpenFile>,
    pub loader: Option<OpenFile>,
}

impl Files {
    pub(super) fn iter(&self) -> impl Iterator<Item = &OpenFile> {
        std::iter::once(&self.image)
            .chain(self.bmap.as_ref())
            .chain(self.loader.as_ref())
    }
}
