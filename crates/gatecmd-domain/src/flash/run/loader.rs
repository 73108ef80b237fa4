//! Phase 3, the loader: sent if the board is in MaskROM (a packed loader, or the board's
//! DDR blob and usbplug pair when the call names none), never cancelled half-way. The loader is kept:
//! one that stalls a large transfer is sent again (`write`'s recovery). Ends with what
//! earlier flashes found of a loader this server sent.

use std::sync::Arc;

use super::context::{Run, StepResult, blocking};
use super::inventory::file_facts;
use super::rockusb::Opened;
use crate::flash::allowed_loaders_words;
use crate::flash::failure::FlashFailure;
use crate::flash::hash::FileHash;
use crate::flash::input::OpenFile;
use crate::flash::loader_memory::LoaderMemory;
use crate::flash::outcome::FileFacts;
use crate::flash::step::Step;
use crate::flash::usbplug::{self, Ready};
use gatecmd_devices::RockchipMode;
use gatecmd_flash::{BootFile, DownloadReport, FlashError, RockusbBoard};

/// What is known of the board's loader (the board itself is returned beside it, open).
pub(super) struct Loaded {
    pub facts: Option<FileFacts>,
    /// The loader, kept to be sent again by a recovery.
    pub boot: Option<Arc<BootFile>>,
    /// Whether the pair was sent (then there is no re-entry through it).
    pub pair_sent: bool,
    /// The SHA-256 of a loader this server sent.
    pub sent_sha: Option<String>,
    /// What earlier flashes of this board found of that loader.
    pub memory: LoaderMemory,
}

impl Loaded {
    /// The transfer size to open the Loader with: the call's, or the smaller one this
    /// loader was found to take.
    pub fn transfer_blocks(&self, asked: u32) -> u32 {
        self.memory
            .max_transfer_blocks
            .map_or(asked, |m| m.min(asked))
    }
}

/// What the loader phase is given.
pub(super) struct LoaderFiles<'p> {
    pub loader: Option<OpenFile>,
    pub hash: Option<FileHash>,
    pub pair: Option<&'p Ready>,
}

/// The `download_boot` and `await_loader` steps.
pub(super) async fn send(
    run: &mut Run<'_>,
    opened: Opened,
    files: LoaderFiles<'_>,
) -> StepResult<(RockusbBoard, Loaded)> {
    let Opened { usb, mode } = opened;
    let (usb, facts, boot, pair_sent) = match (mode, files.loader) {
        (RockchipMode::Loader, l) => {
            run.skipped(Step::DownloadBoot, "already in Loader mode");
            run.skipped(Step::AwaitLoader, "already in Loader mode");
            let facts = l
                .as_ref()
                .map(|l| file_facts(l, files.hash.and_then(FileHash::finish)));
            let boot = l.and_then(|l| BootFile::read(l.file).ok()).map(Arc::new);
            (usb, facts, boot, false)
        }
        (RockchipMode::MaskRom, None) => match files.pair {
            Some(ready) => {
                let (usb, boot) = send_pair(run, usb, ready).await?;
                (usb, Some(ready.facts.clone()), Some(boot), true)
            }
            None => {
                return Err((
                    Step::DownloadBoot,
                    FlashFailure::NeedsLoader {
                        board: run.board.name.clone(),
                        allowed: allowed_loaders_words(run.board.loaders(&run.config.flash)),
                    },
                ));
            }
        },
        (RockchipMode::MaskRom, Some(l)) => {
            let (usb, facts, boot) = send_packed(run, usb, l, files.hash).await?;
            (usb, Some(facts), Some(boot), false)
        }
    };
    // A loader this server sent: what earlier flashes found of it (its reads' limit, the
    // largest transfer it takes), by its SHA-256.
    let sent_sha = (mode == RockchipMode::MaskRom)
        .then(|| facts.as_ref().and_then(|f| f.sha256.clone()))
        .flatten();
    let memory = sent_sha
        .as_deref()
        .map(|sha| LoaderMemory::load(&run.journal_dir, &run.board.name, sha))
        .unwrap_or_default();
    let loaded = Loaded {
        facts,
        boot,
        pair_sent,
        sent_sha,
        memory,
    };
    Ok((usb, loaded))
}

/// The DDR blob + usbplug pair, sent to the mask ROM.
async fn send_pair(
    run: &mut Run<'_>,
    usb: RockusbBoard,
    ready: &Ready,
) -> StepResult<(RockusbBoard, Arc<BootFile>)> {
    let boot = ready.boot.clone();
    let t = run.started(Step::DownloadBoot);
    let (sent, wait) = (boot.clone(), run.device_wait);
    let (usb, report) = blocking(Step::DownloadBoot, move || {
        Ok(usb.download_boot_and_wait(&sent, wait)?)
    })
    .await?;
    downloaded(
        run,
        t,
        &report,
        usbplug::download_detail(&boot, true, &report.sent),
    );
    Ok((usb, boot))
}

/// A packed loader (the call's), read and sent to the mask ROM; a failure names it.
async fn send_packed(
    run: &mut Run<'_>,
    usb: RockusbBoard,
    l: OpenFile,
    hash: Option<FileHash>,
) -> StepResult<(RockusbBoard, FileFacts, Arc<BootFile>)> {
    let path = l.path.display().to_string();
    let sha = hash.and_then(FileHash::finish);
    let facts = file_facts(&l, sha.clone());
    let named = move |e: FlashError| FlashFailure::Loader {
        loader: path.clone(),
        sha256: sha.clone().unwrap_or_else(|| "unknown".into()),
        source: Box::new(e),
    };
    let t = run.started(Step::DownloadBoot);
    let wait = run.device_wait;
    let (usb, report, boot) = blocking(Step::DownloadBoot, move || {
        let boot = Arc::new(BootFile::read(l.file).map_err(&named)?);
        let (usb, report) = usb.download_boot_and_wait(&boot, wait).map_err(&named)?;
        Ok((usb, report, boot))
    })
    .await?;
    downloaded(
        run,
        t,
        &report,
        usbplug::download_detail(&boot, false, &report.sent),
    );
    Ok((usb, facts, boot))
}

/// The download's two steps: the transfer, and the wait for the Loader after it.
fn downloaded(run: &mut Run<'_>, t: std::time::Instant, report: &DownloadReport, detail: String) {
    let wait_ms = report.wait_secs.map(|s| (s * 1000.0) as u64).unwrap_or(0);
    let total = t.elapsed().as_millis() as u64;
    run.done_ms(Step::DownloadBoot, total.saturating_sub(wait_ms), detail);
    run.done_ms(
        Step::AwaitLoader,
        wait_ms,
        format!("Loader at port {}", run.board.usb),
    );
}
