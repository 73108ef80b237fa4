//! The DDR blob + usbplug bring-up (what `xrock maskrom DDR USBPLUG` does): the pair a call
//! names (`loader: {ddr, usbplug}`) or a board's config gives (`boards[].usbplug`), read
//! and sent as 0x471 then 0x472 (`gatecmd_flash::boot_pair`); and the re-entry that uses
//! it to verify whole an image a packed loader's reads could not: `power.maskrom`, the
//! pair sent, the flash resumed through the usbplug's rockusb (every journalled chunk read
//! back and kept, then the whole image verified).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use super::failure::FlashFailure;
use super::hash::FileHash;
use super::input::OpenFile;
use super::outcome::FileFacts;
use super::step::mib;
use gatecmd_flash::{
    BootFile, Control, DeviceId, FlashError, FlashOptions, FlashReport, Image, LoaderTarget, Mode,
    Progress, RockusbBoard,
};

/// A DDR init blob and a usbplug, opened beneath the file roots.
pub struct Pair {
    pub ddr: OpenFile,
    pub usbplug: OpenFile,
}

/// A pair read and ready to send, with what the result says of it.
pub(super) struct Ready {
    pub boot: Arc<BootFile>,
    /// `path` names both files (`DDR + usbplug`); `sha256` is the usbplug's (the program
    /// whose reads the flash trusts; loader facts are remembered by it).
    pub facts: FileFacts,
}

fn name_of(f: &OpenFile) -> String {
    (f.path.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| f.path.display().to_string())
}

/// Reads the pair (each file at most 4 MiB) and takes the usbplug's SHA-256 (`known`: the
/// approval's, of the same open files). Blocking.
pub(super) fn read(pair: Pair, known: Option<(String, String)>) -> Result<Ready, FlashFailure> {
    let sha = FileHash::known_or_spawn(known.map(|k| k.1), &pair.usbplug.file);
    let bytes = |f: &OpenFile| f.file.metadata().map(|m| m.len()).unwrap_or(0);
    let path = format!(
        "{} + {}",
        pair.ddr.path.display(),
        pair.usbplug.path.display()
    );
    let total = bytes(&pair.ddr) + bytes(&pair.usbplug);
    let names = (name_of(&pair.ddr), name_of(&pair.usbplug));
    let boot = BootFile::from_pair(pair.ddr.file, pair.usbplug.file, (&names.0, &names.1))
        .map_err(|e| FlashFailure::Loader {
            loader: path.clone(),
            sha256: "unknown".into(),
            source: Box::new(e),
        })?;
    Ok(Ready {
        boot: Arc::new(boot),
        facts: FileFacts {
            path,
            bytes: total,
            sha256: sha.finish(),
            compression: None,
            layout: None,
            logical_bytes: None,
            mapped_bytes: None,
        },
    })
}

/// The `download_boot` step's line: which path was taken and what was sent.
pub(super) fn download_detail(
    boot: &BootFile,
    pair: bool,
    sent: &[(u16, String, usize)],
) -> String {
    let list = sent
        .iter()
        .zip(&boot.entries)
        .map(|((area, name, n), e)| format!("0x{area:x} {name} ({n} bytes), {} ms", e.delay_ms))
        .collect::<Vec<_>>()
        .join(", ");
    if pair {
        format!("the DDR blob + usbplug pair, as xrock maskrom sends it: {list}")
    } else {
        format!("the packed loader, as rkdeveloptool db sends it: {list}")
    }
}

/// What the re-entry works with (after `power.maskrom` has run).
pub(super) struct Reentry {
    pub port: DeviceId,
    pub boot: Arc<BootFile>,
    pub device_wait: Duration,
    pub transfer_blocks: u32,
    pub flag: Arc<AtomicBool>,
}

impl Reentry {
    /// The packed loader's reads were unsound and the board is on its way to MaskROM: the
    /// pair sent, and the flash resumed through the usbplug, which reads back every
    /// journalled chunk (rewriting any that differs) and then verifies the whole image.
    /// Returns that run's report (its `verify` is the whole image's) and the usbplug's
    /// target. Blocking.
    pub(super) fn verify_whole(
        self,
        mut img: Image,
        mut opts: FlashOptions,
        mut sink: impl FnMut(Progress),
    ) -> Result<(FlashReport, LoaderTarget), FlashError> {
        let usb = RockusbBoard::wait(&self.port, Mode::MaskRom, self.device_wait)?;
        let (usb, _) = usb.download_boot_and_wait(&self.boot, self.device_wait)?;
        let mut target = usb
            .into_target()?
            .with_transfer_blocks(self.transfer_blocks)?;
        opts.reads_unsound_from_lba = None;
        opts.resume = true;
        let report = gatecmd_flash::flash(
            &mut target,
            &mut img,
            &opts,
            &mut Control::new(&mut sink, &self.flag),
        )?;
        Ok((report, target))
    }
}

/// The `usbplug` step's line: from where the packed loader's reads were unsound, what was
/// sent, what was read back.
pub(super) fn reentry_detail(boot: &BootFile, first: &FlashReport, second: &FlashReport) -> String {
    let v = second.verify.clone().unwrap_or_default();
    let from = (first.verify.as_ref())
        .and_then(|v| v.reads_unsound_from_lba)
        .map(|l| format!("LBA 0x{l:x}"))
        .unwrap_or_else(|| "some LBA".into());
    let sent = (boot.entries.iter())
        .map(|e| format!("0x{:x} {}", e.area, e.name))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "the packed loader's reads were unsound from {from}: power.maskrom ran, the DDR blob + usbplug pair was sent ({sent}), and through the usbplug {} journalled chunks ({}) were read back equal and kept, {} written and read back ({}): {}",
        second.write.chunks_skipped,
        mib(second.write.bytes_skipped),
        second.write.chunks_written,
        mib(v.verified_bytes),
        v.verification(),
    )
}

/// The flash as a whole: the first run's writes and the second's; the second's
/// verification, counting the journalled chunks it read back equal through the usbplug
/// (a resume skips a chunk only on a sound read that matches its hash) as verified.
pub(super) fn merged(first: FlashReport, second: FlashReport) -> FlashReport {
    let mut write = first.write;
    write.bytes_written += second.write.bytes_written;
    write.chunks_written += second.write.chunks_written;
    write.chunks_rewritten += second.write.chunks_rewritten;
    write.ranges.extend(second.write.ranges);
    let mut verify = second.verify.unwrap_or_default();
    verify.verified_bytes += second.write.bytes_skipped;
    verify.bytes += second.write.bytes_skipped;
    verify.chunks += second.write.chunks_skipped;
    FlashReport {
        write,
        verify: Some(verify),
        ..first
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(dir: &std::path::Path, name: &str, bytes: &[u8]) -> OpenFile {
        let path = dir.join(name);
        std::fs::write(&path, bytes).expect("write");
        OpenFile {
            file: std::fs::File::open(&path).expect("open"),
            path,
        }
    }

    #[test]
    fn a_pair_is_read_named_and_its_download_says_which_path() {
        let dir = tempfile::tempdir().expect("tmp");
        let pair = Pair {
            ddr: open(dir.path(), "ddr.bin", &[1u8; 3000]),
            usbplug: open(dir.path(), "usbplug.bin", &[2u8; 5000]),
        };
        let ready = read(pair, None).expect("read");
        assert_eq!(ready.facts.bytes, 8000);
        assert!(ready.facts.path.contains(" + "), "{}", ready.facts.path);
        assert_eq!(ready.facts.sha256.as_deref().map(str::len), Some(64));
        let sent: Vec<_> = (ready.boot.entries.iter())
            .map(|e| (e.area, e.name.clone(), e.len))
            .collect();
        let line = download_detail(&ready.boot, true, &sent);
        assert_eq!(
            line,
            "the DDR blob + usbplug pair, as xrock maskrom sends it: 0x471 ddr.bin (3000 bytes), 10 ms, 0x472 usbplug.bin (5000 bytes), 10 ms"
        );
        assert!(download_detail(&ready.boot, false, &sent).starts_with("the packed loader"));
        let empty = Pair {
            ddr: open(dir.path(), "empty.bin", b""),
            usbplug: open(dir.path(), "u.bin", b"x"),
        };
        assert!(matches!(
            read(empty, None),
            Err(FlashFailure::Loader { .. })
        ));
    }
}
