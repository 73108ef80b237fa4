//! One step run at the board's shell while the console is watched, and judged: the
//! command line through `usecases::shell_line` (as `board_run` runs it) under the step's and the plan's deadlines and the
//! job's cancel, every console append scanned by the monitor meanwhile (a fault stops the
//! step with Ctrl-C), then the verdict from the exit code, `expect` and what stopped it.

use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::format::Step;
use super::monitor::Monitor;
use super::verdict::{Fault, StepResult, Verdict};
use crate::config::LoginConfig;
use crate::console::Console;
use crate::console::session::{LoginAs, TalkError, Wait};
use crate::console::shell::Prompts;
use crate::usecases::shell_line::{self, Line};

/// Most raw bytes of one step's output read from the console (as `board_run`'s answer);
/// `expect` is matched against all of it.
pub const MAX_RAW_OUTPUT_BYTES: usize = 256 * 1024;

/// Why the rest of a plan is not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Halt {
    Cancelled,
    TimedOut,
    Fault,
    StepDidNotPass,
}

/// What one step needs of the board.
pub(super) struct Board<'a> {
    pub(super) console: &'a Console,
    pub(super) prompts: &'a Prompts,
    pub(super) login: Option<&'a LoginConfig>,
    pub(super) cancel: &'a CancellationToken,
    pub(super) deadline: Instant,
}

/// Runs one step while the monitor watches the console: a fault stops it (Ctrl-C). The
/// step's result, the faults seen while it ran, and why the plan stops, if it does.
pub(super) async fn one_step(
    b: &Board<'_>,
    monitor: &mut Monitor,
    s: &Step,
) -> (StepResult, Vec<Fault>, Option<Halt>) {
    let t0 = Instant::now();
    let stop = b.cancel.child_token();
    let step_deadline = t0 + Duration::from_secs(s.timeout_secs);
    let wait = Wait {
        deadline: step_deadline.min(b.deadline),
        cancel: &stop,
    };
    let mut faults = Vec::new();
    let outcome = {
        let fut = shell_line::run(Line {
            console: b.console,
            prompts: b.prompts,
            login: b.login.map(LoginAs::Configured),
            line: &s.run,
            cap: MAX_RAW_OUTPUT_BYTES,
            first: &wait,
            wait: &wait,
        });
        tokio::pin!(fut);
        let mut appended = b.console.subscribe();
        let mut watching = true;
        loop {
            tokio::select! {
                o = &mut fut => break o,
                changed = appended.changed(), if watching => {
                    if changed.is_err() {
                        watching = false;
                        continue;
                    }
                    faults.extend(monitor.scan(b.console, Some(&s.run)));
                    if !faults.is_empty() {
                        watching = false;
                        stop.cancel();
                    }
                }
            }
        }
    };
    faults.extend(monitor.scan(b.console, Some(&s.run)));
    let ms = t0.elapsed().as_millis() as u64;
    let mut r = StepResult {
        name: s.name.clone(),
        verdict: Verdict::Error,
        exit_code: None,
        output: String::new(),
        output_truncated: false,
        ms,
        message: None,
    };
    let cancelled = b.cancel.is_cancelled();
    let plan_out = b.deadline <= step_deadline && Instant::now() >= b.deadline;
    let halt = match outcome {
        Ok(shell_line::Typed { ran: Ok(ran), .. }) => {
            r.exit_code = ran.exit_code;
            r.output = ran.output;
            r.output_truncated = ran.truncated;
            (r.verdict, r.message) = judge(s, r.exit_code, &r.output);
            None
        }
        Ok(shell_line::Typed {
            ran: Err(stopped), ..
        }) => {
            r.output = stopped.partial.output.clone();
            r.output_truncated = stopped.partial.truncated;
            let back = if stopped.prompt_back {
                "the prompt is back"
            } else {
                "no prompt came back"
            };
            r.message = Some(match &stopped.why {
                _ if !faults.is_empty() => "stopped by a fault on the console".to_string(),
                _ if cancelled => format!("cancelled; Ctrl-C sent, {back}"),
                TalkError::Timeout { .. } if plan_out => {
                    format!("the plan's time limit ran out; Ctrl-C sent, {back}")
                }
                TalkError::Timeout { .. } => {
                    format!("timed out after {} s; Ctrl-C sent, {back}", s.timeout_secs)
                }
                why => format!("{why}; Ctrl-C sent, {back}"),
            });
            stop_reason(cancelled, plan_out)
        }
        Err(why) => {
            r.message = Some(format!("not run: {why}"));
            stop_reason(cancelled, plan_out)
        }
    };
    if let Some(f) = faults.first() {
        r.verdict = Verdict::Fail;
        r.message = Some(format!("{}: {}", f.kind, f.line));
    }
    (r, faults, halt)
}

fn stop_reason(cancelled: bool, plan_out: bool) -> Option<Halt> {
    if cancelled {
        Some(Halt::Cancelled)
    } else if plan_out {
        Some(Halt::TimedOut)
    } else {
        None
    }
}

/// A step that ran: `pass` when its exit code is the one expected and its output matches
/// `expect` (if given); else `fail`, saying which. No exit status (a shell without `$?`)
/// is an `error`.
fn judge(s: &Step, exit: Option<i32>, output: &str) -> (Verdict, Option<String>) {
    let Some(code) = exit else {
        return (
            Verdict::Error,
            Some("the shell printed no exit status".into()),
        );
    };
    if code != s.expect_exit {
        return (
            Verdict::Fail,
            Some(format!("exit code {code}, expected {}", s.expect_exit)),
        );
    }
    if let Some(re) = &s.expect
        && !re.is_match(output)
    {
        return (
            Verdict::Fail,
            Some(format!(
                "the output does not match /{}/",
                re.as_str().strip_prefix("(?m)").unwrap_or(re.as_str())
            )),
        );
    }
    (Verdict::Pass, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usecases::plan::Plan;

    fn step(json: serde_json::Value) -> Step {
        let plan = serde_json::json!({"name": "p", "steps": [json]});
        Plan::from_value(plan)
            .expect("parses")
            .check()
            .expect("checks")
            .steps[0]
            .clone()
    }

    #[test]
    fn a_step_passes_on_its_exit_code_and_its_expect() {
        let s =
            step(serde_json::json!({"name": "a", "run": "x", "expect": "^ok$", "expect_exit": 2}));
        assert_eq!(judge(&s, Some(2), "line\nok\n").0, Verdict::Pass);
        let (v, m) = judge(&s, Some(0), "ok\n");
        assert_eq!(v, Verdict::Fail);
        assert_eq!(m.as_deref(), Some("exit code 0, expected 2"));
        let (v, m) = judge(&s, Some(2), "not ok\n");
        assert_eq!(v, Verdict::Fail);
        assert_eq!(m.as_deref(), Some("the output does not match /^ok$/"));
        assert_eq!(judge(&s, None, "ok\n").0, Verdict::Error);
    }
}
