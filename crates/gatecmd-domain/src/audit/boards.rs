//! The audit lines of the board tools (docs/AUDIT.md): a power action with the command
//! lines it ran, one power step of a larger action (`PowerStepRecord`), a console write by
//! length and SHA-256 (never the bytes), `boot_board`'s steps, and a command at a board's
//! shell or U-Boot prompt. Plain data: the log imports no tool or board type, so actions
//! and states arrive as their wire names.

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

/// Which action a power step ran for (the runner is `crate::power_run`). Its wire
/// name is the tool a reader of the log knows that action by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PowerVia {
    /// Flashing a board: its `power.maskrom` action.
    FlashBoard,
    /// Driving a board to a state: its power and recovery actions.
    BootBoard,
    /// Returning a board to its `on_release` state when a lease on it ended.
    OnRelease,
}

/// A board returned (or not) to its `on_release` state when a lease on it ended:
/// `{"event": "on_release", board, client, lease_id, ended, action, outcome, exit_code?,
/// detail?}`. `outcome`: `ran`, `failed`, or `skipped` (the board was taken again first,
/// or its switch cannot run; `detail` says why).
#[derive(Debug, Serialize)]
#[serde(tag = "event", rename = "on_release")]
pub struct OnReleaseRecord<'a> {
    pub board: &'a str,
    /// The client whose lease ended.
    pub client: &'a str,
    pub lease_id: &'a str,
    /// How it ended: `released`, `expired`, `session_ended`, `force_released`.
    pub ended: &'a str,
    /// `off` or `maskrom`.
    pub action: &'a str,
    pub outcome: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// One power step of a larger action (a boot, a flash); serialised with
/// `"event": "power_board"` and `via`. A `power_board` call writes one [`PowerRecord`]
/// for the whole action instead.
#[derive(Debug, Serialize)]
#[serde(tag = "event", rename = "power_board")]
pub struct PowerStepRecord<'a> {
    pub via: PowerVia,
    pub board: &'a str,
    pub argv: &'a [String],
    /// `None` when the command did not start or was stopped by a signal.
    pub exit_code: Option<i32>,
}

/// A refusal's reason and message, as several records' `detail` carries it.
#[derive(Debug, Serialize)]
pub struct RefusedDetail<'a> {
    pub reason: &'a str,
    pub message: &'a str,
}

/// One `boot_board` event; serialised with `"event": "boot_board"`.
#[derive(Debug, Serialize)]
#[serde(tag = "event", rename = "boot_board")]
pub struct BootRecord<'a> {
    pub client: &'a str,
    pub board: &'a str,
    /// The state asked for (`recovery`, `maskrom`, `uboot`, `shell`, `off`).
    pub to: &'a str,
    #[serde(flatten)]
    pub outcome: BootOutcome<'a>,
}

/// What a `boot_board` line says: `outcome` and its `detail`.
#[derive(Debug, Serialize)]
#[serde(tag = "outcome", content = "detail", rename_all = "snake_case")]
pub enum BootOutcome<'a> {
    /// Refused before or while planning.
    Refused(RefusedDetail<'a>),
    /// One step of the plan ran.
    Step(BootStep<'a>),
    /// One step of the plan failed; the call ends.
    StepFailed(BootStep<'a>),
    /// The state asked for was reached.
    Reached { took_ms: u64, steps: &'a [String] },
}

/// One step of a boot plan: its name (`power_on`, `await_shell`…) and its error.
#[derive(Debug, Serialize)]
pub struct BootStep<'a> {
    pub step: &'a str,
    pub error: Option<&'a str>,
}

/// Which prompt a board command ran at; the wire name is the tool's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Prompt {
    /// The board's shell (`board_run`).
    BoardRun,
    /// U-Boot's prompt (`uboot_run`).
    UbootRun,
}

/// One command at a board's prompt, refused, ran or stopped; serialised with
/// `"event": "board_run"` or `"uboot_run"`.
#[derive(Debug, Serialize)]
pub struct BoardCommandRecord<'a> {
    pub event: Prompt,
    pub client: &'a str,
    pub board: &'a str,
    pub command: &'a str,
    #[serde(flatten)]
    pub outcome: CommandOutcome<'a>,
}

/// What a board command's line says: `outcome` and its `detail`.
#[derive(Debug, Serialize)]
#[serde(tag = "outcome", content = "detail", rename_all = "snake_case")]
pub enum CommandOutcome<'a> {
    Refused(RefusedDetail<'a>),
    /// It ran to its end.
    Ran(CommandRan<'a>),
    /// It was stopped (cancel, time limit): Ctrl-C was sent.
    Stopped(CommandRan<'a>),
}

/// What a board command did: its exit code and its output by length and SHA-256.
#[derive(Debug, Serialize)]
pub struct CommandRan<'a> {
    pub exit_code: Option<i32>,
    pub output_bytes: usize,
    pub output_sha256: &'a str,
    pub truncated: bool,
    pub logged_in: bool,
    pub duration_ms: u64,
    /// Why it was stopped, when it was.
    pub stopped: Option<String>,
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
        let step = serde_json::to_value(PowerStepRecord {
            via: PowerVia::FlashBoard,
            board: "b1",
            argv: &argv[0],
            exit_code: None,
        })
        .unwrap();
        assert_eq!(
            step,
            serde_json::json!({"event": "power_board", "via": "flash_board", "board": "b1",
                "argv": ["/bin/power", "on"], "exit_code": null})
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

    /// The lines `boot_board`, `board_run` and `uboot_run` wrote with `json!` before they had
    /// types, field for field.
    #[test]
    fn boot_and_command_lines_keep_their_shape() {
        let rec = |outcome| {
            serde_json::to_value(BootRecord {
                client: "ci",
                board: "b1",
                to: "shell",
                outcome,
            })
            .unwrap()
        };
        let base = serde_json::json!({"event": "boot_board", "client": "ci", "board": "b1",
            "to": "shell"});
        let with = |outcome: &str, detail: serde_json::Value| {
            let mut v = base.clone();
            v["outcome"] = outcome.into();
            v["detail"] = detail;
            v
        };
        assert_eq!(
            rec(BootOutcome::Refused(RefusedDetail {
                reason: "lease_required",
                message: "m"
            })),
            with(
                "refused",
                serde_json::json!({"reason": "lease_required", "message": "m"})
            )
        );
        assert_eq!(
            rec(BootOutcome::Step(BootStep {
                step: "power_on",
                error: None
            })),
            with(
                "step",
                serde_json::json!({"step": "power_on", "error": null})
            )
        );
        assert_eq!(
            rec(BootOutcome::StepFailed(BootStep {
                step: "await_shell",
                error: Some("e")
            })),
            with(
                "step_failed",
                serde_json::json!({"step": "await_shell", "error": "e"})
            )
        );
        let steps = vec!["power_on".to_string()];
        assert_eq!(
            rec(BootOutcome::Reached {
                took_ms: 5,
                steps: &steps
            }),
            with(
                "reached",
                serde_json::json!({"took_ms": 5, "steps": ["power_on"]})
            )
        );
        let ran = CommandRan {
            exit_code: Some(0),
            output_bytes: 3,
            output_sha256: "ab",
            truncated: false,
            logged_in: true,
            duration_ms: 9,
            stopped: None,
        };
        let v = serde_json::to_value(BoardCommandRecord {
            event: Prompt::UbootRun,
            client: "ci",
            board: "b1",
            command: "version",
            outcome: CommandOutcome::Stopped(ran),
        })
        .unwrap();
        assert_eq!(
            v,
            serde_json::json!({"event": "uboot_run", "client": "ci", "board": "b1",
                "command": "version", "outcome": "stopped", "detail": {"exit_code": 0,
                "output_bytes": 3, "output_sha256": "ab", "truncated": false,
                "logged_in": true, "duration_ms": 9, "stopped": null}})
        );
    }
}
