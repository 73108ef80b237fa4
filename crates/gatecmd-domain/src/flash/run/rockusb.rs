//! Phase 2, the board to a rockusb mode: `power.maskrom` if it is in none, then the
//! device awaited at the board's port and opened.

use std::time::{Duration, Instant};

use super::context::{Run, StepResult, blocking};
use super::maskrom::maskrom_action;
use crate::boards::boot::{Now, Target, plan};
use crate::flash::device;
use crate::flash::step::Step;
use gatecmd_devices::RockchipMode;
use gatecmd_flash::RockusbBoard;

/// The board's rockusb device, open, and the mode it was found in.
pub(super) struct Opened {
    pub usb: RockusbBoard,
    pub mode: RockchipMode,
}

/// The `maskrom` and `await_rockusb` steps.
pub(super) async fn open(run: &mut Run<'_>) -> StepResult<Opened> {
    let found = device::mode_at(run.state, &run.board.usb);
    match found {
        Some(m) => run.skipped(Step::Maskrom, &format!("already in {m} mode")),
        None => to_maskrom(run).await?,
    }
    // The rockusb step ends once the device is open (the open is part of it).
    let (mode, t, detail) = match found {
        Some(m) => (
            m,
            run.started(Step::AwaitRockusb),
            format!("already in {m} mode at port {}, opened", run.board.usb),
        ),
        None => {
            let (m, t) = await_rockusb(run).await?;
            (m, t, format!("{m} at port {}, opened", run.board.usb))
        }
    };
    let (port, engine_mode) = (
        device::engine_port(&run.board.usb),
        device::engine_mode(mode),
    );
    let usb = blocking(Step::AwaitRockusb, move || {
        Ok(RockusbBoard::wait(
            &port,
            engine_mode,
            Duration::from_secs(5),
        )?)
    })
    .await?;
    run.done(Step::AwaitRockusb, t, detail);
    Ok(Opened { usb, mode })
}

/// The `maskrom` step: the board's `power.maskrom`, as its boot plan allows.
async fn to_maskrom(run: &mut Run<'_>) -> StepResult<()> {
    let t = run.started(Step::Maskrom);
    plan(run.board, Target::Maskrom, Now::default()).map_err(|u| (Step::Maskrom, u.into()))?;
    maskrom_action(run).await.map_err(|e| (Step::Maskrom, e))?;
    run.stopped(Step::Maskrom, "the MaskROM action had run")?;
    run.done(Step::Maskrom, t, "power.maskrom ran".into());
    Ok(())
}

/// The rockusb device awaited at the board's port (the step started).
async fn await_rockusb(run: &mut Run<'_>) -> StepResult<(RockchipMode, Instant)> {
    let t = run.started(Step::AwaitRockusb);
    let m = device::await_rockusb(run.state, run.board, run.device_wait, &run.waits)
        .await
        .map_err(|e| match e {
            device::AwaitError::Stopped => (
                Step::AwaitRockusb,
                run.stop
                    .failure(Step::AwaitRockusb, "waiting for the rockusb device".into()),
            ),
            device::AwaitError::Failed(f) => (Step::AwaitRockusb, f),
        })?;
    Ok((m, t))
}
