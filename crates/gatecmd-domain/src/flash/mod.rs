//! `flash_board`'s domain: a board taken from whatever state it is in (off, running,
//! MaskROM, Loader) to an image written, verified and booted, with the native rockusb
//! engine (`gatecmd-flash`) doing the USB work. The flash use case
//! (`crate::usecases::flash`) checks the request against the policy, opens the files
//! beneath the roots, takes the board under the caller's lease (`crate::usecases::take`,
//! which checks the lease), holds the call for an approval and runs this as a job; the MCP
//! tool (gatecmd-mcp's `tools/flash_board/`) holds the request, the answer and the wording.
//!
//! # Layout
//!
//! - `step`: the steps, named once; a step's record; the events a running flash reports.
//! - `run`: the orchestration: one driver over a file per phase (image, rockusb, loader,
//!   flash info, write and verify, usbplug re-entry, boot, finish), each over the flash's
//!   context and the typed result of the phase before.
//! - `device`: the board's USB port as the registry sees it, and the wait for rockusb.
//! - `input`: an input file opened beneath the file roots.
//! - `hash`: an input file's SHA-256, taken beside the flash.
//! - `loader_memory`: what earlier flashes of a board found of a loader (its reads' limit,
//!   its largest transfer), per board and loader SHA-256.
//! - `usbplug`: the DDR blob + usbplug bring-up, and the re-entry through it that verifies
//!   whole what a packed loader's reads could not.
//! - `outcome`: what a finished flash reports.
//! - `failure`: why one stopped, what was seen, and what to do next.
//! - `allowed_loaders`: the loader files `flash.loaders` allows, as agents are shown them.

mod allowed_loaders;
mod device;
mod failure;
pub(crate) mod hash;
mod input;
mod loader_memory;
mod outcome;
mod run;
mod step;
mod usbplug;

pub use allowed_loaders::{allowed_loader_files, allowed_loaders_words};
pub use failure::{Failed, FlashFailure, Seen};
pub use outcome::{FileFacts, FlashFacts, Flashed, Written};
pub use run::{BOOT_LOG_BYTES, Events, Inputs, Known, OpenFile, flash, flash_known};
pub use step::{Bytes, Event, Step, StepRecord};
pub use usbplug::Pair;
