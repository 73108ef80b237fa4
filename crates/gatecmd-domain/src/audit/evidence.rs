//! The evidence of a job (`gatecmd evidence`, docs/AUDIT.md "Evidence of a job"): the
//! signed audit lines that make a job, in one file that proves itself offline.
//!
//! A bundle is one line shaped like an audit line: a JSON object sealed with `prev` (the
//! hash of the log's newest line when it was made) and `sig` by the host's key. It holds:
//! - `records`: each line of the job as written (`text`, with its own `prev` and `sig`),
//!   where it was (`file`, `line`);
//! - `facts`: what the lines say, pulled out for a reader (`request`, `approval`, `flash`,
//!   `boot`, `verdict`, `ended`); a verifier derives them again and compares.
//!
//! A line belongs to job J when its `job` is J, or when it is an `approval_*` line of an
//! approval that one of J's lines names (`approval`): who approved, and when.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use ed25519_dalek::VerifyingKey;
use serde_json::{Map, Value, json};

use super::chain::{self, Signer};
use super::verify::{self, Broken, check_line};

/// The bundle's `format`.
pub const FORMAT: &str = "gatecmd-evidence/1";
/// The largest bundle read.
const MAX_BUNDLE: u64 = 64 * 1024 * 1024;

/// Why a bundle cannot be made, or does not verify.
#[derive(Debug, thiserror::Error)]
pub enum EvidenceError {
    #[error("the audit log does not verify, so no evidence is made from it: {0}")]
    Log(#[from] Broken),
    #[error(
        "no audit line names job {0}; `gatecmd evidence` takes a job id as flash_board or run_test_plan answered it (`job`)"
    )]
    NoSuchJob(String),
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("refused: {0}")]
    Refused(String),
}

/// A bundle that verified: the job, its records and the key that signed them.
#[derive(Debug)]
pub struct Verified {
    pub job: String,
    pub records: usize,
    /// Records whose `prev` is the hash of the record before them in the bundle.
    pub linked: usize,
    pub public_key: String,
    /// The key was the one the caller trusted (`--key`), not only the bundle's own.
    pub trusted: bool,
    pub facts: Value,
}

/// Reads `files` (oldest first), verifying the whole chain with `signer`'s key, and makes
/// the sealed bundle of `job` (one line, `\n`-terminated).
pub fn make(files: &[PathBuf], signer: &Signer, job: &str) -> Result<Vec<u8>, EvidenceError> {
    let key = signer.public();
    let mut lines: Vec<(String, u64, Value, String)> = Vec::new();
    let checked = verify::verify_each(files, &key, |seen| {
        // Only lines naming a job or an approval can belong; the rest are not parsed.
        if !contains(seen.text, b"\"job\":") && !contains(seen.text, b"\"approval\":") {
            return;
        }
        if let Ok(v) = serde_json::from_slice::<Value>(seen.text) {
            let name = seen.file.file_name().map_or_else(
                || seen.file.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            );
            let text = String::from_utf8_lossy(seen.text).into_owned();
            lines.push((name, seen.line, v, text));
        }
    })?;
    let approvals = approvals_of(job, lines.iter().map(|l| &l.2));
    let records: Vec<Value> = lines
        .into_iter()
        .filter(|(_, _, v, _)| belongs(v, job, &approvals))
        .map(|(file, line, _, text)| json!({"file": file, "line": line, "text": text}))
        .collect();
    if records.is_empty() {
        return Err(EvidenceError::NoSuchJob(job.to_string()));
    }
    let parsed: Vec<Value> = records.iter().map(|r| parse(&r["text"])).collect();
    let body = json!({
        "format": FORMAT,
        "job": job,
        "public_key": signer.public_hex(),
        "made_at": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "facts": facts(job, &parsed),
        "records": records,
    });
    let body = serde_json::to_vec(&body).map_err(|e| EvidenceError::Refused(e.to_string()))?;
    let prev = checked.last.unwrap_or_else(|| chain::GENESIS.to_string());
    Ok(signer.seal(&body, &prev))
}

/// Checks the bundle at `path` with nothing but itself and, when given, the trusted key.
pub fn verify_file(path: &Path, trusted: Option<&VerifyingKey>) -> Result<Verified, EvidenceError> {
    let read = |source| EvidenceError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read)?;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(file, MAX_BUNDLE), &mut bytes)
        .map_err(read)?;
    verify_bytes(&bytes, trusted)
}

/// As [`verify_file`], on the bundle's bytes.
pub fn verify_bytes(
    bytes: &[u8],
    trusted: Option<&VerifyingKey>,
) -> Result<Verified, EvidenceError> {
    let refused = |why: String| EvidenceError::Refused(why);
    let line = bytes
        .strip_suffix(b"\n")
        .ok_or_else(|| refused("not a bundle: it does not end in one newline".into()))?;
    let sealed = chain::unseal(line).map_err(|e| refused(format!("the bundle is {e}")))?;
    let body: Value = serde_json::from_slice(&sealed.signed)
        .map_err(|e| refused(format!("the bundle is not JSON: {e}")))?;
    if body["format"] != FORMAT {
        return Err(refused(format!("the bundle's format is not {FORMAT}")));
    }
    let named = body["public_key"].as_str().unwrap_or_default();
    let key = match trusted {
        Some(t) => {
            if hex::encode(t.as_bytes()) != named {
                return Err(refused(format!(
                    "the bundle names key {named}, not the trusted key {}",
                    hex::encode(t.as_bytes())
                )));
            }
            *t
        }
        None => chain::public_key(named).map_err(|e| refused(e.to_string()))?,
    };
    if !sealed.verifies(&key) {
        return Err(refused(format!(
            "the bundle's signature does not verify with key {named}: it was altered after it was made"
        )));
    }
    let job = body["job"].as_str().unwrap_or_default().to_string();
    let records = body["records"].as_array().cloned().unwrap_or_default();
    let (parsed, linked) = check_records(&records, &key, &job)?;
    let derived = facts(&job, &parsed);
    if derived != body["facts"] {
        return Err(refused(
            "the bundle's facts are not what its records say".into(),
        ));
    }
    Ok(Verified {
        job,
        records: records.len(),
        linked,
        public_key: named.to_string(),
        trusted: trusted.is_some(),
        facts: derived,
    })
}

/// Each record's signature, that it belongs to `job`, no record twice; how many follow
/// the one before them in the chain.
fn check_records(
    records: &[Value],
    key: &VerifyingKey,
    job: &str,
) -> Result<(Vec<Value>, usize), EvidenceError> {
    if records.is_empty() {
        return Err(EvidenceError::Refused("the bundle holds no record".into()));
    }
    let mut parsed = Vec::new();
    let mut seen = BTreeSet::new();
    let mut before: Option<String> = None;
    let mut linked = 0;
    for (i, r) in records.iter().enumerate() {
        let text = r["text"].as_str().unwrap_or_default();
        let at = format!("record {} ({}:{})", i + 1, r["file"], r["line"]);
        check_line(text.as_bytes(), key, None)
            .map_err(|why| EvidenceError::Refused(format!("{at}: {why}")))?;
        let hash = chain::line_hash(text.as_bytes());
        if !seen.insert(hash.clone()) {
            return Err(EvidenceError::Refused(format!("{at}: the same line twice")));
        }
        if let (Some(b), Ok(s)) = (&before, chain::unseal(text.as_bytes()))
            && s.prev == *b
        {
            linked += 1;
        }
        before = Some(hash);
        parsed.push(parse(&r["text"]));
    }
    let approvals = approvals_of(job, parsed.iter());
    if let Some(i) = parsed.iter().position(|v| !belongs(v, job, &approvals)) {
        return Err(EvidenceError::Refused(format!(
            "record {} belongs to neither job {job} nor an approval it names",
            i + 1
        )));
    }
    Ok((parsed, linked))
}

fn parse(text: &Value) -> Value {
    serde_json::from_str(text.as_str().unwrap_or_default()).unwrap_or(Value::Null)
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(hay, needle).is_some()
}

/// The approvals job `job`'s lines name (flash_board's `approval`; an approval request
/// made for a running job names the job itself).
fn approvals_of<'a>(job: &str, lines: impl Iterator<Item = &'a Value>) -> BTreeSet<String> {
    lines
        .filter(|v| v["job"] == job)
        .filter_map(|v| v["approval"].as_str().map(str::to_string))
        .collect()
}

fn belongs(v: &Value, job: &str, approvals: &BTreeSet<String>) -> bool {
    v["job"] == job
        || (v["event"]
            .as_str()
            .is_some_and(|e| e.starts_with("approval_"))
            && v["approval"]
                .as_str()
                .is_some_and(|a| approvals.contains(a)))
}

/// What the records say, for a reader: derived the same way when made and when verified.
fn facts(job: &str, records: &[Value]) -> Value {
    let first = |event: &str| records.iter().find(|v| v["event"] == event);
    let pick = |v: Option<&Value>, keys: &[&str]| -> Value {
        v.map_or(Value::Null, |v| {
            let mut m = Map::new();
            for k in keys {
                if let Some(x) = v.get(*k) {
                    m.insert((*k).to_string(), x.clone());
                }
            }
            Value::Object(m)
        })
    };
    let mine = records.iter().find(|v| v["job"] == job);
    let flash = first("flash_board");
    let verdict = records
        .iter()
        .rev()
        .find(|v| v["job"] == job && v.get("verdict").is_some());
    json!({
        "job": job,
        "client": mine.map_or(Value::Null, |v| v["client"].clone()),
        "board": records.iter().find_map(|v| v.get("board").cloned()).unwrap_or(Value::Null),
        "request": pick(first("job_started"), &["ts", "client", "origin"]),
        "approval": json!({
            "requested": pick(first("approval_requested"), &["ts", "approval", "client", "what", "files", "rule", "approvers"]),
            "decided": pick(first("approval_decided"), &["ts", "approval", "outcome", "by", "via", "note", "after_ms"]),
        }),
        "flash": pick(flash, &["ts", "outcome", "image", "image_sha256", "loader", "loader_sha256",
            "bmap_sha256", "bytes_written", "verified", "verification", "verified_bytes",
            "unverified_bytes", "board_state", "step", "message"]),
        "boot": flash.and_then(|f| f.get("boot").cloned()).unwrap_or(Value::Null),
        "verdict": pick(verdict, &["ts", "event", "plan", "verdict", "steps", "faults"]),
        "ended": pick(first("job_ended"), &["ts", "state", "ended_by", "why"]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{Audit, FILE_NAME};
    use crate::config::AuditSettings;

    fn flash_log(dir: &Path) {
        let audit = Audit::open(dir, &AuditSettings::default()).expect("open");
        let lines = [
            json!({"event": "approval_requested", "client": "vm", "approval": "apr-1", "what": "flash_board b1 a.img"}),
            json!({"event": "execute_started", "client": "other"}),
            json!({"event": "approval_decided", "client": "vm", "approval": "apr-1", "outcome": "approved", "by": "ops"}),
            json!({"event": "job_started", "client": "vm", "job": "job-7", "origin": "background"}),
            json!({"event": "approval_decided", "client": "vm", "approval": "apr-2", "outcome": "denied"}),
            json!({"event": "flash_board", "client": "vm", "job": "job-7", "approval": "apr-1", "board": "b1",
                "outcome": "flashed", "image_sha256": "ab", "verification": "read_back", "boot": {"outcome": "shell"}}),
            json!({"event": "job_ended", "client": "vm", "job": "job-7", "state": "succeeded"}),
            json!({"event": "job_ended", "client": "vm", "job": "job-8", "state": "failed"}),
        ];
        for l in &lines {
            audit.record(l);
        }
    }

    #[test]
    fn a_bundle_holds_the_jobs_lines_and_verifies_until_a_byte_changes() {
        let dir = tempfile::tempdir().expect("tmp");
        flash_log(dir.path());
        let signer = Signer::load_or_create(dir.path()).expect("key");
        let files = verify::with_rotated(&dir.path().join(FILE_NAME));
        let bundle = make(&files, &signer, "job-7").expect("made");
        let ok = verify_bytes(&bundle, Some(&signer.public())).expect("verifies");
        assert_eq!(
            ok.records, 5,
            "apr-1's two lines and job-7's three, not apr-2 or job-8"
        );
        assert_eq!(
            ok.linked, 2,
            "job_started follows approval_decided, job_ended the flash"
        );
        assert_eq!(ok.facts["approval"]["decided"]["by"], "ops");
        assert_eq!(ok.facts["flash"]["image_sha256"], "ab");
        assert_eq!(ok.facts["boot"]["outcome"], "shell");
        assert_eq!(ok.facts["ended"]["state"], "succeeded");
        // Every byte of the bundle is covered: changing any one is refused.
        for at in (0..bundle.len() - 1).step_by(37) {
            let mut bad = bundle.clone();
            bad[at] ^= 0x01;
            assert!(
                verify_bytes(&bad, None).is_err(),
                "byte {at} changed and accepted"
            );
        }
        let other = Signer::from_seed([3; 32]);
        assert!(verify_bytes(&bundle, Some(&other.public())).is_err());
        assert!(matches!(
            make(&files, &signer, "job-99"),
            Err(EvidenceError::NoSuchJob(_))
        ));
    }
}
