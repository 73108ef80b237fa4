//! `execute_command`'s answer: the command use case's report with what the tool adds (a
//! job, an approval, whether the device left, in words); a job stores the same answer
//! ([`Answer`]).

use std::time::Duration;

use rmcp::model::CallToolResult;

use crate::calls::answer::{refusal, structured, structured_error};
use crate::views::{DeviceLeft, mode_hint};
use gatecmd_core::refusal::Refusal;
use gatecmd_domain::usecases::command::{Answer, Finished, Left, Refused, Report};

use super::interface::ExecuteResult;
use super::render::render;

impl Answer for ExecuteResult {
    fn ended(run: Report, approved: Option<(&str, &str)>, left: Option<Left>, keep: bool) -> Json2 {
        let (job, approval) = approved
            .map(|(j, a)| (j.to_string(), a.to_string()))
            .unzip();
        let device_left = left.map(DeviceLeft::of);
        let left = device_left
            .as_ref()
            .and_then(|d| serde_json::to_value(d).ok());
        let mode_hint = mode_hint(&run);
        let answer = ExecuteResult {
            run,
            job,
            approval,
            device_left,
            mode_hint,
            ..ExecuteResult::default()
        };
        let answer = keep.then(|| answer.answer());
        (answer.and_then(|c| serde_json::to_value(&c).ok()), left)
    }

    fn refused(why: Refused) -> Refusal {
        super::rejected::refusal(why)
    }

    fn refusal(r: Refusal) -> Option<serde_json::Value> {
        serde_json::to_value(refusal(r)).ok()
    }
}

type Json2 = (Option<serde_json::Value>, Option<serde_json::Value>);

impl ExecuteResult {
    /// A foreground run's end.
    pub(super) fn finished(&mut self, f: Finished, grace: Duration) {
        self.run.finished(&f, grace);
        self.device_left = f.left.map(DeviceLeft::of);
        self.mode_hint = mode_hint(&self.run);
    }

    /// The answer: an error when the command did not exit 0 by itself.
    pub(super) fn answer(&self) -> CallToolResult {
        let text = render(self);
        if self.run.succeeded() {
            structured(self, text)
        } else {
            structured_error(self, text)
        }
    }
}
