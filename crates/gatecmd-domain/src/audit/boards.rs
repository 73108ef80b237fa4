//! The audit lines of the board tools (docs/AUDIT.md): a power action with the command
//! lines it ran, and a console write by length and SHA-256 (never the bytes). Plain data:
//! the log imports no tool or board type, so actions and states arrive as their wire names.

use serde::Serialize;

/// One `power_board` decision; serialised with `"event": "power_board"`.
#[derive(Debug, Serialize)]
#[serde(tag = "event", rename = "power_board")]
pub struct PowerRecord<'a> {
    pub client: &'a str,
    pub board: &'a str,
    /// `on`, `off` or `cycle`.
    pub action: &'a str,
    #[serde(flatten)]
    pub outcome: PowerOutcome<'a>,
}

/// What became of a power action.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum PowerOutcome<'a> {
    /// It ran: the command lines, the last exit code, the state the board is in now.
    Ran {
        argv: &'a [Vec<String>],
        exit_code: Option<i32>,
        /// `on`, `off` or `unknown`.
        state: &'a str,
        ok: bool,
        duration_ms: u64,
    },
    /// Refused before anything ran.
    Refused {
        /// Always `refused`.
        verdict: &'static str,
        reason: &'a str,
        message: &'a str,
    },
}

impl<'a> PowerOutcome<'a> {
    pub fn refused(reason: &'a str, message: &'a str) -> Self {
        PowerOutcome::Refused {
            verdict: "refused",
            reason,
            message,
        }
    }
}

/// One `console_write`; serialised with `"event": "console_write"`.
#[derive(Debug, Serialize)]
#[serde(tag = "event", rename = "console_write")]
pub struct ConsoleWriteRecord<'a> {
    pub client: &'a str,
    pub board: &'a str,
    pub bytes: usize,
    pub sha256: &'a str,
    /// `written` or `refused`.
    pub outcome: &'a str,
    /// The refusal reason (`None` when written).
    pub detail: Option<&'a str>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_carry_their_event_and_the_fields_of_their_outcome() {
        let argv = vec![vec!["/bin/power".to_string(), "on".to_string()]];
        let ran = serde_json::to_value(PowerRecord {
            client: "ci",
            board: "b1",
            action: "on",
            outcome: PowerOutcome::Ran {
                argv: &argv,
                exit_code: Some(0),
                state: "on",
                ok: true,
                duration_ms: 7,
            },
        })
        .unwrap();
        assert_eq!(
            ran,
            serde_json::json!({"event": "power_board", "client": "ci", "board": "b1",
                "action": "on", "argv": [["/bin/power", "on"]], "exit_code": 0, "state": "on",
                "ok": true, "duration_ms": 7})
        );
        let refused = serde_json::to_value(PowerRecord {
            client: "ci",
            board: "b1",
            action: "cycle",
            outcome: PowerOutcome::refused("lease_required", "lock it first"),
        })
        .unwrap();
        assert_eq!(
            refused,
            serde_json::json!({"event": "power_board", "client": "ci", "board": "b1",
                "action": "cycle", "verdict": "refused", "reason": "lease_required",
                "message": "lock it first"})
        );
        let write = serde_json::to_value(ConsoleWriteRecord {
            client: "ci",
            board: "b1",
            bytes: 3,
            sha256: "ab",
            outcome: "refused",
            detail: None,
        })
        .unwrap();
        assert_eq!(
            write,
            serde_json::json!({"event": "console_write", "client": "ci", "board": "b1",
                "bytes": 3, "sha256": "ab", "outcome": "refused", "detail": null})
        );
    }
}
