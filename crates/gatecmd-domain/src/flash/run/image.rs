//! Phase 1, the image: read and checked before the board is touched. Each of its parsers
//! reads the flag at bounded intervals of work, and expands at most `flash.max_image_gib`.

use std::fs::File;

use super::context::{Run, StepResult, blocking};
use super::inventory::Inventory;
use super::progress::progress_sink;
use crate::flash::step::{Step, mib};
use gatecmd_flash::{Compression, Control, Image, ImageInfo, SizeLimit};

/// The image, opened and (where its format asks for it) checked.
pub(super) struct Checked {
    pub img: Image,
    pub info: ImageInfo,
}

/// The `check_image` step.
pub(super) async fn check(
    run: &mut Run<'_>,
    image: File,
    bmap: Option<File>,
    inventory: &mut Inventory,
) -> StepResult<Checked> {
    let t = run.started(Step::CheckImage);
    let limit = SizeLimit::new(run.config.flash.max_image_bytes(), "flash.max_image_gib");
    let (flag, events) = (run.stop.flag.clone(), run.events.clone());
    let (img, checked) = blocking(Step::CheckImage, move || {
        let mut sink = progress_sink(events);
        // Shared: the decoders read it too, between 256 KiB of input.
        let mut ctl = Control::with_flag(&mut sink, flag);
        let mut img = Image::open_with(image, bmap, &ctl)?;
        let checked = img.needs_check();
        if checked {
            img.check(&mut ctl, &limit)?;
        }
        Ok((img, checked))
    })
    .await
    .map_err(|(s, e)| (s, run.stop.as_stop(s, e)))?;
    let info = img.info().clone();
    // A raw image whose bmap gives every range a checksum was checked range by range
    // against it: the bmap's SHA-256 names the bytes written, and the image file (the
    // whole expansion, holes included) is not read a second time to hash it.
    let named_by_bmap = checked
        && info.compression == Compression::None
        && info
            .bmap
            .as_ref()
            .is_some_and(|b| b.ranges_without_checksum == 0);
    inventory.hash_image(named_by_bmap);
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
    Ok(Checked { img, info })
}

/// A unit enum's serde name (`"zstd"`, `"android_sparse"`).
pub(super) fn name_of<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}
