//! `flash_board`'s orchestration: from whatever state the board is in to the image
//! written, verified and booted. Async where it waits (the MaskROM action through the
//! executor, the device registry, the console), blocking threads where the engine talks
//! USB (`gatecmd-flash` is synchronous: libusb).
//!
//! [`phases`] is the whole run, one call per phase, each phase a file over the flash's
//! context ([`context::Run`]) and the typed result of the phase before it:
//!
//! - `image`: the image (and bmap) checked before the board is touched → `Checked`.
//! - `rockusb`: `power.maskrom` if needed, the rockusb device awaited and opened → `Opened`.
//! - `loader`: the loader (or the DDR blob + usbplug pair) sent in MaskROM → `Loaded`.
//! - `flash_info`: the Loader as a block target, the flash's size checked.
//! - `write`: the engine writes and verifies (`recover` brings a stalled loader back once;
//!   `verify` records what the read-back vouches for) → `Engined`.
//! - `reentry`: unsound reads verified whole through the usbplug.
//! - `boot`: the reset, the console awaited → `Booted`.
//! - `finish`: the files' SHA-256s joined (`inventory`), the result gathered.
//!
//! Beside them: `inputs` (what a flash is given), `stop` (the engine's flag and the
//! waits' token), `progress` (rate and ETA from the engine's thread), `maskrom` (the
//! board's `power.maskrom`), `bus` (the board on the bus after a failed transfer).
//!
//! Cancel, the call's time limit and the server's shutdown raise the engine's flag (and so
//! does dropping the flash's future), read between chunks and, in `check_image`, every few
//! thousand XML events of a bmap, sparse chunk headers or buffers of a decoder; the loader
//! download takes no flag on purpose (a mask ROM left with half a loader takes nothing else
//! until power-cycled), so a cancel that arrives then stops at the next step.

mod boot;
mod bus;
mod context;
mod finish;
mod flash_info;
mod image;
mod inputs;
mod inventory;
mod loader;
mod maskrom;
mod progress;
mod recover;
mod reentry;
mod rockusb;
mod stop;
mod verify;
mod write;

use regex::Regex;
use tokio_util::sync::CancellationToken;

use self::context::{Run, StepResult, blocking};
use self::finish::Found;
use self::inputs::Files;
use self::inventory::Inventory;
use self::loader::LoaderFiles;
use super::failure::Failed;
use super::outcome::Flashed;
use super::step::Step;
use crate::config::Config;
use crate::state::AppState;

pub use self::boot::BOOT_LOG_BYTES;
pub use self::inputs::{Events, Inputs, Known};
pub use super::input::OpenFile;

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
    let deadline = tokio::time::Instant::now() + timeout;
    let armed = stop::arm(cancel, timeout, deadline, state.executor.stopping());
    let mut run = Run {
        state,
        config,
        board: &board,
        console: console.as_ref(),
        events,
        client,
        stop: armed.stop.clone(),
        waits: armed.waits.clone(),
        deadline,
        journal_dir,
        transfer_blocks,
        device_wait,
        received,
        steps: Vec::new(),
        bytes_written: 0,
        console_cursor: None,
    };
    let files = Files {
        image,
        bmap,
        loader,
        usbplug,
        known,
    };
    let result = phases(&mut run, files, wait_for).await;
    armed.disarm();
    match result {
        Ok(f) => Ok(f),
        Err((step, failure)) => {
            bus::settle_after(state, &board, &failure).await;
            Err(run.fail(step, failure))
        }
    }
}

/// The phases, in order; each hands the next what it found.
async fn phases(run: &mut Run<'_>, files: Files, wait_for: Option<Regex>) -> StepResult<Flashed> {
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
        run.received.elapsed().as_millis() as u64,
        "policy, lease and files checked, job started".into(),
    );
    let mut inventory = Inventory::start(&image, bmap.as_ref(), loader.as_ref(), &known);
    let checked = image::check(run, image.file, bmap.map(|b| b.file), &mut inventory).await?;
    let opened = rockusb::open(run).await?;
    let files = LoaderFiles {
        loader,
        hash: inventory.loader_hash.take(),
        pair: pair.as_ref(),
    };
    let (usb, loaded) = loader::send(run, opened, files).await?;
    let logical = checked.info.logical_size;
    let (target, flash) = flash_info::open_target(run, usb, &loaded, logical).await?;
    let pair_follows = pair.is_some() && !loaded.pair_sent && run.board.maskrom.is_some();
    let engined = write::write_and_verify(run, target, checked.img, &loaded, pair_follows).await?;
    let (chunk_size, verify_ms) = (engined.opts.chunk_size, engined.verify_ms);
    let (report, target) = reentry::verify_whole(run, pair.as_ref(), &loaded, engined).await?;
    run.bytes_written = report.write.bytes_written;
    let booted = boot::reset_and_watch(run, target, wait_for.as_ref()).await?;
    let found = Found {
        info: checked.info,
        loader: loaded.facts,
        flash,
        report,
        chunk_size,
        verify_ms,
        booted,
    };
    Ok(finish::flashed(run, inventory, found).await)
}
