//! Jobs of another host: a job a peer runs for this host's agent (a remote `flash_board`)
//! is named `HOST/JOB` here (`bench-2/job-7`), in the answer's `job` (and its `result`'s)
//! and its text, so that `wait_job` and `cancel_job` given it go to that host (`forward`).
//! `list_jobs` lists this host's jobs only.

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::Value;

use super::names::{qualify, remote};

/// `r` with the job it names made `HOST/JOB` (structured content and text).
pub fn qualified(mut r: CallToolResult, host: &str) -> CallToolResult {
    let Some(s) = r.structured_content.as_mut() else {
        return r;
    };
    let Some(id) = s.get("job").and_then(Value::as_str).map(str::to_string) else {
        return r;
    };
    if remote(&id).is_some() {
        return r;
    }
    let named = qualify(host, &id);
    s["job"] = named.clone().into();
    if let Some(inner) = s.get_mut("result").and_then(Value::as_object_mut)
        && inner.get("job").and_then(Value::as_str) == Some(id.as_str())
    {
        inner.insert("job".into(), named.clone().into());
    }
    for block in &mut r.content {
        if let ContentBlock::Text(t) = block {
            t.text = renamed(&t.text, &id, &named);
        }
    }
    r
}

/// `text` with each whole `id` (not part of a longer id, nor already `HOST/id`) made `named`.
pub fn renamed(text: &str, id: &str, named: &str) -> String {
    let mut out = String::with_capacity(text.len() + 32);
    let mut rest = text;
    while let Some(at) = rest.find(id) {
        let (before, after) = (&rest[..at], &rest[at + id.len()..]);
        let glued_before = before
            .chars()
            .next_back()
            .is_some_and(|c| c == '/' || c == '-' || c.is_alphanumeric());
        let glued_after = after.chars().next().is_some_and(char::is_alphanumeric);
        out.push_str(before);
        out.push_str(if glued_before || glued_after {
            id
        } else {
            named
        });
        rest = after;
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_whole_id_is_renamed() {
        assert_eq!(
            renamed(
                "job job-1 ran; wait_job {\"job\": \"job-1\"}; job-12 and x/job-1 stay",
                "job-1",
                "b2/job-1"
            ),
            "job b2/job-1 ran; wait_job {\"job\": \"b2/job-1\"}; job-12 and x/job-1 stay"
        );
    }

    #[test]
    fn the_answers_job_is_qualified_once() {
        let r = CallToolResult::structured(serde_json::json!({
            "job": "job-3", "state": "running", "result": {"job": "job-3"}
        }));
        let r = qualified(r, "bench-2");
        let s = r.structured_content.expect("structured");
        assert_eq!(s["job"], "bench-2/job-3");
        assert_eq!(s["result"]["job"], "bench-2/job-3");
        let again = qualified(CallToolResult::structured(s), "bench-2");
        assert_eq!(again.structured_content.expect("s")["job"], "bench-2/job-3");
    }
}
