//! The `verify` step's record: what was read back, what it vouches for, and plainly what
//! it could not (a loader's reads unsound past some LBA, remembered for that loader).

use super::context::Run;
use super::loader::Loaded;
use crate::flash::loader_memory::{Fact, LoaderMemory};
use crate::flash::step::{Step, mib};
use gatecmd_flash::{FlashReport, VerifyReport};

/// Records the `verify` step; a limit found now is remembered for a loader this server
/// sent.
pub(super) fn verified(
    run: &mut Run<'_>,
    report: &FlashReport,
    verify_ms: u64,
    loaded: &Loaded,
    pair_follows: bool,
) {
    let v = report.verify.clone().unwrap_or_default();
    if v.limit_found_now
        && let (Some(sha), Some(lba)) = (&loaded.sent_sha, v.reads_unsound_from_lba)
    {
        LoaderMemory::remember(
            &run.journal_dir,
            &run.board.name,
            sha,
            Fact::ReadsUnsoundFromLba(lba),
        );
    }
    run.done_ms(Step::Verify, verify_ms, verify_detail(&v, pair_follows));
}

/// The verification step's line.
fn verify_detail(v: &VerifyReport, pair_follows: bool) -> String {
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
