//! What a flash is given: the checked inputs, the SHA-256s already taken of them, and
//! where its events go.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use regex::Regex;

use crate::config::BoardConfig;
use crate::console::Console;
use crate::flash::input::OpenFile;
use crate::flash::step::Event;
use crate::flash::usbplug::Pair;

/// Everything one flash needs, checked by the caller (lease, policy, file roots).
pub struct Inputs {
    pub board: BoardConfig,
    pub console: Option<Console>,
    pub image: OpenFile,
    pub bmap: Option<OpenFile>,
    pub loader: Option<OpenFile>,
    /// A DDR blob + usbplug pair: sent instead of a packed loader when the call names none,
    /// and used to verify whole what a packed loader's reads could not (`usbplug` step).
    pub usbplug: Option<Pair>,
    /// Awaited on the console after the reset.
    pub wait_for: Option<Regex>,
    /// The whole call's limit.
    pub timeout: Duration,
    /// Where the resume journals live.
    pub journal_dir: PathBuf,
    /// Blocks of 512 bytes per USB write command.
    pub transfer_blocks: u32,
    /// How long the rockusb device (and the Loader after the download) is awaited.
    pub device_wait: Duration,
    /// When the call arrived: the `accept` step runs from here to the flash's start, and
    /// `took_ms` counts from here.
    pub received: Instant,
    /// The calling client, named as the trigger of the boot the reset starts.
    pub client: String,
}

/// SHA-256s (lowercase hex) a call took of its inputs before the flash.
#[derive(Debug, Clone, Default)]
pub struct Known {
    pub image: Option<String>,
    pub bmap: Option<String>,
    pub loader: Option<String>,
    /// The pair's (DDR blob, usbplug).
    pub usbplug: Option<(String, String)>,
}

/// Where a running flash's events go (from async code and from the USB thread).
pub type Events = Arc<dyn Fn(Event) + Send + Sync>;

/// The files of one flash, as the phases take them.
pub(super) struct Files {
    pub image: OpenFile,
    pub bmap: Option<OpenFile>,
    pub loader: Option<OpenFile>,
    pub usbplug: Option<Pair>,
    pub known: Known,
}
