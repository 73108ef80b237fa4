//! One file per MCP tool: its request and result types and its logic. `server.rs` holds
//! the `#[tool_router]` list that dispatches to them.

pub mod commands;
pub mod devices;
pub mod execute;
pub mod files;
pub mod list_cache;
pub mod locks;

use rmcp::model::{CallToolResult, ContentBlock};
use serde::Serialize;

/// A successful result: the structured value plus a text rendering for people.
pub fn structured<T: Serialize>(value: &T, text: String) -> CallToolResult {
    let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
    r.structured_content = serde_json::to_value(value).ok();
    r
}

/// A failed result that still carries the structured value (e.g. a non-zero exit).
pub fn structured_error<T: Serialize>(value: &T, text: String) -> CallToolResult {
    let mut r = structured(value, text);
    r.is_error = Some(true);
    r
}

/// A refusal: `isError: true` with a message that tells the agent what to do.
pub fn refusal(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.into())])
}
