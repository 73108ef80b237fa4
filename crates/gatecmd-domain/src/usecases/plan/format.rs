//! A test plan as written (`{name, steps: [{name, run, expect?, expect_exit?, timeout_secs?,
//! continue?}], fail_on?: [regex]}`, YAML or JSON: YAML reads both) and as checked: every
//! bound held, every command line typeable, every regex compiled with the same size
//! limits as a board's boot patterns (docs/TESTPLANS.md).

use regex::Regex;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::config::boot_patterns::compile;
use crate::console::shell::command_problem;

/// Longest plan text (YAML or JSON, inline or `plan_file`).
pub const MAX_PLAN_BYTES: usize = 256 * 1024;
/// Most steps in a plan.
pub const MAX_STEPS: usize = 200;
/// Most `fail_on` patterns.
pub const MAX_FAIL_ON: usize = 32;
/// Longest plan or step name, in characters.
pub const MAX_NAME_CHARS: usize = 128;
/// Longest command line of a step (as `board_run`'s).
pub const MAX_RUN_BYTES: usize = 4000;
/// A step's default and longest `timeout_secs`.
pub const DEFAULT_STEP_SECS: u64 = 30;
pub const MAX_STEP_SECS: u64 = 1800;

/// A plan as written.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// The plan's name (the JUnit testsuite's).
    pub name: String,
    /// The steps, run in order at the board's shell.
    pub steps: Vec<PlanStep>,
    /// Regexes: a console line matching one while the plan runs fails the plan.
    #[serde(default)]
    pub fail_on: Vec<String>,
}

/// One step as written.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanStep {
    /// The step's name (the JUnit testcase's).
    pub name: String,
    /// One command line run at the board's shell, as board_run runs it.
    pub run: String,
    /// A regex the step's output must match (searched, not anchored; `^` and `$` match at
    /// each line's start and end).
    #[serde(default)]
    pub expect: Option<String>,
    /// The exit code that passes (default 0).
    #[serde(default)]
    pub expect_exit: Option<i32>,
    /// Longest run of this step in seconds (default 30, at most 1800); then Ctrl-C.
    #[serde(default)]
    pub timeout_secs: Option<u64>,
    /// Run the next steps even when this one does not pass (default: they are skipped).
    #[serde(default, rename = "continue")]
    pub keep_going: bool,
}

/// Why a plan cannot run; nothing was typed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("the plan is {bytes} bytes; at most {MAX_PLAN_BYTES}")]
    TooLong { bytes: usize },
    #[error("the plan does not parse as YAML or JSON: {why}")]
    Syntax { why: String },
    #[error("the plan has no steps; give steps: [{{name, run}}, …]")]
    NoSteps,
    #[error("the plan has {count} steps; at most {MAX_STEPS}")]
    TooManySteps { count: usize },
    #[error("the plan has {count} fail_on patterns; at most {MAX_FAIL_ON}")]
    TooManyPatterns { count: usize },
    #[error("{what}: the name must be 1 to {MAX_NAME_CHARS} printable characters")]
    BadName { what: String },
    #[error("{what}: two steps are named {name:?}; step names must be unique")]
    DuplicateName { what: String, name: String },
    #[error("{what}: run: {why}")]
    BadRun { what: String, why: String },
    #[error("{what}: the regex {pattern:?} does not compile: {why}")]
    BadRegex {
        what: String,
        pattern: String,
        why: String,
    },
    #[error("{what}: timeout_secs must be 1 to {MAX_STEP_SECS}; {given} was given")]
    BadTimeout { what: String, given: u64 },
}

/// A step checked: its regex compiled, its time limit set.
#[derive(Debug, Clone)]
pub struct Step {
    pub name: String,
    pub run: String,
    pub expect: Option<Regex>,
    pub expect_exit: i32,
    pub timeout_secs: u64,
    pub keep_going: bool,
}

/// A plan checked.
#[derive(Debug, Clone)]
pub struct Checked {
    pub name: String,
    pub steps: Vec<Step>,
    pub fail_on: Vec<Regex>,
}

impl Plan {
    /// A plan from its text (YAML or JSON).
    pub fn parse(text: &str) -> Result<Plan, PlanError> {
        if text.len() > MAX_PLAN_BYTES {
            return Err(PlanError::TooLong { bytes: text.len() });
        }
        let options = serde_saphyr::options! { with_snippet: false };
        serde_saphyr::from_str_with_options(text, options).map_err(|e| PlanError::Syntax {
            why: e
                .render_with_formatter(&serde_saphyr::UserMessageFormatter)
                .chars()
                .take(400)
                .collect(),
        })
    }

    /// A plan given as a JSON value: an object, or a string holding YAML or JSON.
    pub fn from_value(v: serde_json::Value) -> Result<Plan, PlanError> {
        match v {
            serde_json::Value::String(s) => Plan::parse(&s),
            other => {
                let bytes = other.to_string().len();
                if bytes > MAX_PLAN_BYTES {
                    return Err(PlanError::TooLong { bytes });
                }
                serde_json::from_value(other).map_err(|e| PlanError::Syntax { why: e.to_string() })
            }
        }
    }

    /// Checks every bound and compiles every regex.
    pub fn check(&self) -> Result<Checked, PlanError> {
        name_ok(&self.name, "the plan")?;
        if self.steps.is_empty() {
            return Err(PlanError::NoSteps);
        }
        if self.steps.len() > MAX_STEPS {
            return Err(PlanError::TooManySteps {
                count: self.steps.len(),
            });
        }
        if self.fail_on.len() > MAX_FAIL_ON {
            return Err(PlanError::TooManyPatterns {
                count: self.fail_on.len(),
            });
        }
        let fail_on = (self.fail_on.iter().enumerate())
            .map(|(i, p)| regex(p, &format!("fail_on[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        let mut steps: Vec<Step> = Vec::with_capacity(self.steps.len());
        for (i, s) in self.steps.iter().enumerate() {
            let what = format!("steps[{i}]");
            name_ok(&s.name, &what)?;
            if steps.iter().any(|o| o.name == s.name) {
                return Err(PlanError::DuplicateName {
                    what,
                    name: s.name.clone(),
                });
            }
            if let Some(why) = command_problem(&s.run, MAX_RUN_BYTES) {
                return Err(PlanError::BadRun { what, why });
            }
            let secs = s.timeout_secs.unwrap_or(DEFAULT_STEP_SECS);
            if secs == 0 || secs > MAX_STEP_SECS {
                return Err(PlanError::BadTimeout { what, given: secs });
            }
            let expect = s
                .expect
                .as_deref()
                // Multi-line: `^` and `$` match at each line of the output.
                .map(|p| regex(&format!("(?m){p}"), &format!("{what}.expect")))
                .transpose()?;
            steps.push(Step {
                name: s.name.clone(),
                run: s.run.clone(),
                expect,
                expect_exit: s.expect_exit.unwrap_or(0),
                timeout_secs: secs,
                keep_going: s.keep_going,
            });
        }
        Ok(Checked {
            name: self.name.clone(),
            steps,
            fail_on,
        })
    }
}

fn name_ok(name: &str, what: &str) -> Result<(), PlanError> {
    let n = name.chars().count();
    if n == 0 || n > MAX_NAME_CHARS || name.chars().any(char::is_control) || name.trim().is_empty()
    {
        return Err(PlanError::BadName {
            what: what.to_string(),
        });
    }
    Ok(())
}

fn regex(pattern: &str, what: &str) -> Result<Regex, PlanError> {
    compile(pattern).map_err(|why| PlanError::BadRegex {
        what: what.to_string(),
        pattern: pattern.chars().take(80).collect(),
        why,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_and_json_give_the_same_plan() {
        let yaml = "name: smoke\nsteps:\n  - name: kernel\n    run: uname -r\n    expect: '^6\\.'\n  - {name: net, run: ip link, expect_exit: 0, timeout_secs: 5, continue: true}\nfail_on: ['segfault']\n";
        let json = r#"{"name":"smoke","steps":[{"name":"kernel","run":"uname -r","expect":"^6\\."},{"name":"net","run":"ip link","expect_exit":0,"timeout_secs":5,"continue":true}],"fail_on":["segfault"]}"#;
        for text in [yaml, json] {
            let p = Plan::parse(text).expect(text).check().expect("checks");
            assert_eq!(p.steps.len(), 2);
            assert!(p.steps[1].keep_going && !p.steps[0].keep_going);
            assert_eq!(p.steps[1].timeout_secs, 5);
            assert_eq!(p.steps[0].timeout_secs, DEFAULT_STEP_SECS);
            assert!(
                p.steps[0]
                    .expect
                    .as_ref()
                    .is_some_and(|r| r.is_match("6.1.0\n"))
            );
            assert_eq!(p.fail_on.len(), 1);
        }
        let v = serde_json::json!({"name": "x", "steps": [{"name": "a", "run": "true"}]});
        assert!(Plan::from_value(v).expect("object").check().is_ok());
        let v = serde_json::Value::String(yaml.into());
        assert!(Plan::from_value(v).expect("string").check().is_ok());
    }

    #[test]
    fn every_bound_is_a_typed_error() {
        let plan = |steps: serde_json::Value| {
            Plan::from_value(serde_json::json!({"name": "p", "steps": steps}))
                .and_then(|p| p.check().map(|_| ()))
        };
        assert_eq!(plan(serde_json::json!([])), Err(PlanError::NoSteps));
        assert!(matches!(
            plan(serde_json::json!([{"name": "a", "run": "ls\nreboot"}])),
            Err(PlanError::BadRun { .. })
        ));
        assert!(matches!(
            plan(serde_json::json!([{"name": "a", "run": "ls", "expect": "("}])),
            Err(PlanError::BadRegex { .. })
        ));
        assert!(matches!(
            plan(serde_json::json!([{"name": "a", "run": "ls", "timeout_secs": 0}])),
            Err(PlanError::BadTimeout { .. })
        ));
        assert!(matches!(
            plan(serde_json::json!([{"name": "a", "run": "ls"}, {"name": "a", "run": "ls"}])),
            Err(PlanError::DuplicateName { .. })
        ));
        assert!(matches!(
            plan(serde_json::json!([{"name": "a", "run": "ls", "bogus": 1}])),
            Err(PlanError::Syntax { .. })
        ));
        let many: Vec<_> = (0..=MAX_STEPS)
            .map(|i| serde_json::json!({"name": format!("s{i}"), "run": "true"}))
            .collect();
        assert!(matches!(
            plan(serde_json::Value::Array(many)),
            Err(PlanError::TooManySteps { .. })
        ));
        assert!(matches!(
            Plan::parse(&"#".repeat(MAX_PLAN_BYTES + 1)),
            Err(PlanError::TooLong { .. })
        ));
        assert!(matches!(
            Plan::parse("name: [unclosed"),
            Err(PlanError::Syntax { .. })
        ));
    }
}
