//! One file per MCP tool: its request and result types and its logic. `server.rs` holds
//! the `#[tool_router]` list that dispatches to them.

pub mod answer;
pub mod board_list;
pub mod board_run;
pub mod boards;
pub mod boot_board;
pub mod commands;
pub mod console;
pub mod devices;
pub mod execute;
pub mod files;
pub mod jobs;
pub mod locks;
pub mod power;
pub mod reasons;
pub mod schema;
pub mod talk_errors;
pub mod tasks;

use rmcp::model::{CallToolResult, ContentBlock};
use schemars::Schema;
use serde::Serialize;
use serde_json::{Value, json};

use gatecmd_core::refusal::Refusal;

/// A successful result: the structured value plus a text rendering for people, bounded
/// ([`answer::bounded_text`]: the structured value is the full answer, the text at most
/// 16 KiB of it). Every tool's answer goes through here or [`refusal`].
pub fn structured<T: Serialize>(value: &T, text: String) -> CallToolResult {
    let mut r = CallToolResult::success(vec![ContentBlock::text(answer::bounded_text(text))]);
    r.structured_content = serde_json::to_value(value).ok();
    r
}

/// A failed result that still carries the structured value (e.g. a non-zero exit).
pub fn structured_error<T: Serialize>(value: &T, text: String) -> CallToolResult {
    let mut r = structured(value, text);
    r.is_error = Some(true);
    r
}

/// A refusal: `isError: true`, the message as text (what is in the way and what to do),
/// and `{"refusal": {"reason", "message"}}` as structured content, so a client can branch
/// on the reason without parsing the text.
pub fn refusal(r: Refusal) -> CallToolResult {
    let mut out = CallToolResult::error(vec![ContentBlock::text(r.message.clone())]);
    out.structured_content = Some(json!({ "refusal": r }));
    out
}

/// Schema transform for a result type that a refusal may stand in for
/// (`#[schemars(transform = crate::tools::or_refusal)]`): the object either has the
/// type's required fields or a `refusal`.
///
/// Needed because the TypeScript SDK's client validates `structuredContent` against the
/// tool's `outputSchema` even when `isError` is true: a refusal that did not fit would
/// reach the agent as a protocol error instead of its message.
pub fn or_refusal(schema: &mut Schema) {
    let refusal = refusal_schema();
    let Some(obj) = schema.as_object_mut() else {
        return;
    };
    let required = obj
        .remove("required")
        .unwrap_or_else(|| Value::Array(vec![]));
    if let Some(Value::Object(props)) = obj.get_mut("properties") {
        props.insert("refusal".into(), refusal);
    }
    obj.insert(
        "anyOf".into(),
        json!([{ "required": required }, { "required": ["refusal"] }]),
    );
}

/// The JSON schema of [`Refusal`], inlined (no `$ref` into definitions the result's
/// schema does not have).
fn refusal_schema() -> Value {
    let schema = schemars::generate::SchemaSettings::draft2020_12()
        .with(|s| s.inline_subschemas = true)
        .into_generator()
        .into_root_schema_for::<Refusal>();
    let mut v = schema.to_value();
    if let Value::Object(o) = &mut v {
        o.remove("$schema");
        o.remove("title");
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use gatecmd_core::refusal::RefusalReason;

    #[derive(Serialize, schemars::JsonSchema)]
    #[schemars(transform = or_refusal)]
    struct Answer {
        a: u32,
        b: Option<String>,
    }

    #[test]
    fn a_result_schema_admits_its_refusal() {
        let s =
            Value::Object((*rmcp::handler::server::tool::schema_for_output::<Answer>()).clone());
        assert_eq!(s["type"], json!("object"));
        assert!(s.get("required").is_none(), "{s}");
        // `b` is always serialised (null when absent), so it stays required.
        assert_eq!(
            s["anyOf"],
            json!([{"required": ["a", "b"]}, {"required": ["refusal"]}])
        );
        assert_eq!(
            s["properties"]["refusal"]["required"],
            json!(["reason", "message"])
        );
        // Inlined: no reference into definitions the result's schema lacks.
        assert!(!s.to_string().contains("$ref"), "{s}");
    }

    #[test]
    fn a_refusal_is_an_error_with_its_message_and_reason() {
        let r = refusal(Refusal::new(RefusalReason::Limit, "too many"));
        assert_eq!(r.is_error, Some(true));
        assert_eq!(
            r.content[0].as_text().map(|t| t.text.as_str()),
            Some("too many")
        );
        assert_eq!(
            r.structured_content,
            Some(json!({"refusal": {"reason": "limit", "message": "too many"}}))
        );
    }
}
