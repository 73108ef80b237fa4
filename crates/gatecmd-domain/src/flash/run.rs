//! `flash_board`'s orchestration: from whatever state the board is in to the image
//! written, verified and booted. Async where it waits (the MaskROM action through the
//! executor, the device registry, the console), blocking threads where the engine talks
//! USB (`gatecmd-flash` is synchronous: libusb).
//!
//! Cancel, the call's time limit and the server's shutdown raise the engine's flag (and so
//! does dropping the flash's future), read between chunks and, in `check_image`, every few
//! thousand XML events of a bmap, sparse chunk headers or buffers of a decoder; the loader
//! download takes no flag on purpose (a mask ROM left with half a loader takes nothing else
//! until power-cycled), so a cancel that arrives then stops at the next step.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use regex::Regex;
use tokio_util::sync::CancellationToken;

use super::device;
use super::failure::{Failed, FlashFailure, Seen};
use super::hash::FileHash;
use super::loader_memory::{Fact, LoaderMemory};
use super::outcome::{FileFacts, FlashFacts, Flashed, Written};
use super::step::{Bytes, Event, Step, StepRecord, mib};
use crate::audit::PowerVia;
use crate::boards::PowerState;
use crate::boards::boot::{Now, Target, plan};
use crate::config::power::action_spec;
use crate::config::{BoardConfig, Config};
use crate::console::Console;
use crate::console::session::{TalkError, Wait, last_line_since, watch};
use crate::power_run::{Audited, PowerFailure, run_power};
use crate::state::AppState;
use gatecmd_devices::RockchipMode;
use gatecmd_flash::{
    BootFile, Control, FlashError, FlashOptions, Image, Phase, Progress, SizeLimit,
};

/// How long the registry is given, at most, to hear of a board that left after a failed
/// transfer (looked at every [`USB_POLL`]; the wait ends as soon as the device is gone).
const USB_SETTLE: Duration = Duration::from_millis(1500);
const USB_POLL: Duration = Duration::from_millis(50);
/// The boot the reset started, as boot_report tells it: once wait_for matched, when the
/// recorder has confirmed what it saw (a prompt is taken after it stayed quiet), never the
/// moment before.
async fn boot_summary(
    state: &AppState,
    board: &str,
    boot: Option<u64>,
    matched: bool,
) -> Option<crate::boots::BootSummary> {
    let n = boot?;
    if matched {
        state.boots.settled(board, n, BOOT_SETTLE).await
    } else {
        state.boots.summary(board, Some(n)).ok()
    }
}

/// Longest wait, after wait_for matched, for the boot recorder to confirm what it saw
/// (its prompt quiet time and a tick or two of the ticker, with room for a loaded host).
const BOOT_SETTLE: Duration = Duration::from_secs(2);

/// Bytes of boot log a result carries at most (the newest).
pub const BOOT_LOG_BYTES: usize = 64 * 1024;

pub use super::input::OpenFile;

/// Everything one flash needs, checked by the caller (lease, policy, file roots).
pub struct Inputs {
    pub board: BoardConfig,
    pub console: Option<Console>,
    pub image: OpenFile,
    pub bmap: Option<OpenFile>,
    pub loader: Option<OpenFile>,
    /// A DDR blob + usbplug pair: sent instead of a packed loader when the call names none,
    /// and used to verify whole what a packed loader's reads could not (`usbplug` step).
    pub usbplug: Option<super::usbplug::Pair>,
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

/// Why the engine's flag went up.
#[derive(Clone)]
struct Stop {
    flag: Arc<AtomicBool>,
    timed_out: Arc<AtomicBool>,
    cancel: CancellationToken,
    secs: u64,
}

impl Stop {
    /// The failure for a stop noticed during `step`.
    fn failure(&self, step: Step, detail: String) -> FlashFailure {
        if self.timed_out.load(Ordering::Relaxed) {
            FlashFailure::TimedOut {
                step,
                secs: self.secs,
                detail,
            }
        } else {
            FlashFailure::Cancelled { step, detail }
        }
    }

    fn raised(&self) -> bool {
        self.flag.load(Ordering::Relaxed)
    }
}

/// The flash as it goes: steps done, what is known so far.
struct Run<'a> {
    state: &'a AppState,
    board: &'a BoardConfig,
    console: Option<&'a Console>,
    events: Events,
    steps: Vec<StepRecord>,
    bytes_written: u64,
    console_cursor: Option<u64>,
    /// The calling client (the trigger of the boot the reset starts).
    client: String,
}

impl Run<'_> {
    fn started(&self, step: Step) -> Instant {
        (self.events)(Event::Started(step));
        Instant::now()
    }

    fn done(&mut self, step: Step, since: Instant, detail: String) {
        self.done_ms(step, since.elapsed().as_millis() as u64, detail);
    }

    fn done_ms(&mut self, step: Step, ms: u64, detail: String) {
        let r = StepRecord { step, ms, detail };
        (self.events)(Event::Done(r.clone()));
        self.steps.push(r);
    }

    fn skipped(&mut self, step: Step, why: &str) {
        self.done_ms(step, 0, format!("skipped: {why}"));
    }

    fn fail(self, step: Step, failure: FlashFailure) -> Failed {
        let seen = Seen {
            device: device::at_port(self.state, &self.board.usb),
            console_last_line: self
                .console
                .map(|c| last_line_since(c, c.bounds().1.saturating_sub(4096))),
        };
        Failed {
            step,
            failure,
            steps: self.steps,
            seen,
            board_state: device::board_state(self.state, self.board),
            bytes_written: self.bytes_written,
            console_cursor: self.console_cursor,
        }
    }
}

/// Flashes `inputs.image` to the board: see the module's documentation.
pub async fn flash(
    state: &AppState,
    config: &Config,
    inputs: Inputs,
    cancel: CancellationToken,
    events: Events,
) -> Result<Flashed, Failed> {
    flash_known(state, config, inputs, Known::default(), cancel, events).await
}

/// [`flash`], naming the files by the SHA-256s `known` already taken in this call (an
/// approval's, of these very open files, unchanged since) instead of reading them again.
pub async fn flash_known(
    state: &AppState,
    config: &Config,
    inputs: Inputs,
    known: Known,
    cancel: CancellationToken,
    events: Events,
) -> Result<Flashed, Failed> {
    let Inputs {
        board,
        console,
        image,
        bmap,
        loader,
        usbplug,
        wait_for,
        timeout,
        journal_dir,
        transfer_blocks,
        device_wait,
        received,
        client,
    } = inputs;
    let t0 = received;
    let deadline = tokio::time::Instant::now() + timeout;
    let stop = Stop {
        flag: Arc::new(AtomicBool::new(false)),
        timed_out: Arc::new(AtomicBool::new(false)),
        cancel: cancel.clone(),
        secs: timeout.as_secs(),
    };
    // The engine reads a flag; the call's token, its deadline and the server's shutdown
    // raise it, and so does this future's drop (a runtime that shuts down drops it, then
    // waits for the blocking thread that reads the flag).
    let _raise_on_drop = RaiseOnDrop(stop.flag.clone());
    let stopping = state.executor.stopping();
    let raiser = {
        let (stop, stopping) = (stop.clone(), stopping.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = stop.cancel.cancelled() => {}
                _ = stopping.cancelled() => {}
                _ = tokio::time::sleep_until(deadline) => stop.timed_out.store(true, Ordering::Relaxed),
            }
            stop.flag.store(true, Ordering::Relaxed);
        })
    };
    // A token the waits below watch: cancelled by a cancel, the deadline or the shutdown.
    let waits = CancellationToken::new();
    let waits_guard = {
        let (waits, stop) = (waits.clone(), stop.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = stop.cancel.cancelled() => {}
                _ = stopping.cancelled() => {}
                _ = tokio::time::sleep_until(deadline) => {}
            }
            waits.cancel();
        })
    };
    let mut run = Run {
        state,
        board: &board,
        console: console.as_ref(),
        events: events.clone(),
        steps: Vec::new(),
        bytes_written: 0,
        console_cursor: None,
        client,
    };
    let result = steps(
        &mut run,
        config,
        Files {
            image,
            bmap,
            loader,
            usbplug,
            known,
        },
        wait_for,
        &journal_dir,
        transfer_blocks,
        device_wait,
        &stop,
        &waits,
        deadline,
        t0,
    )
    .await;
    raiser.abort();
    waits_guard.abort();
    match result {
        Ok(f) => Ok(f),
        Err((step, failure)) => {
            // A transfer that failed because the board went away (power cut, reset) fails
            // before the registry has heard of the removal: give it a moment, so that the
            // state the result names is where the board is.
            if let FlashFailure::Engine(e) = &failure
                && matches!(
                    **e,
                    FlashError::Write { .. } | FlashError::Read { .. } | FlashError::Usb { .. }
                )
            {
                let until = tokio::time::Instant::now() + USB_SETTLE;
                while device::mode_at(state, &board.usb).is_some()
                    && tokio::time::Instant::now() < until
                {
                    tokio::time::sleep(USB_POLL).await;
                }
            }
            Err(run.fail(step, failure))
        }
    }
}

/// Raises the engine's flag when dropped.
struct RaiseOnDrop(Arc<AtomicBool>);

impl Drop for RaiseOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

struct Files {
    image: OpenFile,
    bmap: Option<OpenFile>,
    loader: Option<OpenFile>,
    usbplug: Option<super::usbplug::Pair>,
    known: Known,
}

type StepResult<T> = Result<T, (Step, FlashFailure)>;

/// Runs a blocking piece of USB or file work on its own thread.
async fn blocking<T: Send + 'static>(
    step: Step,
    f: impl FnOnce() -> Result<T, FlashFailure> + Send + 'static,
) -> StepResult<T> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(|e| (step, e)),
        Err(e) => Err((step, FlashFailure::Lost(e.to_string()))),
    }
}

/// Progress from the engine's thread: rate and ETA per step, at most ten a second.
fn progress_sink(events: Events) -> impl FnMut(Progress) + Send {
    let mut phase: Option<(Phase, Instant)> = None;
    let mut last = Instant::now() - Duration::from_secs(1);
    move |p: Progress| {
        let began = match phase {
            Some((ph, t)) if ph == p.phase => t,
            _ => {
                let t = Instant::now();
                phase = Some((p.phase, t));
                t
            }
        };
        let end = p.done >= p.total;
        if !end && last.elapsed() < Duration::from_millis(100) {
            return;
        }
        last = Instant::now();
        let secs = began.elapsed().as_secs_f64();
        let rate = if secs > 0.0 {
            p.done as f64 / secs
        } else {
            0.0
        };
        let eta_secs = (rate > 0.0).then(|| p.total.saturating_sub(p.done) as f64 / rate);
        let step = match p.phase {
            Phase::Check => Step::CheckImage,
            Phase::Write => Step::Write,
            Phase::Verify => Step::Verify,
        };
        events(Event::Bytes(Bytes {
            step,
            done: p.done,
            total: p.total,
            rate,
            eta_secs,
        }));
    }
}

#[allow(clippy::too_many_arguments)] // one call site: the steps' shared context, unpacked
async fn steps(
    run: &mut Run<'_>,
    config: &Config,
    files: Files,
    wait_for: Option<Regex>,
    journal_dir: &std::path::Path,
    transfer_blocks: u32,
    device_wait: Duration,
    stop: &Stop,
    waits: &CancellationToken,
    deadline: tokio::time::Instant,
    t0: Instant,
) -> StepResult<Flashed> {
    let board = run.board.clone();
    let Files {
        image,
        bmap,
        loader,
        usbplug,
        known,
    } = files;
    // The pair, read now (two small files): sent instead of a packed loader when the call
    // names none, kept to verify whole what a packed loader's reads could not.
    let pair = match usbplug {
        Some(p) => {
            let k = known.usbplug.clone();
            Some(blocking(Step::DownloadBoot, move || super::usbplug::read(p, k)).await?)
        }
        None => None,
    };
    run.done_ms(
        Step::Accept,
        t0.elapsed().as_millis() as u64,
        "policy, lease and files checked, job started".into(),
    );
    // The files' SHA-256 for the result and the audit, hashed beside the flash: the loader
    // and the bmap now; the image once its check says whether it needs one (below).
    let image_dup = image.file.try_clone().ok();
    let loader_hash = (loader.as_ref()).map(|l| FileHash::known_or_spawn(known.loader, &l.file));
    let bmap_hash = (bmap.as_ref()).map(|b| FileHash::known_or_spawn(known.bmap, &b.file));
    let image_path = image.path.display().to_string();
    let image_bytes = image.file.metadata().map(|m| m.len()).unwrap_or(0);
    let bmap_facts = bmap.as_ref().map(|b| FileFacts {
        path: b.path.display().to_string(),
        bytes: b.file.metadata().map(|m| m.len()).unwrap_or(0),
        sha256: None,
        compression: None,
        layout: None,
        logical_bytes: None,
        mapped_bytes: None,
    });

    // 1. The image, before the board is touched. Each of its parsers reads the flag at
    // bounded intervals of work, and expands at most flash.max_image_gib.
    let t = run.started(Step::CheckImage);
    let limit = SizeLimit::new(config.flash.max_image_bytes(), "flash.max_image_gib");
    let (img, checked) = {
        let flag = stop.flag.clone();
        let events = run.events.clone();
        blocking(Step::CheckImage, move || {
            let mut sink = progress_sink(events);
            // Shared: the decoders read it too, between 256 KiB of input.
            let mut ctl = Control::with_flag(&mut sink, flag);
            let mut img = Image::open_with(image.file, bmap.map(|b| b.file), &ctl)?;
            let checked = img.needs_check();
            if checked {
                img.check(&mut ctl, &limit)?;
            }
            Ok((img, checked))
        })
        .await
        .map_err(|(s, e)| (s, cancel_as_stop(stop, s, e)))?
    };
    let info = img.info().clone();
    // A raw image whose bmap gives every range a checksum was checked range by range
    // against it: the bmap's SHA-256 names the bytes written, and the image file (the
    // whole expansion, holes included) is not read a second time to hash it.
    let named_by_bmap = checked
        && info.compression == gatecmd_flash::Compression::None
        && info
            .bmap
            .as_ref()
            .is_some_and(|b| b.ranges_without_checksum == 0);
    let image_hash = match (&image_dup, named_by_bmap) {
        (Some(f), false) => Some(FileHash::known_or_spawn(known.image, f)),
        _ => None,
    };
    drop(image_dup);
    run.done(
        Step::CheckImage,
        t,
        format!(
            "{} {} image, {} mapped of {}{}",
            name_of(&info.compression),
            info.layout.name(),
            info.mapped_bytes.map(mib).unwrap_or_else(|| "?".into()),
            info.logical_size.map(mib).unwrap_or_else(|| "?".into()),
            if checked {
                ", read through and checked"
            } else {
                ""
            }
        ),
    );

    // 2. The board to a rockusb mode.
    let mode = device::mode_at(run.state, &board.usb);
    match mode {
        Some(m) => {
            run.skipped(Step::Maskrom, &format!("already in {m} mode"));
        }
        None => {
            let t = run.started(Step::Maskrom);
            let now = Now::default();
            plan(&board, Target::Maskrom, now).map_err(|u| (Step::Maskrom, u.into()))?;
            maskrom_action(run.state, config, &board, waits)
                .await
                .map_err(|e| (Step::Maskrom, e))?;
            if stop.raised() {
                return Err((
                    Step::Maskrom,
                    stop.failure(Step::Maskrom, "the MaskROM action had run".into()),
                ));
            }
            run.done(Step::Maskrom, t, "power.maskrom ran".into());
        }
    }
    // The rockusb step ends once the device is open (the open is part of it).
    let (mode, t_usb, usb_detail) = match mode {
        Some(m) => (
            m,
            run.started(Step::AwaitRockusb),
            format!("already in {m} mode at port {}, opened", board.usb),
        ),
        None => {
            let t = run.started(Step::AwaitRockusb);
            let m = device::await_rockusb(run.state, &board, device_wait, waits)
                .await
                .map_err(|e| match e {
                    device::AwaitError::Stopped => (
                        Step::AwaitRockusb,
                        stop.failure(Step::AwaitRockusb, "waiting for the rockusb device".into()),
                    ),
                    device::AwaitError::Failed(f) => (Step::AwaitRockusb, f),
                })?;
            (m, t, format!("{m} at port {}, opened", board.usb))
        }
    };
    let (port, engine_mode) = (device::engine_port(&board.usb), device::engine_mode(mode));
    let usb = blocking(Step::AwaitRockusb, move || {
        Ok(gatecmd_flash::RockusbBoard::wait(
            &port,
            engine_mode,
            Duration::from_secs(5),
        )?)
    })
    .await?;
    run.done(Step::AwaitRockusb, t_usb, usb_detail);

    // 3. The loader, if the board is in MaskROM. Never cancelled half-way.
    // The loader is kept: a loader that stalls a large transfer is sent again (`recover`).
    let mut pair_sent = false;
    let (usb, loader_facts, boot_file) = match (mode, loader) {
        (RockchipMode::Loader, l) => {
            run.skipped(Step::DownloadBoot, "already in Loader mode");
            run.skipped(Step::AwaitLoader, "already in Loader mode");
            let facts = l
                .as_ref()
                .map(|l| file_facts(l, loader_hash.and_then(FileHash::finish)));
            let boot = l.and_then(|l| BootFile::read(l.file).ok()).map(Arc::new);
            (usb, facts, boot)
        }
        (RockchipMode::MaskRom, None) if pair.is_some() => {
            let ready = pair.as_ref().ok_or((
                Step::DownloadBoot,
                FlashFailure::Lost("the pair was not kept".into()),
            ))?;
            let (boot, facts) = (ready.boot.clone(), ready.facts.clone());
            let t = run.started(Step::DownloadBoot);
            let sent = boot.clone();
            let (usb, report) = blocking(Step::DownloadBoot, move || {
                Ok(usb.download_boot_and_wait(&sent, device_wait)?)
            })
            .await?;
            let wait_ms = report.wait_secs.map(|s| (s * 1000.0) as u64).unwrap_or(0);
            let total = t.elapsed().as_millis() as u64;
            run.done_ms(
                Step::DownloadBoot,
                total.saturating_sub(wait_ms),
                super::usbplug::download_detail(&boot, true, &report.sent),
            );
            events_done_await_loader(run, wait_ms);
            pair_sent = true;
            (usb, Some(facts), Some(boot))
        }
        (RockchipMode::MaskRom, None) => {
            return Err((
                Step::DownloadBoot,
                FlashFailure::NeedsLoader {
                    board: board.name.clone(),
                    allowed: super::allowed_loaders_words(board.loaders(&config.flash)),
                },
            ));
        }
        (RockchipMode::MaskRom, Some(l)) => {
            let path = l.path.display().to_string();
            let sha = loader_hash.and_then(FileHash::finish);
            let facts = file_facts(&l, sha.clone());
            let named = move |e: FlashError| FlashFailure::Loader {
                loader: path.clone(),
                sha256: sha.clone().unwrap_or_else(|| "unknown".into()),
                source: Box::new(e),
            };
            let t = run.started(Step::DownloadBoot);
            let (usb, report, boot) = blocking(Step::DownloadBoot, move || {
                let boot = Arc::new(BootFile::read(l.file).map_err(&named)?);
                let (usb, report) = usb
                    .download_boot_and_wait(&boot, device_wait)
                    .map_err(&named)?;
                Ok((usb, report, boot))
            })
            .await?;
            let wait_ms = report.wait_secs.map(|s| (s * 1000.0) as u64).unwrap_or(0);
            let total = t.elapsed().as_millis() as u64;
            run.done_ms(
                Step::DownloadBoot,
                total.saturating_sub(wait_ms),
                super::usbplug::download_detail(&boot, false, &report.sent),
            );
            events_done_await_loader(run, wait_ms);
            (usb, Some(facts), Some(boot))
        }
    };
    // A loader this server sent: what earlier flashes found of it (its reads' limit, the
    // largest transfer it takes), by its SHA-256.
    let sent_loader = (mode == RockchipMode::MaskRom)
        .then(|| loader_facts.as_ref().and_then(|f| f.sha256.clone()))
        .flatten();
    let known = sent_loader
        .as_deref()
        .map(|sha| LoaderMemory::load(journal_dir, &board.name, sha))
        .unwrap_or_default();
    let transfer_blocks = known
        .max_transfer_blocks
        .map_or(transfer_blocks, |m| m.min(transfer_blocks));
    if stop.raised() {
        return Err((
            Step::FlashInfo,
            stop.failure(Step::FlashInfo, "nothing was written".into()),
        ));
    }

    // 4. The flash's size: an image larger than it is refused before a byte is written.
    let t = run.started(Step::FlashInfo);
    let logical = info.logical_size;
    let (target, flash_facts) = blocking(Step::FlashInfo, move || {
        let target = usb.into_target()?.with_transfer_blocks(transfer_blocks)?;
        let fi = target.flash_info().clone();
        let capacity = fi.sectors * 512;
        if let Some(size) = logical
            && size > capacity
        {
            return Err(FlashError::ImageTooLarge {
                image: gatecmd_flash::units::human(size),
                flash: gatecmd_flash::units::human(capacity),
                offset: String::new(),
            }
            .into());
        }
        Ok((
            target,
            FlashFacts {
                flash_id: fi.flash_id.trim().to_string(),
                bytes: capacity,
            },
        ))
    })
    .await?;
    run.done(
        Step::FlashInfo,
        t,
        format!("{} of {}", mib(flash_facts.bytes), flash_facts.flash_id),
    );

    // 5. Write and verify (the engine), then reset. A loader this server sent, whose reads
    // an earlier flash found unsound from some LBA, is not read from there.
    let mut opts = FlashOptions::new(board.name.clone(), journal_dir.to_path_buf());
    opts.reads_unsound_from_lba = known.reads_unsound_from_lba;
    let chunk_size = opts.chunk_size;
    let (mut target, mut img, mut recovered) = (target, img, false);
    let (report, target, t_write, verify_started, img) = loop {
        let t_write = run.started(Step::Write);
        let flag = stop.flag.clone();
        let events = run.events.clone();
        let verify_started = Arc::new(std::sync::Mutex::new(None::<Instant>));
        let opts = opts.clone();
        let outcome = {
            let verify_started = verify_started.clone();
            tokio::task::spawn_blocking(move || {
                let mut img = img;
                let mut target = target;
                let mut inner = progress_sink(events.clone());
                let mut sink = |p: Progress| {
                    if p.phase == Phase::Verify {
                        let mut v = verify_started.lock().unwrap_or_else(|p| p.into_inner());
                        if v.is_none() {
                            *v = Some(Instant::now());
                            events(Event::Started(Step::Verify));
                        }
                    }
                    inner(p)
                };
                let r = gatecmd_flash::flash(
                    &mut target,
                    &mut img,
                    &opts,
                    &mut Control::new(&mut sink, &flag),
                );
                (r, target, img)
            })
            .await
        };
        match outcome {
            Err(e) => return Err((Step::Write, FlashFailure::Lost(e.to_string()))),
            // A large transfer the loader stalled or failed: once, the board is brought back
            // and the flash goes on at the default size (the journal keeps what was written).
            // A board that left the bus (power cut, unplug) did not stall: that is the
            // failure below, resumed by the next call.
            Ok((Err(e), t, i))
                if !recovered
                    && gatecmd_flash::BlockTarget::max_transfer_blocks(&t)
                        > gatecmd_flash::usb::target::DEFAULT_TRANSFER_BLOCKS
                    && board.maskrom.is_some()
                    && boot_file.is_some()
                    && !stop.raised()
                    && matches!(e, FlashError::Write { .. } | FlashError::Read { .. })
                    && stayed_on_the_bus(run.state, &board).await =>
            {
                let big = gatecmd_flash::BlockTarget::max_transfer_blocks(&t) as u64 * 512;
                run.done(Step::Write, t_write, format!("stopped: {e}"));
                drop(t);
                let t_rec = run.started(Step::Recover);
                let boot = boot_file.clone().ok_or((
                    Step::Recover,
                    FlashFailure::Lost("the loader was not kept".into()),
                ))?;
                target = recover(run, config, &board, boot, device_wait, waits).await?;
                if let Some(sha) = &sent_loader {
                    LoaderMemory::remember(
                        journal_dir,
                        &board.name,
                        sha,
                        Fact::MaxTransferBlocks(
                            gatecmd_flash::usb::target::DEFAULT_TRANSFER_BLOCKS as u64,
                        ),
                    );
                }
                run.done(
                Step::Recover,
                t_rec,
                format!(
                    "a {} transfer failed ({e}); power.maskrom ran, the loader was sent again, and the flash goes on at {} transfers{}",
                    gatecmd_flash::units::human_bin(big),
                    gatecmd_flash::units::human_bin(gatecmd_flash::usb::target::DEFAULT_TRANSFER_BLOCKS as u64 * 512),
                    if sent_loader.is_some() { "; remembered for this board with this loader's SHA-256" } else { "" }
                ),
            );
                img = i;
                recovered = true;
            }
            Ok((Err(e), _, _)) => {
                let in_verify = verify_started
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .is_some();
                let step = if in_verify { Step::Verify } else { Step::Write };
                match &e {
                    FlashError::Write { bytes_written, .. }
                    | FlashError::Cancelled { bytes_written, .. } => {
                        run.bytes_written = *bytes_written
                    }
                    _ => {}
                }
                return Err((step, cancel_as_stop(stop, step, e.into())));
            }
            Ok((Ok(r), target, i)) => break (r, target, t_write, verify_started, i),
        }
    };
    // The steps by the wall clock: the write from the engine's start (its journal opened)
    // to the verification's first report, the verification from there to the engine's end.
    let engine_end = Instant::now();
    let verify_at = verify_started
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .unwrap_or(engine_end);
    run.bytes_written = report.write.bytes_written;
    let w = &report.write;
    run.done_ms(
        Step::Write,
        verify_at.duration_since(t_write).as_millis() as u64,
        format!(
            "{} written, {} skipped (journal), at {:.1} MB/s",
            mib(w.bytes_written),
            mib(w.bytes_skipped),
            rate(w.bytes_written, w.secs)
        ),
    );
    let v = report.verify.clone().unwrap_or_default();
    let verify_ms = engine_end.duration_since(verify_at).as_millis() as u64;
    if v.limit_found_now
        && let (Some(sha), Some(lba)) = (&sent_loader, v.reads_unsound_from_lba)
    {
        LoaderMemory::remember(
            journal_dir,
            &board.name,
            sha,
            Fact::ReadsUnsoundFromLba(lba),
        );
    }
    run.done_ms(
        Step::Verify,
        verify_ms,
        verify_detail(&v, pair.is_some() && !pair_sent && board.maskrom.is_some()),
    );
    // 5b. Reads unsound past some LBA, and the board has a DDR + usbplug pair and can be
    // brought back to MaskROM: verified whole through the usbplug.
    let (report, target) = match &pair {
        Some(ready)
            if !pair_sent
                && v.unverified_bytes > 0
                && board.maskrom.is_some()
                && !stop.raised() =>
        {
            drop(target);
            let t = run.started(Step::Usbplug);
            maskrom_action(run.state, config, &board, waits)
                .await
                .map_err(|e| (Step::Usbplug, e))?;
            let job = super::usbplug::Reentry {
                port: device::engine_port(&board.usb),
                boot: ready.boot.clone(),
                device_wait,
                transfer_blocks,
                flag: stop.flag.clone(),
            };
            let (opts, events) = (opts.clone(), run.events.clone());
            let (second, target) = blocking(Step::Usbplug, move || {
                job.verify_whole(img, opts, progress_sink(events))
                    .map_err(|e| e.into())
            })
            .await
            .map_err(|(s, e)| (s, cancel_as_stop(stop, s, e)))?;
            let detail = super::usbplug::reentry_detail(&ready.boot, &report, &second);
            run.done(Step::Usbplug, t, detail);
            (super::usbplug::merged(report, second), target)
        }
        _ => (report, target),
    };
    let (w, v) = (&report.write, report.verify.clone().unwrap_or_default());
    run.bytes_written = w.bytes_written;
    let cursor = run.console.map(|c| c.bounds().1);
    run.console_cursor = cursor;
    let t = run.started(Step::Reset);
    let trigger = crate::boots::Trigger::action("flash_board", &run.client, "reset after write");
    let boot = run.state.boots.power_on(&board.name, trigger);
    blocking(Step::Reset, move || Ok(target.reset_and_boot()?)).await?;
    run.state
        .boards
        .set_power_state(&board.name, PowerState::On);
    run.done(Step::Reset, t, "reset to boot from flash".into());

    // 6. The console, if asked.
    let mut boot_log = None;
    let mut board_state = "reset".to_string();
    match (&wait_for, run.console) {
        (Some(re), Some(c)) => {
            let t = run.started(Step::AwaitConsole);
            let from = cursor.unwrap_or(0);
            let wait = Wait {
                deadline,
                cancel: waits,
            };
            let awaited = format!("/{}/ on the console after the reset", re.as_str());
            let prompt = watch(c, &wait, &awaited, || {
                let s = c.slice(from, usize::MAX);
                re.is_match(&String::from_utf8_lossy(&s.bytes))
                    .then_some(())
            });
            // A board back in MaskROM did not boot: no prompt will come, so the step ends
            // now instead of at the call's time limit.
            let seen = tokio::select! {
                seen = prompt => seen,
                () = device::maskrom_arrives(run.state, &board.usb) => {
                    return Err((
                        Step::AwaitConsole,
                        FlashFailure::BackInMaskrom {
                            board: board.name.clone(),
                            port: board.usb.to_string(),
                            secs: t.elapsed().as_secs(),
                            pattern: re.as_str().to_string(),
                        },
                    ));
                }
            };
            boot_log = Some(log_since(c, from));
            match seen {
                Ok(()) => {
                    board_state = "booted".into();
                    run.done(Step::AwaitConsole, t, format!("/{}/ seen", re.as_str()));
                }
                Err(TalkError::Timeout { last, .. }) => {
                    return Err((
                        Step::AwaitConsole,
                        if stop.timed_out.load(Ordering::Relaxed) {
                            FlashFailure::ConsoleTimeout {
                                pattern: re.as_str().to_string(),
                                secs: stop.secs,
                                last,
                            }
                        } else {
                            FlashFailure::ConsoleTimeout {
                                pattern: re.as_str().to_string(),
                                secs: t.elapsed().as_secs(),
                                last,
                            }
                        },
                    ));
                }
                Err(TalkError::Cancelled { .. }) => {
                    return Err((
                        Step::AwaitConsole,
                        stop.failure(
                            Step::AwaitConsole,
                            "the image was written, verified and the board reset".into(),
                        ),
                    ));
                }
                Err(_) => {
                    return Err((
                        Step::AwaitConsole,
                        FlashFailure::ConsoleGone {
                            board: board.name.clone(),
                            pattern: re.as_str().to_string(),
                        },
                    ));
                }
            }
        }
        _ => run.skipped(Step::AwaitConsole, "no wait_for"),
    }
    // Joined off the runtime's threads: on a slow host the hashes may still be running;
    // what the flash did not hide of them is a step of its own.
    let t = run.started(Step::HashFiles);
    let pending = image_hash.as_ref().map(FileHash::taken_before);
    let (image_sha, bmap_sha) = tokio::task::spawn_blocking(move || {
        (
            image_hash.and_then(FileHash::finish),
            bmap_hash.and_then(FileHash::finish),
        )
    })
    .await
    .unwrap_or((None, None));
    run.done(
        Step::HashFiles,
        t,
        if pending == Some(true) {
            "the image's SHA-256 was taken for the approval, before the flash".into()
        } else if pending.is_some() {
            "the image's SHA-256, taken beside the flash, finished".into()
        } else {
            "no image hash to wait for: the bmap's checked checksums name the bytes written".into()
        },
    );
    let bmap_facts = bmap_facts.map(|b| FileFacts {
        sha256: bmap_sha,
        ..b
    });
    let start_lba = report.start_lba;
    let logical_bytes = report.image.logical_size.unwrap_or(0);
    let boot = boot_summary(run.state, &board.name, boot, board_state == "booted").await;
    Ok(Flashed {
        boot,
        board: board.name.clone(),
        steps: std::mem::take(&mut run.steps),
        image: FileFacts {
            path: image_path,
            bytes: image_bytes,
            sha256: image_sha,
            compression: Some(name_of(&info.compression)),
            layout: Some(name_of(&info.layout)),
            logical_bytes: report.image.logical_size,
            mapped_bytes: report.image.mapped_bytes,
        },
        bmap: bmap_facts,
        loader: loader_facts,
        flash: flash_facts,
        written: Written {
            start_lba,
            end_lba: start_lba + logical_bytes.div_ceil(512),
            bytes_written: w.bytes_written,
            chunks_written: w.chunks_written,
            bytes_skipped: w.bytes_skipped,
            chunks_skipped: w.chunks_skipped,
            chunks_rewritten: w.chunks_rewritten,
            ranges: w
                .ranges
                .iter()
                .take(super::outcome::MAX_RANGES)
                .map(|&(a, b)| [a, b])
                .collect(),
            ranges_total: w.ranges.len(),
            chunk_bytes: chunk_size,
            transfer_bytes: report.transfer_size,
            write_ms: (w.secs * 1000.0) as u64,
            rate_mb_s: rate(w.bytes_written, w.secs),
        },
        verified: report.verify.is_some() && v.unverified_bytes == 0,
        verification: if report.verify.is_some() {
            v.verification().to_string()
        } else {
            "none".into()
        },
        verified_bytes: v.verified_bytes,
        unverified_bytes: v.unverified_bytes,
        reads_unsound_from_lba: v.reads_unsound_from_lba,
        verify_bytes: v.bytes,
        verify_ms,
        journal: report.journal.display().to_string(),
        console_cursor: cursor,
        boot_log,
        board_state,
        took_ms: t0.elapsed().as_millis() as u64,
    })
}

/// The verification step's line: what was read back, what it vouches for, and plainly
/// what it could not.
fn verify_detail(v: &gatecmd_flash::VerifyReport, pair_follows: bool) -> String {
    let read = format!("{} read back", mib(v.bytes));
    match v.verification() {
        "read_back" => format!("{read}, every chunk equal"),
        how => {
            let at = v
                .reads_unsound_from_lba
                .map(|l| format!("LBA 0x{l:x} ({})", mib(l * 512)))
                .unwrap_or_else(|| "an unknown LBA".into());
            let fill = v
                .fill
                .map(|b| {
                    format!(
                        " (they answer 0x{b:02X} in every byte{})",
                        if b == 0xcc {
                            ", as the stock RK3588 loader does"
                        } else {
                            ""
                        }
                    )
                })
                .unwrap_or_default();
            let how_found = if v.limit_found_now {
                "found now: a chunk read back wrong, and a probe (its complement written and read, then the chunk written and read) showed the reads do not follow the writes"
            } else {
                "known from an earlier flash of this board with this loader"
            };
            let next = if pair_follows {
                "the board's DDR blob + usbplug pair verifies them next (step usbplug)"
            } else {
                "a DDR blob + usbplug pair, whose reads are sound, verifies them: flash_board with loader: {ddr, usbplug} (rkbin's rk3588_ddr_….bin and rk3588_usbplug_v….bin, in flash.loaders), or the pair in the board's config (boards[].usbplug) with power.maskrom, which verifies whole after this loader"
            };
            format!(
                "{how}: {} verified by read-back, {} not verified: from {at} on, this loader's reads do not show what the flash holds{fill}, {how_found}. Those bytes were written (each write acknowledged by the loader) but are not verified; {next}",
                mib(v.verified_bytes),
                mib(v.unverified_bytes),
            )
        }
    }
}

/// After a failed transfer: whether the board is still at its port in Loader mode a
/// moment later (a stalled loader stays enumerated; a board powered off or unplugged
/// leaves, and the registry hears of it within [`USB_SETTLE`]).
async fn stayed_on_the_bus(state: &AppState, board: &BoardConfig) -> bool {
    let until = tokio::time::Instant::now() + USB_SETTLE;
    while tokio::time::Instant::now() < until {
        if device::mode_at(state, &board.usb) != Some(RockchipMode::Loader) {
            return false;
        }
        tokio::time::sleep(USB_POLL).await;
    }
    device::mode_at(state, &board.usb) == Some(RockchipMode::Loader)
}

/// A loader that stalled a large transfer, brought back: `power.maskrom` (the board off
/// the stalled loader and into MaskROM), the loader sent again, the Loader opened with the
/// default transfer size.
async fn recover(
    run: &mut Run<'_>,
    config: &Config,
    board: &BoardConfig,
    boot: Arc<BootFile>,
    device_wait: Duration,
    waits: &CancellationToken,
) -> StepResult<gatecmd_flash::LoaderTarget> {
    maskrom_action(run.state, config, board, waits)
        .await
        .map_err(|e| (Step::Recover, e))?;
    let port = device::engine_port(&board.usb);
    blocking(Step::Recover, move || {
        let usb =
            gatecmd_flash::RockusbBoard::wait(&port, gatecmd_flash::Mode::MaskRom, device_wait)?;
        let (usb, _) = usb.download_boot_and_wait(&boot, device_wait)?;
        Ok(usb
            .into_target()?
            .with_transfer_blocks(gatecmd_flash::usb::target::DEFAULT_TRANSFER_BLOCKS)?)
    })
    .await
}

fn events_done_await_loader(run: &mut Run<'_>, wait_ms: u64) {
    run.done_ms(
        Step::AwaitLoader,
        wait_ms,
        format!("Loader at port {}", run.board.usb),
    );
}

/// The engine's cancel, reported as the call's stop (cancel or time limit).
fn cancel_as_stop(stop: &Stop, step: Step, e: FlashFailure) -> FlashFailure {
    match e {
        FlashFailure::Engine(inner) if matches!(*inner, FlashError::Cancelled { .. }) => {
            stop.failure(step, inner.to_string())
        }
        other => other,
    }
}

fn rate(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        ((bytes as f64 / secs / 1e6) * 10.0).round() / 10.0
    } else {
        0.0
    }
}

fn name_of<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

fn file_facts(f: &OpenFile, sha256: Option<String>) -> FileFacts {
    FileFacts {
        path: f.path.display().to_string(),
        bytes: f.file.metadata().map(|m| m.len()).unwrap_or(0),
        sha256,
        compression: None,
        layout: None,
        logical_bytes: None,
        mapped_bytes: None,
    }
}

/// The console's output since `from` (the newest [`BOOT_LOG_BYTES`]), as text.
fn log_since(c: &Console, from: u64) -> String {
    let (_, end) = c.bounds();
    let at = from.max(end.saturating_sub(BOOT_LOG_BYTES as u64));
    let s = c.slice(at, BOOT_LOG_BYTES);
    gatecmd_core::output::clean(&s.bytes)
}

/// Runs the board's `power.maskrom` through the executor, as `boot_board` does.
async fn maskrom_action(
    state: &AppState,
    config: &Config,
    board: &BoardConfig,
    cancel: &CancellationToken,
) -> Result<(), FlashFailure> {
    let Some(action) = &board.maskrom else {
        // `plan` refused this already; kept for the type.
        return Err(FlashFailure::NoRockusb {
            board: board.name.clone(),
            port: board.usb.to_string(),
            secs: 0,
            shows: "nothing".into(),
        });
    };
    let spec = action_spec(config, action).map_err(|e| FlashFailure::PowerStart {
        argv: action.command.clone(),
        error: e.to_string(),
    })?;
    let run = run_power(
        state,
        &board.name,
        &spec,
        PowerState::On,
        cancel.clone(),
        Audited::Step(PowerVia::FlashBoard),
    )
    .await;
    run.into_result().map_err(|f| match f {
        PowerFailure::Failed {
            argv,
            exit_code,
            output,
        } => FlashFailure::PowerFailed {
            argv,
            exit_code,
            output,
        },
        PowerFailure::NotStarted { argv, error } => FlashFailure::PowerStart {
            argv,
            error: error.to_string(),
        },
    })
}
