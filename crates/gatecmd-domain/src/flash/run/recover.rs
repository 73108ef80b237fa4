//! A loader that stalled or failed a large transfer, brought back once: `power.maskrom`
//! (the board off the stalled loader and into MaskROM), the loader sent again, the Loader
//! opened with the default transfer size, and that size remembered for this board with
//! this loader's SHA-256. A board that left the bus (power cut, unplug) did not stall:
//! that is a failure, resumed by the next call.

use std::sync::Arc;
use std::time::Instant;

use super::bus::stayed_on_the_bus;
use super::context::{Run, StepResult, blocking};
use super::loader::Loaded;
use super::maskrom::maskrom_action;
use crate::flash::device;
use crate::flash::failure::FlashFailure;
use crate::flash::loader_memory::{Fact, LoaderMemory};
use crate::flash::step::Step;
use gatecmd_flash::usb::target::DEFAULT_TRANSFER_BLOCKS;
use gatecmd_flash::{BlockTarget, BootFile, FlashError, LoaderTarget, Mode, RockusbBoard};

/// Whether the failed attempt is a stall a recovery brings back.
pub(super) async fn worth_it(
    run: &Run<'_>,
    target: &LoaderTarget,
    e: &FlashError,
    loaded: &Loaded,
) -> bool {
    BlockTarget::max_transfer_blocks(target) > DEFAULT_TRANSFER_BLOCKS
        && run.board.maskrom.is_some()
        && loaded.boot.is_some()
        && !run.stop.raised()
        && matches!(e, FlashError::Write { .. } | FlashError::Read { .. })
        && stayed_on_the_bus(run.state, run.board).await
}

/// The `recover` step (the `write` step closed as stopped): the board's Loader again, at
/// the default transfer size.
pub(super) async fn recover(
    run: &mut Run<'_>,
    stalled: LoaderTarget,
    e: FlashError,
    t_write: Instant,
    loaded: &Loaded,
) -> StepResult<LoaderTarget> {
    let big = BlockTarget::max_transfer_blocks(&stalled) as u64 * 512;
    run.done(Step::Write, t_write, format!("stopped: {e}"));
    drop(stalled);
    let t_rec = run.started(Step::Recover);
    let boot = loaded.boot.clone().ok_or((
        Step::Recover,
        FlashFailure::Lost("the loader was not kept".into()),
    ))?;
    let target = reopen(run, boot).await?;
    if let Some(sha) = &loaded.sent_sha {
        LoaderMemory::remember(
            &run.journal_dir,
            &run.board.name,
            sha,
            Fact::MaxTransferBlocks(DEFAULT_TRANSFER_BLOCKS as u64),
        );
    }
    run.done(
        Step::Recover,
        t_rec,
        format!(
            "a {} transfer failed ({e}); power.maskrom ran, the loader was sent again, and the flash goes on at {} transfers{}",
            gatecmd_flash::units::human_bin(big),
            gatecmd_flash::units::human_bin(DEFAULT_TRANSFER_BLOCKS as u64 * 512),
            if loaded.sent_sha.is_some() {
                "; remembered for this board with this loader's SHA-256"
            } else {
                ""
            }
        ),
    );
    Ok(target)
}

/// `power.maskrom`, the loader sent again, the Loader opened at the default size.
async fn reopen(run: &Run<'_>, boot: Arc<BootFile>) -> StepResult<LoaderTarget> {
    maskrom_action(run).await.map_err(|e| (Step::Recover, e))?;
    let (port, wait) = (device::engine_port(&run.board.usb), run.device_wait);
    blocking(Step::Recover, move || {
        let usb = RockusbBoard::wait(&port, Mode::MaskRom, wait)?;
        let (usb, _) = usb.download_boot_and_wait(&boot, wait)?;
        Ok(usb
            .into_target()?
            .with_transfer_blocks(DEFAULT_TRANSFER_BLOCKS)?)
    })
    .await
}
