//! Where the image goes: a block device that can be written and read at an LBA. The rockusb
//! board in Loader mode is one ([`crate::usb::LoaderTarget`]); a file is another
//! ([`FileTarget`], for tests of the writer and for dry runs).

use std::fs::File;
use std::os::unix::fs::FileExt;

/// Why a block access failed.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// The device answered the command with a failed status (it refused it).
    #[error("the board refused the command (failed status): {0}")]
    Refused(String),
    /// The transfer itself failed (device gone, reset, timeout).
    #[error("USB transfer failed: {0}")]
    Transport(String),
    /// The range is outside the device or the protocol's addressing.
    #[error("out of range: {0}")]
    OutOfRange(String),
    /// A file target's I/O error.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// A block device: fixed-size blocks addressed by LBA.
pub trait BlockTarget {
    /// Bytes per block (512 for rockusb).
    fn block_size(&self) -> u32;
    /// Blocks on the device.
    fn capacity_blocks(&self) -> u64;
    /// The most blocks one [`write_blocks`](Self::write_blocks) or
    /// [`read_blocks`](Self::read_blocks) call may carry.
    fn max_transfer_blocks(&self) -> u32;
    /// The blocks the next write (`write: true`) or read should carry, at most
    /// [`max_transfer_blocks`](Self::max_transfer_blocks): a target that measures its link
    /// sizes them from its rate (`usb::transfer_size`).
    fn next_transfer_blocks(&self, write: bool) -> u32 {
        let _ = write;
        self.max_transfer_blocks()
    }
    /// The largest write sent so far (what the report calls the transfer size).
    fn largest_write_blocks(&self) -> u32 {
        self.max_transfer_blocks()
    }
    /// Writes `data` (a whole number of blocks, at most `max_transfer_blocks`) at `lba`.
    fn write_blocks(&mut self, lba: u64, data: &[u8]) -> Result<(), TargetError>;
    /// Reads `buf.len()` bytes (a whole number of blocks, at most `max_transfer_blocks`)
    /// from `lba`.
    fn read_blocks(&mut self, lba: u64, buf: &mut [u8]) -> Result<(), TargetError>;
}

/// A file as a block device of 512-byte blocks (tests of the writer, dry runs).
pub struct FileTarget {
    file: File,
    blocks: u64,
    max_transfer: u32,
}

impl FileTarget {
    /// The first `capacity_bytes` of `file` (rounded down to whole blocks); the file is
    /// extended to that length.
    pub fn new(file: File, capacity_bytes: u64) -> std::io::Result<FileTarget> {
        if file.metadata()?.len() < capacity_bytes {
            file.set_len(capacity_bytes)?;
        }
        Ok(FileTarget {
            file,
            blocks: capacity_bytes / 512,
            max_transfer: 128,
        })
    }

    /// Sets the largest transfer in blocks (default 128, as rockusb tools use).
    pub fn with_max_transfer(mut self, blocks: u32) -> FileTarget {
        self.max_transfer = blocks.max(1);
        self
    }

    fn check(&self, lba: u64, len: usize) -> Result<(), TargetError> {
        let n = len as u64 / 512;
        if !len.is_multiple_of(512) || n > self.max_transfer as u64 || lba + n > self.blocks {
            return Err(TargetError::OutOfRange(format!(
                "{len} bytes at LBA 0x{lba:x} on a target of {} blocks (max {} per transfer)",
                self.blocks, self.max_transfer
            )));
        }
        Ok(())
    }
}

impl BlockTarget for FileTarget {
    fn block_size(&self) -> u32 {
        512
    }

    fn capacity_blocks(&self) -> u64 {
        self.blocks
    }

    fn max_transfer_blocks(&self) -> u32 {
        self.max_transfer
    }

    fn write_blocks(&mut self, lba: u64, data: &[u8]) -> Result<(), TargetError> {
        self.check(lba, data.len())?;
        self.file.write_all_at(data, lba * 512)?;
        Ok(())
    }

    fn read_blocks(&mut self, lba: u64, buf: &mut [u8]) -> Result<(), TargetError> {
        self.check(lba, buf.len())?;
        self.file.read_exact_at(buf, lba * 512)?;
        Ok(())
    }
}
