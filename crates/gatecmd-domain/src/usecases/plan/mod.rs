//! Running a test plan on a leased board (`run_test_plan`, docs/TESTPLANS.md): the plan
//! parsed and checked, the board taken as `board_run` takes it (held for an approval when
//! a rule holds for `board_run` on it), then each step run at the board's shell as a job,
//! the console watched for faults meanwhile, and the verdicts audited under the job's id
//! and reported with a JUnit XML rendering. The surface words the refusals and renders
//! the answer.
//!
//! # Layout
//!
//! - `format`: the plan as written (YAML or JSON) and as checked (bounds, regexes).
//! - `prepare`: the call checked and the board taken (with the approval, if a rule holds).
//! - `monitor`: the console's lines matched against the boot report's faults and `fail_on`.
//! - `watched`: one step run while the console is watched (its command line through
//!   `usecases::shell_line`, as `board_run` runs one), and judged.
//! - `verdict`: the verdict words, a step's result, a fault, the plan's verdict.
//! - `junit`: the JUnit XML report.
//! - `run`: the job: started, each step run and audited, ended with the surface's answer.

mod format;
mod junit;
mod monitor;
mod prepare;
mod run;
mod verdict;
mod watched;

pub use format::{
    Checked, DEFAULT_STEP_SECS, MAX_FAIL_ON, MAX_NAME_CHARS, MAX_PLAN_BYTES, MAX_RUN_BYTES,
    MAX_STEP_SECS, MAX_STEPS, Plan, PlanError, PlanStep,
};
pub use junit::junit;
pub use prepare::{
    Ask, DEFAULT_PLAN_SECS, MAX_PLAN_SECS, Prepared, Refused, Source, audit_refused, prepare,
};
pub use run::{MAX_FAULTS, MAX_PLAN_OUTPUT_BYTES, MAX_STEP_OUTPUT_BYTES, Report, launch};
pub use verdict::{Fault, StepResult, Verdict, plan_verdict};
pub use watched::MAX_RAW_OUTPUT_BYTES;
