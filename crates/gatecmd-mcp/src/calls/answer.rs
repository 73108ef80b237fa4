//! How a tool answers (issue 22, docs/TOOLS.md "Answers"): every answer is built here,
//! as a result with structured content ([`structured`], [`structured_error`]) or as a
//! refusal ([`refusal`]), and every result type that a refusal may stand in for admits it
//! in its schema ([`or_refusal`]).
//!
//! The structured content is the answer in full; the text content renders the same facts
//! for people and is bounded to [`TEXT_BYTES`]. A longer rendering keeps its
//! head and tail and says, where it was cut, how much is missing and that
//! `structuredContent` has all of it. So no content is sent twice at full size: a
//! megabyte of command output is a megabyte in `structuredContent` plus at most 16 KiB of
//! text, where it used to be two megabytes.
//!
//! MCP (2025-06-18 and later) says a tool returning structured content SHOULD also return
//! it as text "for backwards compatibility"; a SHOULD, which a bounded rendering keeps
//! for every answer of ordinary size.

use rmcp::model::{CallToolResult, ContentBlock};
use schemars::Schema;
use serde::Serialize;
use serde_json::{Value, json};

use gatecmd_core::output::floor_char_boundary;
use gatecmd_core::refusal::Refusal;

/// Most bytes of one answer's text content.
pub const TEXT_BYTES: usize = 16 * 1024;
/// Of which the tail kept after the cut (the end of a command's output is often its verdict).
const TAIL_BYTES: usize = 4 * 1024;

/// `text`, or its head and tail with a note between when it is longer than [`TEXT_BYTES`].
pub fn bounded_text(text: String) -> String {
    if text.len() <= TEXT_BYTES {
        return text;
    }
    let head_end = floor_char_boundary(&text, TEXT_BYTES - TAIL_BYTES - 160);
    let mut tail_start = text.len() - TAIL_BYTES;
    while !text.is_char_boundary(tail_start) {
        tail_start += 1;
    }
    let cut = tail_start - head_end;
    format!(
        "{}\n[... {cut} bytes of this text cut here; structuredContent holds the whole answer ...]\n{}",
        &text[..head_end],
        &text[tail_start..]
    )
}

/// A successful result: the structured value plus a text rendering for people, bounded
/// ([`bounded_text`]: the structured value is the full answer, the text at most
/// 16 KiB of it). Every tool's answer goes through here or [`refusal`].
pub fn structured<T: Serialize>(value: &T, text: String) -> CallToolResult {
    let mut r = CallToolResult::success(vec![ContentBlock::text(bounded_text(text))]);
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
/// (`#[schemars(transform = crate::calls::answer::or_refusal)]`): the object either has the
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
/// schema does not have) and compact: every tool that can refuse carries it, so `reason` is
/// a string rather than the enumeration of every reason with its description (docs/TOOLS.md
/// "Refusals" lists them; the names are stable).
fn refusal_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "reason": {"type": "string"},
            "message": {"type": "string"},
        },
        "required": ["reason", "message"],
    })
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

    #[test]
    fn a_long_text_keeps_head_and_tail_within_the_bound() {
        let text: String = "é".repeat(40_000) + "verdict: OK";
        let out = bounded_text(text.clone());
        assert!(out.len() <= TEXT_BYTES, "{}", out.len());
        assert!(out.starts_with("éé") && out.ends_with("verdict: OK"));
        assert!(out.contains("structuredContent holds the whole answer"));
        assert_eq!(bounded_text("short".into()), "short");
    }
}
