//! Tool schemas an agent can afford (issue 47): every client fetches, parses and compiles the
//! whole tool list on each `tools/list` and `list_changed`, and some show it to their model.
//! schemars writes an output schema with every doc comment of every nested type, and every
//! tool that can refuse repeated the 37 refusal reasons with their descriptions: the list was
//! 244 KB, 210 KB of it output schemas. docs/PERFORMANCE.md "The tool list" has the figures.
//!
//! What an output schema is for: the official SDKs validate `structuredContent` against it,
//! and a client learns from it the fields an answer has. [`lean_output`] keeps that and drops
//! what only a reader of the Rust types needed, each step a loosening, so an answer that
//! validated before still does:
//!
//! - no `description`, `title`, `default`, numeric bound or `pattern` (the tool's
//!   description and docs/TOOLS.md say what the fields mean; an answer's bounds are the
//!   server's to keep);
//! - a `oneOf` of string constants becomes one `enum` (the same set of values);
//! - below [`DEPTH`] levels of fields the detail is cut to the value's `type` (an agent
//!   branches on the first levels; the rest it reads from the answer itself), and a shared
//!   definition nothing reaches any more is removed.
//!
//! Input schemas are what a model reads to call a tool: they keep their descriptions and
//! bounds and lose only `"default": null` on optional fields, which says nothing.
//! [`lean`] is applied to the whole list where it is built (`GatecmdServer::shared_router`),
//! so a tool added later gets it; the test in `tests/server/mcp_http.rs` holds the list to its
//! budget ([`LIST_BYTES`], [`TOOL_BYTES`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::JsonObject;
use serde_json::{Map, Value};

/// Most bytes of the whole `tools/list` result.
pub const LIST_BYTES: usize = 64 * 1024;
/// Most bytes of one tool's entry in it (name, description, schemas, annotations).
pub const TOOL_BYTES: usize = 8 * 1024;
/// Levels of fields an output schema describes in full: an answer's fields (level 1, a
/// list's items counted at the list's level). The fields of those (`devices[].id`, level 2)
/// are named with their `type` only, and nothing deeper is described.
pub const DEPTH: usize = 1;

/// Keywords that describe rather than constrain: dropped from output schemas.
const PROSE: &[&str] = &["description", "title", "default", "examples"];
/// Bounds and forms an answer always keeps: dropped from output schemas.
const BOUNDS: &[&str] = &[
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "pattern",
];

/// Makes every output schema of `router` lean ([`lean_output`]) and drops `"default": null`
/// from its input schemas; neither keeps the root's `$schema`: JSON Schema 2020-12 is what
/// MCP assumes when a schema names no dialect (SEP-1613), and the 54 bytes it costs each of
/// the two schemas of every tool were 3 KB of the list (issue 47).
pub fn lean<S>(mut router: ToolRouter<S>) -> ToolRouter<S> {
    for route in router.map.values_mut() {
        let tool = &mut route.attr;
        let mut input = lean_input(&tool.input_schema);
        input.remove("$schema");
        tool.input_schema = Arc::new(input);
        if let Some(out) = &tool.output_schema {
            let mut out = lean_output(out);
            out.remove("$schema");
            tool.output_schema = Some(Arc::new(out));
        }
    }
    router
}

/// An input schema without `"default": null` anywhere.
pub fn lean_input(schema: &JsonObject) -> JsonObject {
    let mut v = Value::Object(schema.clone());
    drop_null_defaults(&mut v);
    into_object(v)
}

fn drop_null_defaults(v: &mut Value) {
    match v {
        Value::Object(o) => {
            if o.get("default") == Some(&Value::Null) {
                o.remove("default");
            }
            o.values_mut().for_each(drop_null_defaults);
        }
        Value::Array(a) => a.iter_mut().for_each(drop_null_defaults),
        _ => {}
    }
}

/// An output schema that admits every value the original admits, without prose or bounds,
/// with constant alternatives as enums and detail below [`DEPTH`] levels of fields cut.
pub fn lean_output(schema: &JsonObject) -> JsonObject {
    let mut root = Value::Object(schema.clone());
    simplify(&mut root);
    let Value::Object(mut root) = root else {
        unreachable!("an object stays an object")
    };
    let defs = match root.remove("$defs") {
        Some(Value::Object(d)) => d,
        _ => Map::new(),
    };
    let mut cut = Cut {
        defs,
        reached: BTreeMap::new(),
    };
    let mut out = cut.walk(&root, 0);
    // Each definition is described from the shallowest depth that reaches it, so every
    // reference sees at least the detail its own depth allows.
    let mut done: BTreeMap<String, usize> = BTreeMap::new();
    let mut kept = Map::new();
    loop {
        let todo: Vec<(String, usize)> = cut
            .reached
            .iter()
            .filter(|(name, depth)| done.get(*name).is_none_or(|d| d > depth))
            .map(|(n, d)| (n.clone(), *d))
            .collect();
        if todo.is_empty() {
            break;
        }
        for (name, depth) in todo {
            done.insert(name.clone(), depth);
            if let Some(Value::Object(def)) = cut.defs.get(&name).cloned() {
                kept.insert(name, Value::Object(cut.walk(&def, depth)));
            }
        }
    }
    // A reference the walk did not follow (under a keyword it does not know) keeps its
    // definition: a schema with a dangling `$ref` would not compile in any client.
    let mut named = Vec::new();
    refs(&Value::Object(out.clone()), &mut named);
    refs(&Value::Object(kept.clone()), &mut named);
    for name in named {
        if !kept.contains_key(&name)
            && let Some(def) = cut.defs.get(&name)
        {
            kept.insert(name, def.clone());
        }
    }
    if !kept.is_empty() {
        out.insert("$defs".into(), Value::Object(kept));
    }
    out
}

/// The definitions `v` references (`#/$defs/NAME`), wherever they sit.
fn refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(o) => {
            if let Some(Value::String(r)) = o.get("$ref")
                && let Some(name) = r.strip_prefix("#/$defs/")
                && !out.iter().any(|n| n == name)
            {
                out.push(name.to_string());
            }
            o.values().for_each(|x| refs(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
        _ => {}
    }
}

/// Prose and bounds removed, and a `oneOf`/`anyOf` of string constants made one `enum`.
fn simplify(v: &mut Value) {
    match v {
        Value::Object(o) => {
            for k in PROSE.iter().chain(BOUNDS) {
                // A property may be called `title` or `default`: only keywords go, and a
                // keyword's value is never an object of schemas.
                if o.get(*k).is_some_and(|x| !x.is_object()) {
                    o.remove(*k);
                }
            }
            // Inside out: the alternatives have lost their prose before they are compared.
            o.values_mut().for_each(simplify);
            for key in ["oneOf", "anyOf"] {
                if let Some(values) = o.get(key).and_then(string_constants) {
                    o.remove(key);
                    o.insert("type".into(), "string".into());
                    o.insert("enum".into(), values.into());
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(simplify),
        _ => {}
    }
}

/// The values of alternatives that are each a string `const` or `enum`, if all are.
fn string_constants(alternatives: &Value) -> Option<Vec<Value>> {
    let mut values = Vec::new();
    for a in alternatives.as_array()? {
        let a = a.as_object()?;
        if a.get("type").and_then(Value::as_str) != Some("string") {
            return None;
        }
        match (a.get("const"), a.get("enum")) {
            (Some(c @ Value::String(_)), None) => values.push(c.clone()),
            (None, Some(Value::Array(e))) if e.iter().all(Value::is_string) => {
                values.extend(e.iter().cloned())
            }
            _ => return None,
        }
        if a.keys()
            .any(|k| !["type", "const", "enum"].contains(&k.as_str()))
        {
            return None;
        }
    }
    Some(values)
}

/// The depth cut: which definitions the kept part reaches, and from how deep.
struct Cut {
    defs: Map<String, Value>,
    reached: BTreeMap<String, usize>,
}

impl Cut {
    /// `schema` as seen `depth` levels of fields below the answer.
    fn walk(&mut self, schema: &Map<String, Value>, depth: usize) -> Map<String, Value> {
        if depth > DEPTH {
            let mut typed = Map::new();
            if let Some(t) = self.type_of(schema) {
                typed.insert("type".into(), t);
            }
            return typed;
        }
        let mut out = Map::new();
        for (k, v) in schema {
            let kept = match (k.as_str(), v) {
                ("$ref", Value::String(r)) => {
                    if let Some(name) = r.strip_prefix("#/$defs/") {
                        let d = self.reached.entry(name.to_string()).or_insert(depth);
                        *d = (*d).min(depth);
                    }
                    v.clone()
                }
                ("properties", Value::Object(props)) => Value::Object(
                    props
                        .iter()
                        .map(|(p, s)| (p.clone(), self.sub(s, depth + 1)))
                        .collect(),
                ),
                // A list's items (or a map's values) are at the list's own depth.
                ("items" | "additionalProperties", Value::Object(_)) => self.sub(v, depth),
                ("anyOf" | "oneOf" | "allOf" | "prefixItems", Value::Array(a)) => {
                    Value::Array(a.iter().map(|s| self.sub(s, depth)).collect())
                }
                _ => v.clone(),
            };
            out.insert(k.clone(), kept);
        }
        out
    }

    /// The JSON type(s) `schema` admits, where it says: its own `type`, its definition's, or
    /// those of its alternatives (`anyOf: [{$ref}, {type: null}]` is `[object, null]`).
    fn type_of(&self, schema: &Map<String, Value>) -> Option<Value> {
        if let Some(t) = schema.get("type") {
            return Some(t.clone());
        }
        if let Some(Value::String(r)) = schema.get("$ref") {
            let def = self.defs.get(r.strip_prefix("#/$defs/")?)?.as_object()?;
            return self.type_of(def);
        }
        let alternatives = schema
            .get("anyOf")
            .or_else(|| schema.get("oneOf"))?
            .as_array()?;
        let mut types = Vec::new();
        for a in alternatives {
            match self.type_of(a.as_object()?)? {
                Value::Array(ts) => types.extend(ts),
                t => types.push(t),
            }
        }
        types.dedup();
        Some(Value::Array(types))
    }

    fn sub(&mut self, schema: &Value, depth: usize) -> Value {
        match schema {
            Value::Object(o) => Value::Object(self.walk(o, depth)),
            other => other.clone(),
        }
    }
}

fn into_object(v: Value) -> JsonObject {
    match v {
        Value::Object(o) => o,
        _ => unreachable!("an object stays an object"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> JsonObject {
        into_object(v)
    }

    #[test]
    fn prose_bounds_and_constant_alternatives_go() {
        let s = obj(json!({
            "type": "object",
            "description": "An answer.",
            "properties": {
                "n": {"type": "integer", "minimum": 0, "description": "A count."},
                "title": {"type": "string", "default": "x"},
                "e": {"oneOf": [
                    {"type": "string", "const": "a", "description": "A."},
                    {"type": "string", "enum": ["b", "c"]},
                ]},
                "mixed": {"anyOf": [{"type": "string", "const": "a"}, {"type": "null"}]},
            },
            "required": ["n"],
        }));
        assert_eq!(
            Value::Object(lean_output(&s)),
            json!({
                "type": "object",
                "properties": {
                    "n": {"type": "integer"},
                    "title": {"type": "string"},
                    "e": {"type": "string", "enum": ["a", "b", "c"]},
                    "mixed": {"anyOf": [{"type": "string", "const": "a"}, {"type": "null"}]},
                },
                "required": ["n"],
            })
        );
    }

    #[test]
    fn detail_below_the_depth_keeps_its_type_and_unreached_definitions_go() {
        let s = obj(json!({
            "type": "object",
            "properties": {
                "a": {"type": "array", "items": {"$ref": "#/$defs/Item"}},
                "b": {"anyOf": [{"$ref": "#/$defs/Leaf"}, {"type": "null"}]},
            },
            "$defs": {
                "Item": {"type": "object", "properties": {
                    "c": {"$ref": "#/$defs/Gone"},
                    "k": {"$ref": "#/$defs/Kind"},
                    "o": {"anyOf": [{"$ref": "#/$defs/Gone"}, {"type": "null"}]},
                    "x": {"items": {"type": "string"}},
                }},
                "Gone": {"type": "object", "properties": {"x": {"type": "string"}}},
                "Kind": {"oneOf": [{"type": "string", "const": "a"}, {"type": "string", "const": "b"}]},
                "Leaf": {"type": "object", "properties": {"y": {"type": "string"}}},
            },
        }));
        let out = Value::Object(lean_output(&s));
        assert_eq!(
            out["$defs"],
            json!({
                "Item": {"type": "object", "properties": {
                    "c": {"type": "object"},
                    "k": {"type": "string"},
                    "o": {"type": ["object", "null"]},
                    "x": {},
                }},
                "Leaf": {"type": "object", "properties": {"y": {"type": "string"}}},
            })
        );
    }

    /// Every tool's output schema, as served: each reference resolves, and no description
    /// is left (the figures of docs/PERFORMANCE.md depend on both).
    #[test]
    fn every_served_output_schema_is_lean_and_whole() {
        let router = lean(crate::server::schema::standardize(crate::tools::router()));
        for t in router.list_all() {
            let out = Value::Object((*t.output_schema.expect("output schema")).clone());
            let mut named = Vec::new();
            refs(&out, &mut named);
            for name in &named {
                assert!(
                    out["$defs"].get(name).is_some(),
                    "{}: $ref {name} does not resolve",
                    t.name
                );
            }
            let text = out.to_string();
            // As keywords (a string or a number after them), not as field names.
            assert!(!text.contains("\"description\":\""), "{}: {text}", t.name);
            assert!(!text.contains("\"minimum\":0"), "{}: {text}", t.name);
        }
    }

    #[test]
    fn input_loses_only_null_defaults() {
        let s = obj(json!({"properties": {
            "a": {"type": ["string", "null"], "default": null, "description": "A."},
            "b": {"type": "boolean", "default": false},
        }}));
        assert_eq!(
            Value::Object(lean_input(&s)),
            json!({"properties": {
                "a": {"type": ["string", "null"], "description": "A."},
                "b": {"type": "boolean", "default": false},
            }})
        );
    }
}
