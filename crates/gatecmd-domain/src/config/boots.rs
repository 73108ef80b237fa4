//! The `boots:` section: how many boot reports each board keeps, how much of each boot's
//! console, and when a boot that printed nothing is `silent` (docs/BOARDS.md "Boot
//! reports"). A board's own patterns are `boards[].console.boot_patterns`.

use serde::Deserialize;

use super::declare::{at_least_one, settings};

/// Most boots kept per board.
pub const MAX_KEEP: usize = 64;
/// Bounds of one boot's transcript.
pub const MIN_TRANSCRIPT_BYTES: usize = 4 * 1024;
pub const MAX_TRANSCRIPT_BYTES: usize = 16 * 1024 * 1024;

fn keep_bound(n: &usize) -> Option<String> {
    (*n == 0 || *n > MAX_KEEP).then(|| format!("must be 1 to {MAX_KEEP}"))
}

fn transcript_bound(n: &usize) -> Option<String> {
    (!(MIN_TRANSCRIPT_BYTES..=MAX_TRANSCRIPT_BYTES).contains(n)).then(|| {
        format!("must be {MIN_TRANSCRIPT_BYTES} (4 KiB) to {MAX_TRANSCRIPT_BYTES} (16 MiB)")
    })
}

settings! {
    /// `boots:` as written and as used (plain numbers; a reload applies them to the next
    /// boot, and trims what is kept to a smaller `keep` at once).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    pub struct BootSettings {
        keep: usize {
            default: 16,
            check: keep_bound,
            docs: "boot reports kept per board with a console (1 to 64); a new boot past it \
                drops the oldest (`boot_report` then answers `not_found` for it).",
        },
        transcript_bytes: usize {
            default: 256 * 1024,
            note: "(256 KiB)",
            check: transcript_bound,
            docs: "console bytes kept per boot (4 KiB to 16 MiB): the first half and the newest \
                half; what falls between is counted in `transcript_dropped_bytes`. A board \
                holds at most `keep` × this.",
        },
        silent_secs: u64 {
            default: 30,
            check: at_least_one,
            docs: "a boot whose console printed nothing this long after its power-on is \
                `silent` (it becomes `booting` again if output comes later).",
        },
    }
}
