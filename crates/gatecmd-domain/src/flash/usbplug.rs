//! The DDR blob + usbplug bring-up (what `xrock maskrom DDR USBPLUG` does): the pair a call
//! names (`loader: {ddr, usbplug}`) or a board's config gives (`boards[].usbplug`), read
//! and sent as 0x471 then 0x472 (`gatecmd_flash::boot_pair`); and the re-entry that uses
//! it to verify whole an image a packed loader's reads could not: `power.maskrom`, the
//! pair sent, the flash resumed through the usbplug's rockusb (every journalled chunk read
//! back and kept, then the whole image verified).

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::hash::FileHash;
use super::outcome::FileFacts;
use super::run::{OpenFile, Run, StepResult, Stop, blocking, cancel_as_stop, maskrom_action};
use super::step::Step;
use crate::config::{BoardConfig, Config};
use gatecmd_flash::{BootFile, Control, FlashOptions, FlashReport, Image, LoaderTarget, Progress};

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
/// approval's, of the same open files).
pub(super) async fn read(pair: Pair, known: Option<(String, String)>) -> StepResult<Ready> {
    blocking(Step::DownloadBoot, move || {
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
            .map_err(|e| super::failure::FlashFailure::Loader {
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
    })
    .await
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

/// What the re-entry works with.
pub(super) struct Reentry<'a> {
    pub config: &'a Config,
    pub board: &'a BoardConfig,
    pub boot: Arc<BootFile>,
    pub device_wait: Duration,
    pub transfer_blocks: u32,
    pub waits: &'a CancellationToken,
    pub stop: &'a Stop,
}

/// The packed loader's reads were unsound: the board back to MaskROM, the pair sent, and
/// the flash resumed through the usbplug, which reads back every journalled chunk (and
/// rewrites any that differ) and then verifies the whole image. Returns the second run's
/// report (its `verify` is the whole image's) and the usbplug's target.
pub(super) async fn verify_whole(
    run: &mut Run<'_>,
    r: Reentry<'_>,
    img: Image,
    opts: FlashOptions,
    first: &FlashReport,
) -> StepResult<(FlashReport, LoaderTarget)> {
    let t = run.started(Step::Usbplug);
    maskrom_action(run.state, r.config, r.board, r.waits)
        .await
        .map_err(|e| (Step::Usbplug, e))?;
    let port = super::device::engine_port(&r.board.usb);
    let (boot, wait, blocks) = (r.boot.clone(), r.device_wait, r.transfer_blocks);
    let target = blocking(Step::Usbplug, move || {
        let usb = gatecmd_flash::RockusbBoard::wait(&port, gatecmd_flash::Mode::MaskRom, wait)?;
        let (usb, _) = usb.download_boot_and_wait(&boot, wait)?;
        Ok(usb.into_target()?.with_transfer_blocks(blocks)?)
    })
    .await?;
    let mut opts = opts;
    opts.reads_unsound_from_lba = None;
    opts.resume = true;
    let flag = r.stop.flag.clone();
    let events = run.events.clone();
    let outcome = tokio::task::spawn_blocking(move || {
        let (mut img, mut target) = (img, target);
        let mut sink = super::run::progress_sink(events);
        let rep = gatecmd_flash::flash(
            &mut target,
            &mut img,
            &opts,
            &mut Control::new(&mut |p: Progress| sink(p), &flag),
        );
        rep.map(|rep| (rep, target))
    })
    .await
    .map_err(|e| {
        (
            Step::Usbplug,
            super::failure::FlashFailure::Lost(e.to_string()),
        )
    })?;
    let (report, target) = outcome.map_err(|e| {
        (
            Step::Usbplug,
            cancel_as_stop(r.stop, Step::Usbplug, e.into()),
        )
    })?;
    let v = report.verify.clone().unwrap_or_default();
    let unsound_from = first
        .verify
        .as_ref()
        .and_then(|v| v.reads_unsound_from_lba)
        .map(|l| format!("LBA 0x{l:x}"))
        .unwrap_or_else(|| "some LBA".into());
    run.done(
        Step::Usbplug,
        t,
        format!(
            "the packed loader's reads were unsound from {unsound_from}: power.maskrom ran, the DDR blob + usbplug pair was sent ({}), and through the usbplug {} journalled chunks were read back and kept, {} rewritten, then {} verified by read-back ({})",
            r.boot
                .entries
                .iter()
                .map(|e| format!("0x{:x} {}", e.area, e.name))
                .collect::<Vec<_>>()
                .join(", "),
            report.write.chunks_skipped,
            report.write.chunks_written,
            super::step::mib(v.verified_bytes),
            v.verification(),
        ),
    );
    Ok((report, target))
}

/// The flash as a whole: the first run's writes and the second's, the second's
/// verification (the whole image's).
pub(super) fn merged(first: FlashReport, second: FlashReport) -> FlashReport {
    let mut write = first.write;
    write.bytes_written += second.write.bytes_written;
    write.chunks_written += second.write.chunks_written;
    write.chunks_rewritten += second.write.chunks_rewritten;
    write.ranges.extend(second.write.ranges);
    FlashReport {
        write,
        verify: second.verify,
        ..first
    }
}
