//! Phase 4, the flash's size: the Loader opened as a block target (at the transfer size
//! the call asked, or the smaller one a loader this server sent was found to take), and an
//! image larger than the flash refused before a byte is written.

use super::context::{Run, StepResult, blocking};
use super::loader::Loaded;
use crate::flash::outcome::FlashFacts;
use crate::flash::step::{Step, mib};
use gatecmd_flash::{FlashError, LoaderTarget, RockusbBoard};

/// The `flash_info` step.
pub(super) async fn open_target(
    run: &mut Run<'_>,
    usb: RockusbBoard,
    loaded: &Loaded,
    logical: Option<u64>,
) -> StepResult<(LoaderTarget, FlashFacts)> {
    let transfer_blocks = loaded.transfer_blocks(run.transfer_blocks);
    run.stopped(Step::FlashInfo, "nothing was written")?;
    let t = run.started(Step::FlashInfo);
    let (target, facts) = blocking(Step::FlashInfo, move || {
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
        format!("{} of {}", mib(facts.bytes), facts.flash_id),
    );
    Ok((target, facts))
}
