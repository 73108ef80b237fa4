//! The audit lines of `flash_board` (docs/AUDIT.md): a call refused before its job
//! started, and a flash that ended (flashed, failed or cancelled) with what was written
//! where and how long each step took. Plain data: the step names arrive as any
//! serialisable value (the flash module's `Step`), so the log imports no flash type.

use serde::Serialize;

/// One `flash_board` decision; serialised with `"event": "flash_board"`.
#[derive(Debug, Serialize)]
#[serde(tag = "event", rename = "flash_board")]
pub struct FlashRecord<'a, S: Serialize> {
    pub client: &'a str,
    pub board: &'a str,
    /// The image as the call named it (refused, failed) or as it resolved (flashed).
    pub image: &'a str,
    #[serde(flatten)]
    pub outcome: FlashOutcome<'a, S>,
}

/// One step and its duration.
#[derive(Debug, Serialize)]
pub struct StepMs<S: Serialize> {
    pub step: S,
    pub ms: u64,
}

/// What became of a flash.
#[derive(Debug, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum FlashOutcome<'a, S: Serialize> {
    /// Refused before its job started; nothing ran.
    Refused { reason: &'a str, message: &'a str },
    /// Written, verified (when asked) and booted.
    Flashed(Box<Flashed<'a, S>>),
    /// Ended by a failure.
    Failed(Ended<'a, S>),
    /// Ended by a cancel (or the call's time limit).
    Cancelled(Ended<'a, S>),
}

/// A flash that wrote its image.
#[derive(Debug, Serialize)]
pub struct Flashed<'a, S: Serialize> {
    pub job: &'a str,
    /// The approval request that said yes (`apr-N`; its `approval_*` lines say who and
    /// when), or null when no rule held the flash.
    pub approval: Option<&'a str>,
    pub image_sha256: Option<&'a str>,
    pub bmap: Option<&'a str>,
    pub loader: Option<&'a str>,
    pub loader_sha256: Option<&'a str>,
    pub ranges: &'a [[u64; 2]],
    pub ranges_total: usize,
    pub bytes_written: u64,
    pub bytes_skipped: u64,
    pub verified: bool,
    /// `read_back`, `partial` or `none` (docs/FLASHING.md).
    pub verification: &'a str,
    pub verified_bytes: u64,
    pub unverified_bytes: u64,
    pub bmap_sha256: Option<&'a str>,
    pub steps: Vec<StepMs<S>>,
    pub took_ms: u64,
    /// `booted` (wait_for seen) or `reset`.
    pub board_state: &'a str,
    /// The boot report's summary as the call ended (stages, faults, outcome), or null
    /// for a board without a console.
    pub boot: Option<serde_json::Value>,
}

/// A flash that stopped before the end: at which step, why, and where the board is.
#[derive(Debug, Serialize)]
pub struct Ended<'a, S: Serialize> {
    pub job: &'a str,
    /// As in [`Flashed`].
    pub approval: Option<&'a str>,
    pub step: S,
    pub message: String,
    pub bytes_written: u64,
    /// Always false: a flash that stopped verified nothing.
    pub verified: bool,
    pub board_state: &'a str,
    pub steps: Vec<StepMs<S>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn flash_lines_keep_their_shape() {
        let refused = serde_json::to_value(FlashRecord::<&str> {
            client: "ci",
            board: "b1",
            image: "a.img",
            outcome: FlashOutcome::Refused {
                reason: "not_allowed",
                message: "m",
            },
        })
        .unwrap();
        assert_eq!(
            refused,
            json!({"event": "flash_board", "client": "ci", "board": "b1", "image": "a.img",
                "outcome": "refused", "reason": "not_allowed", "message": "m"})
        );
        let steps = || {
            vec![StepMs {
                step: "write",
                ms: 7,
            }]
        };
        let flashed = serde_json::to_value(FlashRecord {
            client: "ci",
            board: "b1",
            image: "/srv/a.img",
            outcome: FlashOutcome::Flashed(Box::new(Flashed {
                job: "j1",
                approval: Some("apr-1"),
                image_sha256: Some("ab"),
                bmap: None,
                loader: Some("/srv/l.bin"),
                loader_sha256: None,
                ranges: &[[0, 8]],
                ranges_total: 1,
                bytes_written: 8,
                bytes_skipped: 0,
                verified: true,
                verification: "read_back",
                verified_bytes: 8,
                unverified_bytes: 0,
                bmap_sha256: None,
                steps: steps(),
                took_ms: 9,
                board_state: "booted",
                boot: None,
            })),
        })
        .unwrap();
        assert_eq!(
            flashed,
            json!({"event": "flash_board", "client": "ci", "job": "j1", "approval": "apr-1",
                "board": "b1", "outcome": "flashed", "image": "/srv/a.img", "image_sha256": "ab", "bmap": null,
                "loader": "/srv/l.bin", "loader_sha256": null, "ranges": [[0, 8]],
                "ranges_total": 1, "bytes_written": 8, "bytes_skipped": 0, "verified": true,
                "verification": "read_back", "verified_bytes": 8, "unverified_bytes": 0,
                "bmap_sha256": null, "steps": [{"step": "write", "ms": 7}], "took_ms": 9,
                "board_state": "booted", "boot": null})
        );
        let cancelled = serde_json::to_value(FlashRecord {
            client: "ci",
            board: "b1",
            image: "a.img",
            outcome: FlashOutcome::Cancelled(Ended {
                job: "j1",
                approval: None,
                step: "write",
                message: "cancelled".into(),
                bytes_written: 4,
                verified: false,
                board_state: "loader",
                steps: steps(),
            }),
        })
        .unwrap();
        assert_eq!(
            cancelled,
            json!({"event": "flash_board", "client": "ci", "job": "j1", "approval": null,
                "board": "b1", "outcome": "cancelled", "image": "a.img", "step": "write",
                "message": "cancelled", "bytes_written": 4, "verified": false,
                "board_state": "loader", "steps": [{"step": "write", "ms": 7}]})
        );
    }
}
