//! A board in Loader mode as a block device: `READ_FLASH_INFO` gives the capacity,
//! `WRITE_LBA`/`READ_LBA` (through the `rockusb` crate) move the blocks.
//!
//! **Transfer size.** One command carries at most 128 sectors (64 KiB) by default: that is
//! what rkdeveloptool (`DEFAULT_RW_LBA`), xrock and the `rockusb` crate's own `io()` send,
//! so it is what every Rockchip loader is known to accept. The CB's sector count is 16
//! bits and the crate's libusb transport gives each transfer 5 s;
//! [`LoaderTarget::with_transfer_blocks`] raises the cap, up to 4 MiB, for loaders known to
//! take more (U-Boot's rockusb streams any size; the virtual board too — the README
//! measures it). Under the cap each transfer is sized from the rate the link has shown
//! (`transfer_size`): starting at 64 KiB, no transfer is sent that the last rate would
//! not move in a fifth of the 5 s limit.

use serde::Serialize;

use super::board::{ChipInfo, RockusbBoard, UsbInfo, usb_err};
use super::transfer_size::{TransferSize, Way};
use super::{DeviceId, Mode};
use crate::error::FlashError;
use crate::target::{BlockTarget, TargetError};

/// Sectors per `WRITE_LBA`/`READ_LBA` by default.
pub const DEFAULT_TRANSFER_BLOCKS: u32 = 128;
/// The largest transfer accepted: 4 MiB. The CB's sector count would allow 65535 (32 MiB),
/// but Linux's usbfs caps the memory of a process's transfers in flight (`usbfs_memory_mb`,
/// 16 MiB by default): a 16 MiB `WRITE_LBA` failed with "Insufficient memory" in the usbvm
/// guest after its CBW had gone, and the board then waited for data that never came (every
/// later command timed out until a power cycle).
pub const MAX_TRANSFER_BLOCKS: u32 = 8192;

/// What the loader says of the flash.
#[derive(Debug, Clone, Serialize)]
pub struct FlashInfo {
    /// `READ_FLASH_ID`, e.g. `EMMC `.
    pub flash_id: String,
    /// 512-byte sectors.
    pub sectors: u64,
    /// Erase block size in sectors.
    pub block_sectors: u16,
}

/// A board in Loader mode, ready to write.
pub struct LoaderTarget {
    board: RockusbBoard,
    info: FlashInfo,
    transfer_blocks: u32,
    /// Each transfer's size, from the rate the link has shown (`transfer_size`).
    sizes: TransferSize,
}

impl RockusbBoard {
    /// This board as a block device (Loader mode only): reads its flash id and size.
    pub fn into_target(mut self) -> Result<LoaderTarget, FlashError> {
        if self.usb.mode != Mode::Loader {
            return Err(FlashError::WrongMode {
                port: self.usb.port.clone(),
                found: self.usb.mode,
                needed: Mode::Loader,
                step: "writing the flash",
                advice: "the mask ROM has no flash driver: send a loader first (download boot)",
            });
        }
        let port = self.usb.port.clone();
        let id = self
            .dev
            .flash_id()
            .map_err(|e| usb_err(&port, "READ_FLASH_ID", e, "nothing was written"))?;
        let fi = self
            .dev
            .flash_info()
            .map_err(|e| usb_err(&port, "READ_FLASH_INFO", e, "nothing was written"))?;
        if fi.sectors() == 0 {
            return Err(FlashError::Usb {
                port,
                step: "READ_FLASH_INFO".into(),
                reason: "the loader reports a flash of 0 sectors".into(),
                advice: "nothing was written; the loader found no storage (is this the right loader, and does the board have eMMC?)".into(),
            });
        }
        let info = FlashInfo {
            flash_id: id.to_str().to_string(),
            sectors: fi.sectors() as u64,
            block_sectors: fi.block_size_sectors(),
        };
        Ok(LoaderTarget {
            board: self,
            info,
            transfer_blocks: DEFAULT_TRANSFER_BLOCKS,
            sizes: TransferSize::new(DEFAULT_TRANSFER_BLOCKS),
        })
    }
}

impl LoaderTarget {
    /// Sectors per command (1..=65535); see the module's notes before raising it.
    pub fn with_transfer_blocks(mut self, blocks: u32) -> Result<LoaderTarget, FlashError> {
        if !(1..=MAX_TRANSFER_BLOCKS).contains(&blocks) {
            return Err(FlashError::InvalidOption {
                what: "transfer size",
                reason: format!(
                    "{blocks} sectors; 1 to {MAX_TRANSFER_BLOCKS} (4 MiB: Linux usbfs refuses larger transfers by default)"
                ),
            });
        }
        self.transfer_blocks = blocks;
        self.sizes = TransferSize::new(blocks);
        Ok(self)
    }

    /// What the loader says of the flash.
    pub fn flash_info(&self) -> &FlashInfo {
        &self.info
    }

    /// What the host sees of the device.
    pub fn usb(&self) -> &UsbInfo {
        self.board.usb()
    }

    /// The port path.
    pub fn port(&self) -> &DeviceId {
        &self.board.usb.port
    }

    /// `READ_CHIP_INFO`.
    pub fn chip_info(&mut self) -> Result<ChipInfo, FlashError> {
        self.board.chip_info()
    }

    /// Resets the board so it boots from its flash (`rd`): the image just written runs.
    pub fn reset_and_boot(self) -> Result<(), FlashError> {
        self.board.reset(super::board::Reset::Boot)
    }

    /// Back to the board handle (e.g. for a reset into MaskROM).
    pub fn into_board(self) -> RockusbBoard {
        self.board
    }

    /// The CB's 32-bit LBA, after the checks the `rockusb` crate would otherwise assert
    /// (whole sectors; a sector count that fits its 16 bits).
    fn lba32(&self, lba: u64, len: usize) -> Result<u32, TargetError> {
        let sectors = len / 512;
        if len == 0 || !len.is_multiple_of(512) || sectors > self.transfer_blocks as usize {
            return Err(TargetError::OutOfRange(format!(
                "{len} bytes is not 1 to {} whole 512-byte sectors",
                self.transfer_blocks
            )));
        }
        u32::try_from(lba).map_err(|_| {
            TargetError::OutOfRange(format!(
                "LBA 0x{lba:x} ({len} bytes) is beyond rockusb's 32-bit sector addresses"
            ))
        })
    }
}

fn target_err(e: rockusb::device::Error<rusb::Error>) -> TargetError {
    use rockusb::operation::UsbOperationError;
    match e {
        rockusb::device::Error::OperationError(UsbOperationError::FailedStatus) => {
            TargetError::Refused("failed status in the CSW".into())
        }
        rockusb::device::Error::UsbError(rusb::Error::NoDevice) => TargetError::Transport(
            "the device left the bus (reset, unplugged or powered off)".into(),
        ),
        rockusb::device::Error::UsbError(rusb::Error::Timeout) => {
            TargetError::Transport("no answer within 5 s (the board hangs)".into())
        }
        rockusb::device::Error::UsbError(e @ (rusb::Error::Io | rusb::Error::Pipe)) => {
            TargetError::Transport(format!(
                "{e}: the board stopped answering mid-command (powered off, reset or unplugged?)"
            ))
        }
        other => TargetError::Transport(other.to_string()),
    }
}

impl BlockTarget for LoaderTarget {
    fn block_size(&self) -> u32 {
        512
    }

    fn capacity_blocks(&self) -> u64 {
        self.info.sectors
    }

    fn max_transfer_blocks(&self) -> u32 {
        self.transfer_blocks
    }

    fn next_transfer_blocks(&self, write: bool) -> u32 {
        self.sizes.next(if write { Way::Write } else { Way::Read })
    }

    fn largest_write_blocks(&self) -> u32 {
        match self.sizes.largest_write {
            0 => self.sizes.next(Way::Write),
            n => n,
        }
    }

    fn write_blocks(&mut self, lba: u64, data: &[u8]) -> Result<(), TargetError> {
        let at = self.lba32(lba, data.len())?;
        let t0 = std::time::Instant::now();
        let n = self.board.dev.write_lba(at, data).map_err(target_err)?;
        self.sizes
            .measured(Way::Write, (data.len() / 512) as u32, t0.elapsed());
        if n as usize != data.len() {
            return Err(TargetError::Refused(format!(
                "the board took {n} of {} bytes",
                data.len()
            )));
        }
        Ok(())
    }

    fn read_blocks(&mut self, lba: u64, buf: &mut [u8]) -> Result<(), TargetError> {
        let at = self.lba32(lba, buf.len())?;
        let t0 = std::time::Instant::now();
        let n = self.board.dev.read_lba(at, buf).map_err(target_err)?;
        self.sizes
            .measured(Way::Read, (buf.len() / 512) as u32, t0.elapsed());
        if n as usize != buf.len() {
            return Err(TargetError::Refused(format!(
                "the board sent {n} of {} bytes",
                buf.len()
            )));
        }
        Ok(())
    }
}
