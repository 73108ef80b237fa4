//! What a plan run found: each step's verdict with its exit code, output and time, the
//! faults seen on the console, and the plan's verdict. The words (`pass`, `fail`,
//! `error`, `skipped`; a fault's `kind`) are part of the interface (docs/TESTPLANS.md).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A step's or a plan's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The step's exit code and output were as expected; for the plan: every step passed
    /// and no fault was seen.
    Pass,
    /// A step's exit code or output was not as expected, or a fault was seen.
    Fail,
    /// A step could not run to its end (timeout, the console gone, cancelled).
    Error,
    /// Not run: an earlier step did not pass (and did not say `continue: true`).
    Skipped,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
            Verdict::Error => "error",
            Verdict::Skipped => "skipped",
        }
    }
}

/// One step's result.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct StepResult {
    pub name: String,
    pub verdict: Verdict,
    /// Null when the step did not end (timeout, cancel) or was skipped.
    pub exit_code: Option<i32>,
    /// What the command printed (no echo, no prompt), cleaned like board_run's output;
    /// at most 16384 bytes, and at most 262144 bytes over the whole plan.
    pub output: String,
    /// The output was cut (by those bounds or board_run's own).
    pub output_truncated: bool,
    pub ms: u64,
    /// Why the verdict is not `pass`, for a person (the expected exit code, the regex not
    /// matched, the fault line, the timeout).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl StepResult {
    /// A step not run.
    pub fn skipped(name: &str, why: &str) -> StepResult {
        StepResult {
            name: name.to_string(),
            verdict: Verdict::Skipped,
            exit_code: None,
            output: String::new(),
            output_truncated: false,
            ms: 0,
            message: Some(why.to_string()),
        }
    }
}

/// A console line that fails the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Fault {
    /// `kernel_panic`, `oops`, `bug`, `reset` (the boot report's fault words) or `fail_on`
    /// (one of the plan's patterns).
    pub kind: String,
    /// The line, cleaned (at most 1024 bytes).
    pub line: String,
    /// The step running when it was seen, if one was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
}

/// The plan's verdict from its steps and faults: `fail` when a fault was seen or a step
/// failed, else `error` when a step could not run, else `pass`.
pub fn plan_verdict(steps: &[StepResult], faults: &[Fault]) -> Verdict {
    if !faults.is_empty() || steps.iter().any(|s| s.verdict == Verdict::Fail) {
        Verdict::Fail
    } else if steps.iter().any(|s| s.verdict == Verdict::Error) {
        Verdict::Error
    } else {
        Verdict::Pass
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(v: Verdict) -> StepResult {
        StepResult {
            verdict: v,
            ..StepResult::skipped("s", "")
        }
    }

    #[test]
    fn a_fault_or_a_failed_step_fails_the_plan_before_an_error_does() {
        let fault = Fault {
            kind: "oops".into(),
            line: "Internal error: Oops".into(),
            step: None,
        };
        assert_eq!(plan_verdict(&[step(Verdict::Pass)], &[]), Verdict::Pass);
        assert_eq!(
            plan_verdict(&[step(Verdict::Pass)], std::slice::from_ref(&fault)),
            Verdict::Fail
        );
        assert_eq!(
            plan_verdict(&[step(Verdict::Error), step(Verdict::Skipped)], &[]),
            Verdict::Error
        );
        assert_eq!(
            plan_verdict(&[step(Verdict::Error), step(Verdict::Fail)], &[]),
            Verdict::Fail
        );
        assert_eq!(serde_json::to_value(Verdict::Skipped).unwrap(), "skipped");
    }
}
