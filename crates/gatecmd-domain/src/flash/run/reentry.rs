//! Phase 5b, the usbplug re-entry: a packed loader's reads were unsound past some LBA, and
//! the board has a DDR blob + usbplug pair and can be brought back to MaskROM: the pair
//! sent and the whole image verified through the usbplug (resumed from the journal).

use super::context::{Run, StepResult, blocking};
use super::loader::Loaded;
use super::maskrom::maskrom_action;
use super::progress::progress_sink;
use super::write::Engined;
use crate::flash::device;
use crate::flash::step::Step;
use crate::flash::usbplug::{self, Ready, Reentry};
use gatecmd_flash::{FlashReport, LoaderTarget};

/// Whether the re-entry runs: the pair is there and was not what wrote, some bytes are
/// unverified, and the board has a way back to MaskROM.
pub(super) fn wanted(run: &Run<'_>, pair: Option<&Ready>, loaded: &Loaded, e: &Engined) -> bool {
    let unverified = (e.report.verify.as_ref()).map_or(0, |v| v.unverified_bytes);
    pair.is_some()
        && !loaded.pair_sent
        && unverified > 0
        && run.board.maskrom.is_some()
        && !run.stop.raised()
}

/// The engine's report and target, through the pair when [`wanted`]: the `usbplug` step.
pub(super) async fn verify_whole(
    run: &mut Run<'_>,
    pair: Option<&Ready>,
    loaded: &Loaded,
    e: Engined,
) -> StepResult<(FlashReport, LoaderTarget)> {
    let ready = match pair {
        Some(ready) if wanted(run, pair, loaded, &e) => ready,
        _ => return Ok((e.report, e.target)),
    };
    let Engined {
        report,
        target,
        img,
        opts,
        ..
    } = e;
    drop(target);
    let t = run.started(Step::Usbplug);
    maskrom_action(run).await.map_err(|e| (Step::Usbplug, e))?;
    let job = Reentry {
        port: device::engine_port(&run.board.usb),
        boot: ready.boot.clone(),
        device_wait: run.device_wait,
        transfer_blocks: loaded.transfer_blocks(run.transfer_blocks),
        flag: run.stop.flag.clone(),
    };
    let events = run.events.clone();
    let (second, target) = blocking(Step::Usbplug, move || {
        job.verify_whole(img, opts, progress_sink(events))
            .map_err(|e| e.into())
    })
    .await
    .map_err(|(s, e)| (s, run.stop.as_stop(s, e)))?;
    let detail = usbplug::reentry_detail(&ready.boot, &report, &second);
    run.done(Step::Usbplug, t, detail);
    Ok((usbplug::merged(report, second), target))
}
