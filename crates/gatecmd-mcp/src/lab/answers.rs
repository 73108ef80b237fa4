//! What a lab-wide `lock_board` asks of every host, and how a host's answer is read and
//! made the agent's (`host`, `HOST/…` names).

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::Value;

use super::names::qualify;
use gatecmd_core::identity::ClientIdentity;

/// What is asked of every host: `lock_board`'s arguments without `scope` and `wait_secs`.
pub struct LabAsk<'a> {
    pub who: &'a ClientIdentity,
    /// `{board}` or `{match}` with `ttl_secs` and `note`, as the peer's `lock_board` takes it.
    pub args: Value,
    pub wait_secs: u64,
}

/// A lease answer with `host`; `qualify_with` a peer's name makes its `lease_id` and
/// `board` `HOST/…` and says so in the text.
pub(super) fn with_host(
    mut r: CallToolResult,
    host: &str,
    qualify_with: Option<&str>,
) -> CallToolResult {
    let Some(s) = r.structured_content.as_mut() else {
        return r;
    };
    s["host"] = host.into();
    if let Some(h) = qualify_with {
        for key in ["lease_id", "board"] {
            if let Some(v) = s.get(key).and_then(Value::as_str) {
                s[key] = qualify(h, v).into();
            }
        }
        let text = format!(
            "lease {} on board {} of lab host {h}, expires at {}. Pass board: \"{}\" and lease: \"{}\" to board_run, power_board, console_read and the other board tools (they go through this host); release with unlock_device {{lease: \"{}\"}}.",
            s["lease_id"].as_str().unwrap_or_default(),
            s["board"].as_str().unwrap_or_default(),
            s["expires_at"].as_str().unwrap_or_default(),
            s["board"].as_str().unwrap_or_default(),
            s["lease_id"].as_str().unwrap_or_default(),
            s["lease_id"].as_str().unwrap_or_default(),
        );
        r.content = vec![ContentBlock::text(text)];
    }
    r
}

pub(super) fn refusal_reason(r: &CallToolResult) -> Option<String> {
    r.structured_content
        .as_ref()
        .and_then(|s| s.pointer("/refusal/reason"))
        .and_then(Value::as_str)
        .map(str::to_string)
}

pub(super) fn message(r: &CallToolResult) -> String {
    let m = r
        .structured_content
        .as_ref()
        .and_then(|s| s.pointer("/refusal/message"))
        .and_then(Value::as_str)
        .unwrap_or("refused");
    gatecmd_core::output::one_line(m, 300)
}
