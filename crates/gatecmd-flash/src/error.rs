//! Every way a flash can fail, worded for the agent that reads it: which step, what was
//! seen, and what to do next. Where nothing reached the board, the message says so; where
//! some of it did, it says how much and that the journal resumes it.

use std::path::PathBuf;

use crate::port::{DeviceId, Mode};
use crate::progress::Phase;
use crate::units::human;

/// A flashing step's failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FlashError {
    /// Reading the image (or its bmap) from the handle failed.
    #[error(
        "reading the {what} failed: {source}: check that the file is readable and complete; {written}"
    )]
    ImageRead {
        /// Which file and step (`image header`, `bmap file`, …).
        what: &'static str,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
        /// What reached the board (`nothing was written` before the write phase).
        written: String,
    },

    /// The image uses a compression this engine does not read.
    #[error(
        "the image is {format}-compressed, which this engine does not read: decompress it, or recompress it with zstd, xz or gzip; nothing was written"
    )]
    UnsupportedCompression {
        /// `bzip2`, `lz4`, `zip`.
        format: &'static str,
    },

    /// The compressed stream is damaged.
    #[error(
        "decompressing the {format} image failed{at}: {reason}: the file is damaged or truncated; {written}"
    )]
    Decompress {
        /// `gzip`, `zstd`, `xz`.
        format: &'static str,
        /// Where, e.g. ` after 12.0 MB of output` (empty when unknown).
        at: String,
        /// The decoder's words.
        reason: String,
        /// What reached the board (`nothing was written` before the write phase).
        written: String,
    },

    /// The image ended before the size measured when the flash began.
    #[error(
        "the image file changed while it was being flashed: it ended at byte {at}, before the {expected} bytes measured when the flash began; {written}: flash it again once the file is complete"
    )]
    ImageChanged {
        /// Where the stream ended.
        at: u64,
        /// The size measured before the write.
        expected: u64,
        /// What reached the board.
        written: String,
    },

    /// The Android sparse image is malformed.
    #[error("the Android sparse image is invalid: {reason}; {written}")]
    SparseInvalid {
        /// What was seen, with the chunk's index and file offset.
        reason: String,
        /// What reached the board.
        written: String,
    },

    /// A CRC32 chunk of the sparse image does not match the data before it.
    #[error(
        "the Android sparse image's CRC32 chunk #{chunk} says 0x{expected:08x} but the data before it give 0x{computed:08x}: the image is corrupt; {written}"
    )]
    SparseCrc {
        /// Index of the CRC32 chunk.
        chunk: u32,
        /// The value stored in the chunk.
        expected: u32,
        /// The value computed over the expanded data.
        computed: u32,
        /// What reached the board.
        written: String,
    },

    /// The bmap file is not a bmap this engine reads.
    #[error("the bmap file is invalid: {reason}; nothing was written")]
    BmapInvalid {
        /// What was seen (element, line).
        reason: String,
    },

    /// A bmap was given with an image it cannot describe.
    #[error(
        "a bmap describes a raw image, but this image is {layout}: flash it without the bmap; nothing was written"
    )]
    BmapWithSparse {
        /// The image's layout (`Android sparse`).
        layout: &'static str,
    },

    /// The bmap's `ImageSize` is not the image's size.
    #[error(
        "the bmap does not match the image: it describes {bmap} ({bmap_bytes} bytes) but the image is {image} ({image_bytes} bytes): pass the bmap made for this image; nothing was written"
    )]
    BmapSizeMismatch {
        /// Human-readable bmap size.
        bmap: String,
        /// The bmap's `ImageSize`.
        bmap_bytes: u64,
        /// Human-readable image size.
        image: String,
        /// The image's logical size.
        image_bytes: u64,
    },

    /// A mapped range's checksum differs from the image's bytes there.
    #[error(
        "the bmap does not match the image: range {first}-{last} (blocks of {block_size} bytes) should have {algorithm} {expected} but the image has {got} there: pass the bmap made for this image; nothing was written"
    )]
    BmapRangeMismatch {
        /// First block of the range.
        first: u64,
        /// Last block of the range (inclusive).
        last: u64,
        /// The bmap's block size.
        block_size: u64,
        /// `sha256` or `sha1`.
        algorithm: &'static str,
        /// The bmap's checksum (hex).
        expected: String,
        /// The image's (hex).
        got: String,
    },

    /// The bmap file's own checksum (`BmapFileChecksum`) is wrong: it was edited or damaged.
    #[error(
        "the bmap file's own checksum is {expected} but its content gives {got}: the bmap was edited or damaged; nothing was written"
    )]
    BmapFileChecksum {
        /// Stored in the file.
        expected: String,
        /// Computed.
        got: String,
    },

    /// The image does not fit the board's flash.
    #[error(
        "the image ({image}) is larger than the board's flash ({flash}){offset}: nothing was written"
    )]
    ImageTooLarge {
        /// Human-readable logical size of the image.
        image: String,
        /// Human-readable capacity of the flash.
        flash: String,
        /// `" from LBA 0x…"` when it starts past 0.
        offset: String,
    },

    /// The image expands past the most the pre-pass reads: the board's flash, or before it
    /// is known the caller's bound. Refused as soon as a header declares more or a decoder
    /// has produced more, before the rest is read.
    #[error(
        "the image is larger than {limit}, the most {what} allows: {seen}; flash an image that fits; nothing was written"
    )]
    ImageOverLimit {
        /// Human-readable bound.
        limit: String,
        /// The bound in bytes.
        limit_bytes: u64,
        /// What sets the bound (`the board's flash`, a configuration key).
        what: String,
        /// What told the size (`its sparse header declares 16.0 EB`).
        seen: String,
    },

    /// A flash option is out of range.
    #[error("invalid option {what}: {reason}")]
    InvalidOption {
        /// The option.
        what: &'static str,
        /// Why, and what would be valid.
        reason: String,
    },

    /// The loader (boot) file is not a Rockchip boot file that can be sent.
    #[error(
        "the loader is not a usable Rockchip boot file: {reason}; nothing was sent to the board"
    )]
    LoaderInvalid {
        /// What was seen.
        reason: String,
    },

    /// No USB device at the port.
    #[error(
        "no USB device at port {port}: is the board powered, and is its flashing cable on that port? (`list_devices` shows what is attached)"
    )]
    NoDevice {
        /// The port path asked for.
        port: DeviceId,
    },

    /// The device at the port is not a Rockchip rockusb device.
    #[error(
        "the device at port {port} is {vid:04x}:{pid:04x}, not a Rockchip rockusb device ({why}): put the board into MaskROM or Loader mode"
    )]
    NotRockusb {
        /// The port path.
        port: DeviceId,
        /// Its vendor id.
        vid: u16,
        /// Its product id.
        pid: u16,
        /// What was missing.
        why: &'static str,
    },

    /// Opening the USB device failed.
    #[error("opening the rockusb device at port {port} failed: {source}{hint}")]
    DeviceOpen {
        /// The port path.
        port: DeviceId,
        /// libusb's error.
        #[source]
        source: rusb::Error,
        /// What to try (permissions: the udev rules).
        hint: &'static str,
    },

    /// The board is not in the mode the step needs.
    #[error("the board at port {port} is in {found} mode, but {step} needs {needed}: {advice}")]
    WrongMode {
        /// The port path.
        port: DeviceId,
        /// What it is in.
        found: Mode,
        /// What the step needs.
        needed: Mode,
        /// The step (`writing the image`, `download boot`).
        step: &'static str,
        /// What to do (`send a loader first`).
        advice: &'static str,
    },

    /// The board did not re-enumerate as expected.
    #[error(
        "the board did not {what} at port {port} within {secs:.1} s{seen}: power-cycle it into MaskROM and start again"
    )]
    Timeout {
        /// The port path.
        port: DeviceId,
        /// What was awaited (`come back in Loader mode after the loader download`).
        what: &'static str,
        /// How long.
        secs: f64,
        /// What was at the port meanwhile.
        seen: String,
    },

    /// A USB command to the board failed.
    #[error("{step} failed at port {port}: {reason}; {advice}")]
    Usb {
        /// The port path.
        port: DeviceId,
        /// The command (`READ_FLASH_INFO`, `download boot (0x472)`).
        step: String,
        /// The transport's or the board's words.
        reason: String,
        /// What to do, and what reached the board.
        advice: String,
    },

    /// Writing a chunk to the target failed: the flash stopped part-way.
    #[error(
        "writing {len} bytes at LBA 0x{lba:x} failed: {reason}; {done} of {total} had been written before it and the journal {journal} lists them: get the board back into Loader mode (after a power loss or reset it is in MaskROM: download boot first) and flash the same image again; the chunks already written are read back and skipped"
    )]
    Write {
        /// First block of the failed write.
        lba: u64,
        /// Its length.
        len: u64,
        /// The target's words.
        reason: String,
        /// Human-readable bytes written before it in this run.
        done: String,
        /// Bytes written before it in this run (what `done` says, exactly).
        bytes_written: u64,
        /// Human-readable bytes to write.
        total: String,
        /// The journal file.
        journal: String,
    },

    /// Reading back from the target failed (resume comparison or verification).
    #[error("reading back {len} bytes at LBA 0x{lba:x} during {phase} failed: {reason}; {written}")]
    Read {
        /// The phase.
        phase: Phase,
        /// First block.
        lba: u64,
        /// Length.
        len: u64,
        /// The target's words.
        reason: String,
        /// What reached the board and what to do.
        written: String,
    },

    /// Read-back verification found chunks that differ from what was written.
    #[error(
        "verification failed: {count} chunk(s) read back differ from what was written (first at LBA 0x{first_lba:x}, {first_len} bytes): the flash may be failing, or something else wrote the board meanwhile; flash the same image again (the journal no longer lists those chunks, so they are rewritten)"
    )]
    VerifyMismatch {
        /// How many chunks differ.
        count: usize,
        /// The first one's LBA.
        first_lba: u64,
        /// Its length.
        first_len: u64,
        /// Every differing chunk: (image offset, length).
        chunks: Vec<(u64, u64)>,
    },

    /// The caller's cancel flag stopped the flash between two chunks.
    #[error(
        "cancelled during {phase} after {done} of {total} (next chunk at image offset 0x{at:x}): {after}"
    )]
    Cancelled {
        /// The phase it stopped in.
        phase: Phase,
        /// Human-readable bytes done in that phase.
        done: String,
        /// Bytes written to the board in this run before the stop (chunks read back and
        /// skipped are not counted).
        bytes_written: u64,
        /// Human-readable bytes of that phase.
        total: String,
        /// Image offset of the first chunk not handled.
        at: u64,
        /// What it means for the board (`nothing was written`, or the journal resumes it).
        after: String,
    },

    /// The journal (state directory) could not be read or written.
    #[error(
        "the resume journal {path} could not be {action}: {source}: check that the state directory is writable by this user"
    )]
    Journal {
        /// The file or directory.
        path: PathBuf,
        /// `written`, `read`, `created`.
        action: &'static str,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
}

/// "nothing was written" or "N of the image had been written (the journal resumes it)".
pub(crate) fn written_note(written: u64) -> String {
    if written == 0 {
        "nothing was written".to_string()
    } else {
        format!(
            "{} had already been written to the board (the journal lists it: a later flash of a good image resumes)",
            human(written)
        )
    }
}
