//! `gatecmd-flash`: takes a Rockchip board from MaskROM (or Loader) to "image written,
//! verified, booted", natively over rockusb (the `rockusb` crate on rusb/libusb). It knows
//! nothing of gatecmd's server: the caller hands over open file handles, a port path, a
//! board name and a state directory.
//!
//! ```no_run
//! use std::sync::atomic::AtomicBool;
//! use std::time::Duration;
//! use gatecmd_flash::{BootFile, Control, FlashOptions, Image, Mode, DeviceId, RockusbBoard, flash};
//!
//! # fn main() -> Result<(), gatecmd_flash::FlashError> {
//! let port: DeviceId = "1-1".parse().expect("a port path");
//! let mut board = RockusbBoard::open(&port)?;
//! if board.mode() == Mode::MaskRom {
//!     let loader = BootFile::read(std::fs::File::open("loader.bin").expect("open"))?;
//!     board = board.download_boot_and_wait(&loader, Duration::from_secs(10))?.0;
//! }
//! let mut target = board.into_target()?;
//! let mut image = Image::open(std::fs::File::open("disk.img.zst").expect("open"), None)?;
//! let cancel = AtomicBool::new(false);
//! let mut progress = |p: gatecmd_flash::Progress| eprintln!("{} {}/{}", p.phase, p.done, p.total);
//! let opts = FlashOptions::new("vb1", "/var/lib/gatecmd/flash");
//! let report = flash(&mut target, &mut image, &opts, &mut Control::new(&mut progress, &cancel))?;
//! println!("wrote {} bytes in {:.1} s", report.write.bytes_written, report.write.secs);
//! target.reset_and_boot()?;
//! # Ok(()) }
//! ```
//!
//! # Layout
//!
//! - [`image`] — formats, detected by magic: raw, Android sparse, either gzip/zstd/xz
//!   compressed (streamed), raw + bmap; the pre-pass that refuses a bad image before any
//!   write.
//! - [`chunk`] — cutting the image into grid-aligned chunks with their hashes.
//! - [`chunk_hash`] — the chunks' keyed XXH3-128, and why it is enough.
//! - [`target`] — the block-device trait ([`BlockTarget`]) and a file-backed one.
//! - [`port`] — the engine's own port path and rockusb mode types, so that the crate
//!   depends on no gatecmd crate (and so that [`error`] needs nothing from [`usb`]).
//! - [`usb`] — the rockusb board by port path: mode, chip info, download boot, Loader as a
//!   target, reset.
//! - [`boot_file`] — Rockchip boot files (loaders), checked before sending.
//! - [`boot_pair`] — a DDR blob and a usbplug sent as xrock sends them (0x471, 0x472).
//! - [`writer`] — [`flash`]: write, journal, verify.
//! - [`verify`] — read-back.
//! - [`journal`] — the resume journal.
//! - [`progress`] — phases, progress reports, the cancel flag.
//! - [`report`] — what a flash did.
//! - [`error`] — what went wrong, for the agent.
//! - [`units`] — byte counts as people read them in messages.

#![warn(missing_docs)]

pub mod boot_file;
pub mod boot_pair;
pub mod chunk;
pub mod chunk_hash;
pub mod error;
pub mod image;
pub mod journal;
pub mod port;
pub mod progress;
pub mod report;
pub mod target;
pub mod units;
pub mod usb;
pub mod verify;
pub mod writer;

pub use boot_file::{BootEntry, BootFile};
pub use error::FlashError;
pub use image::check::CheckReport;
pub use image::{Compression, Image, ImageInfo, Layout, SizeLimit};
pub use progress::{Control, Phase, Progress};
pub use report::{FlashReport, VerifyReport, WriteReport};
pub use target::{BlockTarget, FileTarget, TargetError};
pub use usb::{
    ChipInfo, DeviceId, DownloadReport, FlashInfo, LoaderTarget, Mode, Reset, RockusbBoard, UsbInfo,
};
pub use writer::{DEFAULT_CHUNK_SIZE, FlashOptions, MAX_CHUNK_SIZE, flash};
