//! Every audit line fits in `audit.max_record_bytes`.
//!
//! Without a bound, whatever a caller puts into an argument lands in the log as sent: twenty
//! refused calls with 3.5 MB arguments once rotated every earlier record out of retention.
//! A record that would be longer keeps its shape, but its longest strings are cut to a
//! prefix ending in `…`, and `truncated_fields` says, for each cut field (as a JSON pointer),
//! how long it really was and its SHA-256, so the original can still be matched against a
//! copy. Only a record that cannot fit even then is replaced by a stub with its size and
//! hash.

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

/// Strings are never cut below this many bytes: a shorter prefix says too little.
const MIN_KEEP: usize = 32;
/// Arrays longer than this are cut to it when cutting strings alone is not enough.
const KEEP_ITEMS: usize = 8;
/// At most this many cut fields are described; the rest are only counted.
const MAX_DESCRIBED: usize = 16;
/// The smallest bound honoured: room for the stub of a record that cannot be cut to fit.
pub(super) const FLOOR: usize = 512;

/// `record` as one line ending in `\n`, at most `max` bytes long (`max` at least [`FLOOR`]).
pub(super) fn line(record: Map<String, Value>, max: usize) -> Vec<u8> {
    let max = max.max(FLOOR);
    let whole = to_line(&record);
    if whole.len() <= max {
        return whole;
    }
    let mut cutter = Cutter::default();
    // Halve the longest strings' allowance until the record fits: a record with one huge
    // argument keeps a prefix of about half the bound.
    let mut keep = max / 2;
    while keep >= MIN_KEEP {
        let attempt = cutter.cut(&record, keep, usize::MAX);
        if attempt.len() <= max {
            return attempt;
        }
        keep /= 2;
    }
    // Many fields, or very long lists: keep the first few items of each list too.
    let attempt = cutter.cut(&record, MIN_KEEP, KEEP_ITEMS);
    if attempt.len() <= max {
        return attempt;
    }
    stub(&record, &whole, max)
}

fn to_line(v: &impl serde::Serialize) -> Vec<u8> {
    // Serializing a `Value` cannot fail: its keys are strings.
    let mut line = serde_json::to_vec(v).unwrap_or_default();
    line.push(b'\n');
    line
}

/// A field that was cut: where, how long it was, and its hash.
struct Cut {
    field: String,
    /// Bytes of a string (UTF-8), or items of a list.
    len: usize,
    is_list: bool,
    sha256: String,
}

/// Cuts a record, remembering each field's hash so that retries do not hash again.
#[derive(Default)]
struct Cutter {
    hashes: std::collections::HashMap<String, String>,
}

impl Cutter {
    fn cut(&mut self, record: &Map<String, Value>, keep: usize, items: usize) -> Vec<u8> {
        let mut cuts = Vec::new();
        let mut out = Map::new();
        for (k, v) in record {
            let at = format!("/{}", escape(k));
            out.insert(k.clone(), self.cut_value(v, &at, keep, items, &mut cuts));
        }
        let described: Vec<Value> = cuts
            .iter()
            .take(MAX_DESCRIBED)
            .map(|c| {
                let len_key = if c.is_list { "items" } else { "bytes" };
                json!({"field": c.field, len_key: c.len, "sha256": c.sha256})
            })
            .collect();
        out.insert("truncated_fields".into(), Value::Array(described));
        if cuts.len() > MAX_DESCRIBED {
            out.insert(
                "truncated_fields_more".into(),
                json!(cuts.len() - MAX_DESCRIBED),
            );
        }
        to_line(&Value::Object(out))
    }

    fn cut_value(
        &mut self,
        v: &Value,
        at: &str,
        keep: usize,
        items: usize,
        cuts: &mut Vec<Cut>,
    ) -> Value {
        match v {
            Value::String(s) if s.len() > keep => {
                let sha256 = self.hash(at, || Sha256::digest(s.as_bytes()).into());
                cuts.push(Cut {
                    field: at.to_string(),
                    len: s.len(),
                    is_list: false,
                    sha256,
                });
                let mut end = keep;
                while !s.is_char_boundary(end) {
                    end -= 1;
                }
                Value::String(format!("{}…", &s[..end]))
            }
            Value::Array(list) => {
                if list.len() > items {
                    let sha256 = self.hash(at, || Sha256::digest(to_line(v)).into());
                    cuts.push(Cut {
                        field: at.to_string(),
                        len: list.len(),
                        is_list: true,
                        sha256,
                    });
                }
                let kept = list.iter().take(items).enumerate();
                Value::Array(
                    kept.map(|(i, x)| self.cut_value(x, &format!("{at}/{i}"), keep, items, cuts))
                        .collect(),
                )
            }
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, x)| {
                        let at = format!("{at}/{}", escape(k));
                        (k.clone(), self.cut_value(x, &at, keep, items, cuts))
                    })
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    fn hash(&mut self, at: &str, digest: impl FnOnce() -> [u8; 32]) -> String {
        self.hashes
            .entry(at.to_string())
            .or_insert_with(|| hex::encode(digest()))
            .clone()
    }
}

/// A JSON pointer segment (RFC 6901).
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// The short scalar fields of `record` (event, client, command, …) and the size and hash
/// of the whole line, for a record that cannot be cut to fit.
fn stub(record: &Map<String, Value>, whole: &[u8], max: usize) -> Vec<u8> {
    let mut out = Map::new();
    out.insert(
        "record_too_large".into(),
        json!({"bytes": whole.len() - 1, "sha256": hex::encode(Sha256::digest(&whole[..whole.len() - 1]))}),
    );
    for (k, v) in record {
        let short = match v {
            Value::String(s) => s.len() <= 64,
            Value::Number(_) | Value::Bool(_) | Value::Null => true,
            _ => false,
        };
        if short {
            out.insert(k.clone(), v.clone());
            if to_line(&Value::Object(out.clone())).len() > max {
                out.remove(k);
            }
        }
    }
    to_line(&Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &[u8]) -> Value {
        assert_eq!(line.last(), Some(&b'\n'));
        serde_json::from_slice(line).expect("whole JSON")
    }

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!("test records are objects"),
        }
    }

    #[test]
    fn a_record_within_the_bound_is_untouched() {
        let r = obj(json!({"event": "x", "args": ["a", "b"]}));
        let v = parse(&line(r, 1024));
        assert_eq!(v, json!({"event": "x", "args": ["a", "b"]}));
    }

    #[test]
    fn a_long_argument_is_cut_with_its_length_and_hash() {
        let big = "é".repeat(300_000);
        let r = obj(json!({"event": "execute_refused", "client": "vm-b", "args": ["wl", big]}));
        let out = line(r, 8192);
        assert!(out.len() <= 8192, "{}", out.len());
        let v = parse(&out);
        assert_eq!(v["client"], "vm-b");
        assert_eq!(v["args"][0], "wl");
        let kept = v["args"][1].as_str().expect("still a string");
        assert!(kept.ends_with('…') && kept.len() > 1000, "{}", kept.len());
        assert!(big.starts_with(kept.trim_end_matches('…')));
        let cut = &v["truncated_fields"][0];
        assert_eq!(cut["field"], "/args/1");
        assert_eq!(cut["bytes"], 600_000);
        assert_eq!(cut["sha256"], hex::encode(Sha256::digest(big.as_bytes())));
    }

    #[test]
    fn many_arguments_are_cut_to_the_first_few() {
        let args: Vec<String> = (0..5000).map(|i| format!("argument-{i:06}")).collect();
        let r = obj(json!({"event": "execute_refused", "args": args}));
        let out = line(r, 2048);
        assert!(out.len() <= 2048, "{}", out.len());
        let v = parse(&out);
        assert_eq!(v["args"].as_array().map(Vec::len), Some(KEEP_ITEMS));
        assert_eq!(v["args"][0], "argument-000000");
        let list = v["truncated_fields"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["field"] == "/args"))
            .expect("the list is described");
        assert_eq!(list["items"], 5000);
    }

    #[test]
    fn a_record_that_cannot_be_cut_becomes_a_stub() {
        let mut m = Map::new();
        m.insert("event".into(), json!("x"));
        for i in 0..400 {
            m.insert(format!("field_{i:04}"), json!({"nested": [i]}));
        }
        let out = line(m, 1024);
        assert!(out.len() <= 1024, "{}", out.len());
        let v = parse(&out);
        assert_eq!(v["event"], "x");
        assert!(v["record_too_large"]["bytes"].as_u64() > Some(1024));
        assert_eq!(
            v["record_too_large"]["sha256"].as_str().map(str::len),
            Some(64)
        );
    }
}
