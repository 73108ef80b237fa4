//! Tool schemas in standard JSON Schema, for every SDK's validator.
//!
//! schemars writes the Rust type of a number as a `format` (`uint64`, `uint16`, `uint`,
//! `int32`, `double`, …). Those are not JSON Schema formats: the official TypeScript SDK's
//! validator logs `unknown format "uint64" ignored in schema` for each, about 90 times per
//! connection. What the format meant is kept as standard keywords instead: an unsigned
//! integer has `minimum: 0` (schemars writes it), a 32-bit one its `maximum` as well.
//! [`standardize`] is applied to the whole tool list where it is built
//! (`GatecmdServer::shared_router`), so a tool added later gets it without doing anything.

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::JsonObject;
use serde_json::Value;
use std::sync::Arc;

/// The `format` values JSON Schema 2020-12 defines (§7.3); anything else is dropped.
pub const STANDARD_FORMATS: &[&str] = &[
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// Rewrites every input and output schema of `router` in standard JSON Schema.
pub fn standardize<S>(mut router: ToolRouter<S>) -> ToolRouter<S> {
    for route in router.map.values_mut() {
        let tool = &mut route.attr;
        tool.input_schema = Arc::new(standard(&tool.input_schema));
        if let Some(out) = &tool.output_schema {
            tool.output_schema = Some(Arc::new(standard(out)));
        }
    }
    router
}

fn standard(schema: &JsonObject) -> JsonObject {
    let mut value = Value::Object(schema.clone());
    rewrite(&mut value);
    match value {
        Value::Object(o) => o,
        _ => unreachable!("an object stays an object"),
    }
}

/// Every subschema, wherever it sits (properties, items, `$defs`, `anyOf`, …): a `format`
/// that is no JSON Schema format goes, and a bounded integer keeps its bounds as keywords.
fn rewrite(v: &mut Value) {
    match v {
        Value::Object(o) => {
            if let Some(Value::String(f)) = o.get("format")
                && !STANDARD_FORMATS.contains(&f.as_str())
            {
                let bounds = integer_bounds(f);
                o.remove("format");
                if let Some((min, max)) = bounds {
                    o.entry("minimum").or_insert(min.into());
                    if let Some(max) = max {
                        o.entry("maximum").or_insert(max.into());
                    }
                }
            }
            o.values_mut().for_each(rewrite);
        }
        Value::Array(a) => a.iter_mut().for_each(rewrite),
        _ => {}
    }
}

/// The range a schemars integer format stands for, where JSON numbers hold it exactly
/// (64-bit maxima do not fit a double, so only their minimum is written).
fn integer_bounds(format: &str) -> Option<(i64, Option<i64>)> {
    Some(match format {
        "uint8" => (0, Some(u8::MAX.into())),
        "uint16" => (0, Some(u16::MAX.into())),
        "uint32" => (0, Some(u32::MAX.into())),
        "uint64" | "uint128" | "uint" => (0, None),
        "int8" => (i8::MIN.into(), Some(i8::MAX.into())),
        "int16" => (i16::MIN.into(), Some(i16::MAX.into())),
        "int32" => (i32::MIN.into(), Some(i32::MAX.into())),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_formats_become_bounds_and_others_stay() {
        let mut v = serde_json::json!({
            "type": "object",
            "properties": {
                "n": {"type": "integer", "format": "uint64", "minimum": 0},
                "b": {"type": ["integer", "null"], "format": "uint16", "minimum": 0, "maximum": 65535},
                "w": {"type": "integer", "format": "uint32", "minimum": 0},
                "f": {"type": "number", "format": "double"},
                "t": {"type": "string", "format": "date-time"},
                "l": {"type": "array", "items": {"type": "integer", "format": "uint"}},
            },
            "$defs": {"X": {"anyOf": [{"type": "integer", "format": "int32"}]}},
        });
        rewrite(&mut v);
        assert_eq!(
            v,
            serde_json::json!({
                "type": "object",
                "properties": {
                    "n": {"type": "integer", "minimum": 0},
                    "b": {"type": ["integer", "null"], "minimum": 0, "maximum": 65535},
                    "w": {"type": "integer", "minimum": 0, "maximum": 4294967295u32},
                    "f": {"type": "number"},
                    "t": {"type": "string", "format": "date-time"},
                    "l": {"type": "array", "items": {"type": "integer", "minimum": 0}},
                },
                "$defs": {"X": {"anyOf": [{"type": "integer", "minimum": -2147483648i32, "maximum": 2147483647}]}},
            })
        );
    }
}
