//! What a flash call asks and why it may be refused, shared by the steps that check it
//! (`prepare`) and hold it for a person (`approval`), and the files it opened.

use std::time::Instant;

use gatecmd_core::refusal::Refusal;
use gatecmd_core::refusal::common::LeaseMissing;
use gatecmd_core::sanitizer::FileArgError;

use crate::flash::{OpenFile, Pair};
use crate::locks::{LockError, SessionId};
use crate::usecases::take::SlotTakeError;

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
    /// `loader: {ddr, usbplug}`: a DDR blob and usbplug pair instead of a packed loader.
    pub usbplug: Option<PairNames>,
    pub wait_for: Option<String>,
    pub timeout_secs: Option<u64>,
    /// Why, for the approver.
    pub note: Option<String>,
    /// When the call arrived (the `accept` step and `took_ms` count from here).
    pub received: Instant,
}

/// A DDR init blob and a usbplug by the names a call (or a board's config) gives them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairNames {
    pub ddr: String,
    pub usbplug: String,
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
    /// An input file that cannot be used (`what`: `image`, `bmap`, `loader`,
    /// `loader.ddr`, `loader.usbplug`).
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
    /// The DDR + usbplug pair (the call's, or the board's default).
    pub usbplug: Option<Pair>,
}

impl Files {
    /// The files sent to the mask ROM: a packed loader, a DDR blob, a usbplug.
    pub(super) fn loaders(&self) -> impl Iterator<Item = &OpenFile> {
        (self.loader.iter()).chain(self.usbplug.iter().flat_map(|p| [&p.ddr, &p.usbplug]))
    }

    /// Every open file; the pair's last (an approval's digests are read in this order).
    pub(super) fn iter(&self) -> impl Iterator<Item = &OpenFile> {
        std::iter::once(&self.image)
            .chain(self.bmap.as_ref())
            .chain(self.loader.as_ref())
            .chain(self.usbplug.iter().flat_map(|p| [&p.ddr, &p.usbplug]))
    }
}

impl From<SlotTakeError> for Refused {
    fn from(e: SlotTakeError) -> Self {
        match e {
            SlotTakeError::TooManyRunning { max } => Refused::TooManyRunning { max },
            SlotTakeError::UnknownBoard { known } => Refused::UnknownBoard { known },
            SlotTakeError::Lease(e) => Refused::Lease(e),
            SlotTakeError::Lock(e) => Refused::Lock(e),
        }
    }
}
