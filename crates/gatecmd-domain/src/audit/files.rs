//! The audit line of file staging (docs/AUDIT.md `file`): a chunk written, an upload
//! finalised, a file removed, expired, listed or stat'ed, allowed or refused.

use serde::Serialize;

/// One staging decision; serialised with `"event": "file"`.
#[derive(Debug, Serialize)]
#[serde(tag = "event", rename = "file")]
pub struct FileRecord<'a> {
    pub client: &'a str,
    /// `write` (a chunk), `finalize`, `remove`, `expire`, `list`, `stat`.
    pub action: &'a str,
    pub path: &'a str,
    pub bytes: Option<u64>,
    pub sha256: Option<&'a str>,
    /// `allowed` or `refused`.
    pub verdict: &'static str,
    /// Why it was refused (`None` when allowed).
    pub reason: Option<&'a str>,
}

impl<'a> FileRecord<'a> {
    /// The verdict follows the reason: refused when there is one.
    pub fn new(
        client: &'a str,
        action: &'a str,
        path: &'a str,
        bytes: Option<u64>,
        sha256: Option<&'a str>,
        refused: Option<&'a str>,
    ) -> Self {
        FileRecord {
            client,
            action,
            path,
            bytes,
            sha256,
            verdict: if refused.is_some() {
                "refused"
            } else {
                "allowed"
            },
            reason: refused,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_lines_keep_their_shape() {
        let v = serde_json::to_value(FileRecord::new(
            "ci",
            "remove",
            "a/b",
            None,
            Some("ab"),
            Some("not_found"),
        ))
        .unwrap();
        assert_eq!(
            v,
            serde_json::json!({"event": "file", "client": "ci", "action": "remove",
                "path": "a/b", "bytes": null, "sha256": "ab", "verdict": "refused",
                "reason": "not_found"})
        );
    }
}
