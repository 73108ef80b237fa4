//! Checking a chained, signed audit log (`gatecmd audit verify`, docs/AUDIT.md).
//!
//! Each line must unseal (`prev` and `sig` at its end), its signature must verify with the
//! trusted key, and its `prev` must be the hash of the line before it (across files, read
//! oldest first). The first line read may follow a line no longer kept (rotated out): its
//! `prev` is reported, not checked.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use ed25519_dalek::VerifyingKey;

use super::chain::{self, GENESIS};

/// The longest line read; a longer one is not a record gatecmd wrote.
const MAX_LINE: usize = 16 * 1024 * 1024;

/// A log that verified.
#[derive(Debug)]
pub struct Checked {
    pub records: u64,
    pub files: Vec<PathBuf>,
    /// The first line read has `prev` = [`GENESIS`]: the log is whole from its start.
    pub from_genesis: bool,
    /// The hash of the last line: what the next record written will carry as `prev`.
    pub last: Option<String>,
}

/// The first line that does not verify: where, and why.
#[derive(Debug, thiserror::Error)]
#[error("{}:{line}: {why}", file.display())]
pub struct Broken {
    pub file: PathBuf,
    pub line: u64,
    pub why: String,
}

/// `path`'s rotated files, oldest first (`path.N` … `path.1`), then `path`, those that
/// exist. A missing `path` with no rotated files gives just `path` (read as an error).
pub fn with_rotated(path: &Path) -> Vec<PathBuf> {
    let numbered = |n: u32| {
        let mut p = path.as_os_str().to_owned();
        p.push(format!(".{n}"));
        PathBuf::from(p)
    };
    // Rotation numbers are contiguous from 1; a gap would be a deleted file (and the chain
    // names its absence at the next file's first line).
    let mut n = 1;
    while numbered(n).exists() && n < 10_000 {
        n += 1;
    }
    let mut files: Vec<PathBuf> = (1..n).rev().map(numbered).collect();
    files.push(path.to_path_buf());
    files
}

/// One line as the verifier saw it, for callers that collect records (evidence).
pub struct Seen<'a> {
    pub file: &'a Path,
    /// 1-based.
    pub line: u64,
    pub text: &'a [u8],
}

/// Verifies `files` (oldest first) as one chain signed by `key`.
pub fn verify(files: &[PathBuf], key: &VerifyingKey) -> Result<Checked, Broken> {
    verify_each(files, key, |_| {})
}

/// As [`verify`], handing every verified line to `each`.
pub fn verify_each(
    files: &[PathBuf],
    key: &VerifyingKey,
    mut each: impl FnMut(Seen<'_>),
) -> Result<Checked, Broken> {
    let mut last: Option<String> = None;
    let mut checked = Checked {
        records: 0,
        files: Vec::new(),
        from_genesis: false,
        last: None,
    };
    for file in files {
        let broken = |line, why: String| Broken {
            file: file.clone(),
            line,
            why,
        };
        let f = std::fs::File::open(file).map_err(|e| broken(0, format!("cannot read: {e}")))?;
        let mut reader = std::io::BufReader::new(f);
        let mut buf = Vec::new();
        let mut n = 0u64;
        loop {
            buf.clear();
            let read = std::io::Read::take(&mut reader, MAX_LINE as u64 + 1)
                .read_until(b'\n', &mut buf)
                .map_err(|e| broken(n + 1, format!("cannot read: {e}")))?;
            if read == 0 {
                break;
            }
            n += 1;
            if buf.len() > MAX_LINE {
                return Err(broken(
                    n,
                    format!("longer than {MAX_LINE} bytes: not a record"),
                ));
            }
            let Some(line) = buf.strip_suffix(b"\n") else {
                return Err(broken(
                    n,
                    "cut: the file ends in the middle of this line".into(),
                ));
            };
            check_line(line, key, last.as_deref()).map_err(|why| broken(n, why))?;
            if last.is_none() {
                checked.from_genesis = chain::unseal(line).is_ok_and(|s| s.prev == GENESIS);
            }
            last = Some(chain::line_hash(line));
            checked.records += 1;
            each(Seen {
                file,
                line: n,
                text: line,
            });
        }
        checked.files.push(file.clone());
    }
    checked.last = last;
    Ok(checked)
}

/// One line against the key and the hash of the line before (None: the first line read).
pub fn check_line(line: &[u8], key: &VerifyingKey, before: Option<&str>) -> Result<(), String> {
    let sealed = chain::unseal(line).map_err(str::to_string)?;
    if !sealed.verifies(key) {
        return Err(format!(
            "its signature does not verify with key {}: the line was altered, or signed by another key",
            hex::encode(key.as_bytes())
        ));
    }
    if serde_json::from_slice::<serde_json::Value>(&sealed.signed).is_err() {
        return Err("signed, but not a JSON object".into());
    }
    if let Some(before) = before
        && sealed.prev != before
    {
        return Err(format!(
            "its prev ({}…) is not the hash of the line before it ({}…): a line was removed, inserted or reordered here",
            &sealed.prev[..12],
            &before[..12.min(before.len())]
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{Audit, FILE_NAME, Signer};
    use crate::config::AuditSettings;

    fn write_log(dir: &Path, n: usize, settings: &AuditSettings) -> VerifyingKey {
        let audit = Audit::open(dir, settings).expect("open");
        for i in 0..n {
            audit.record(&serde_json::json!({"event": "x", "n": i}));
        }
        Signer::load_or_create(dir).expect("key").public()
    }

    fn lines(p: &Path) -> Vec<String> {
        std::fs::read_to_string(p)
            .expect("read")
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn put(p: &Path, lines: &[String]) {
        std::fs::write(
            p,
            lines.iter().map(|l| format!("{l}\n")).collect::<String>(),
        )
        .expect("write");
    }

    #[test]
    fn a_log_and_its_rotated_files_verify_and_a_restart_continues_the_chain() {
        let dir = tempfile::tempdir().expect("tmp");
        let s = AuditSettings {
            max_bytes: 900,
            keep: 20,
            ..AuditSettings::default()
        };
        let key = write_log(dir.path(), 12, &s);
        // A second start continues the chain from the last line.
        write_log(dir.path(), 3, &s);
        let files = with_rotated(&dir.path().join(FILE_NAME));
        assert!(files.len() > 3, "{files:?}");
        let ok = verify(&files, &key).expect("verifies");
        assert_eq!(ok.records, 15);
        assert!(ok.from_genesis);
    }

    #[test]
    fn each_tampering_is_named_by_its_line() {
        let dir = tempfile::tempdir().expect("tmp");
        let key = write_log(dir.path(), 6, &AuditSettings::default());
        let path = dir.path().join(FILE_NAME);
        let good = lines(&path);
        let files = [path.clone()];
        let at = |ls: Vec<String>| {
            put(&path, &ls);
            verify(&files, &key).expect_err("tampered").line
        };
        let mut edited = good.clone();
        edited[2] = edited[2].replace("\"n\":2", "\"n\":3");
        assert_eq!(at(edited), 3, "altered");
        let mut removed = good.clone();
        removed.remove(3);
        assert_eq!(at(removed), 4, "removed");
        let mut swapped = good.clone();
        swapped.swap(1, 2);
        assert_eq!(at(swapped), 2, "swapped");
        let mut inserted = good.clone();
        inserted.insert(4, good[1].clone());
        assert_eq!(at(inserted), 5, "inserted");
        let other = Signer::from_seed([9; 32]);
        let mut resigned = good.clone();
        let body = chain::unseal(good[2].as_bytes()).expect("unseal");
        let prev = body.prev.to_string();
        let signed = String::from_utf8(body.signed).expect("utf8");
        let without_prev = signed.replace(&format!(",\"prev\":\"{prev}\""), "");
        let line = other.seal(without_prev.as_bytes(), &prev);
        resigned[2] = String::from_utf8(line)
            .expect("utf8")
            .trim_end()
            .to_string();
        assert_eq!(at(resigned), 3, "re-signed");
        put(&path, &good);
        assert_eq!(verify(&files, &key).expect("untouched").records, 6);
    }
}
