//! The audit lines of a test plan run (`run_test_plan`, docs/TESTPLANS.md): its start,
//! each step's verdict, and the plan's verdict with the faults seen, every one carrying the
//! job id the run is (so a job's records can be collected by it), and a refused call.
//! Plain data: the log imports no tool or plan type.

use serde::Serialize;

/// One plan event; serialised with `"event": "test_plan_…"`.
#[derive(Debug, Serialize)]
#[serde(tag = "event")]
pub enum PlanRecord<'a> {
    #[serde(rename = "test_plan_refused")]
    Refused {
        client: &'a str,
        board: &'a str,
        reason: &'a str,
        message: &'a str,
    },
    #[serde(rename = "test_plan_started")]
    Started {
        client: &'a str,
        job: &'a str,
        board: &'a str,
        plan: &'a str,
        /// The plan's text as given, by SHA-256 (what was asked to run).
        plan_sha256: &'a str,
        steps: usize,
        /// The approval that let it run (`apr-N`), when a rule held it.
        #[serde(skip_serializing_if = "Option::is_none")]
        approval: Option<&'a str>,
    },
    #[serde(rename = "test_plan_step")]
    Step {
        client: &'a str,
        job: &'a str,
        board: &'a str,
        plan: &'a str,
        step: &'a str,
        /// The command line typed (none for a skipped step).
        run: &'a str,
        verdict: &'a str,
        exit_code: Option<i32>,
        output_bytes: usize,
        output_sha256: &'a str,
        ms: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<&'a str>,
    },
    #[serde(rename = "test_plan_ended")]
    Ended {
        client: &'a str,
        job: &'a str,
        board: &'a str,
        plan: &'a str,
        verdict: &'a str,
        passed: usize,
        failed: usize,
        errors: usize,
        skipped: usize,
        /// `kind: line` of each fault seen on the console.
        faults: Vec<String>,
        ms: u64,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_of_a_run_names_its_job() {
        let v = serde_json::to_value(PlanRecord::Step {
            client: "ci",
            job: "job-3",
            board: "b1",
            plan: "smoke",
            step: "kernel",
            run: "uname -r",
            verdict: "pass",
            exit_code: Some(0),
            output_bytes: 6,
            output_sha256: "ab",
            ms: 12,
            message: None,
        })
        .unwrap();
        assert_eq!(
            v,
            serde_json::json!({"event": "test_plan_step", "client": "ci", "job": "job-3",
                "board": "b1", "plan": "smoke", "step": "kernel", "run": "uname -r",
                "verdict": "pass", "exit_code": 0, "output_bytes": 6, "output_sha256": "ab",
                "ms": 12})
        );
    }
}
