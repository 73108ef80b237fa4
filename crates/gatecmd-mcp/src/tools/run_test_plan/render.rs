//! A plan run that ended, in words and as the answer its job keeps (`wait_job`'s `result`,
//! `tasks/get`, a waiting call's answer).

use gatecmd_domain::jobs::Job;
use gatecmd_domain::usecases::flash::Answer;
use gatecmd_domain::usecases::plan::{Report, Verdict};

use super::PlanResult;
use crate::calls::answer::{structured, structured_error};

/// The answer of a plan run that ended, as its job keeps it.
pub(super) fn render(_job: &Job, report: &Report) -> Answer {
    let text = words(report);
    let r = PlanResult {
        report: report.clone(),
    };
    let call = match report.verdict {
        Some(Verdict::Pass) => structured(&r, text.clone()),
        _ => structured_error(&r, text.clone()),
    };
    Answer {
        result: serde_json::to_value(&call).ok(),
        text,
    }
}

/// The run for a person: the verdict and counts, a line per step, the faults.
pub(super) fn words(r: &Report) -> String {
    let count = |v: Verdict| r.steps.iter().filter(|s| s.verdict == v).count();
    let mut t = format!(
        "plan {} on board {}: {} ({} passed, {} failed, {} errors, {} skipped) in {} ms, job {} ({})",
        r.plan,
        r.board,
        r.verdict.map_or("running", Verdict::as_str),
        count(Verdict::Pass),
        count(Verdict::Fail),
        count(Verdict::Error),
        count(Verdict::Skipped),
        r.ms,
        r.job,
        r.state.as_str()
    );
    for s in &r.steps {
        t.push_str(&format!(
            "\n  {:<7} {} ({} ms{}){}",
            s.verdict.as_str(),
            s.name,
            s.ms,
            s.exit_code
                .map(|c| format!(", exit {c}"))
                .unwrap_or_default(),
            s.message
                .as_deref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        ));
    }
    for f in &r.faults {
        t.push_str(&format!("\n  fault {}: {}", f.kind, f.line));
    }
    if !r.junit.is_empty() {
        t.push_str("\nthe JUnit XML report is in `junit`; each step's output in `steps[].output`");
    }
    t
}
