//! The audit log's chain and signatures (docs/AUDIT.md "Chain and signatures").
//!
//! Every line ends in two members the log adds after bounding the record:
//! `…,"prev":"<64 hex>","sig":"<128 hex>"}`.
//! - `prev` is the hex SHA-256 of the previous line's bytes (the whole line, its `sig`
//!   included, without its `\n`), continuing across rotation; the first line ever written
//!   has [`GENESIS`].
//! - `sig` is the ed25519 signature, by the host's key, of the line's bytes with the
//!   `,"sig":"…"` member removed: everything up to and including `prev`'s closing quote,
//!   followed by `}`. So the signed bytes are exactly what is on disk, no canonical form to
//!   agree on, and the signature covers `prev`.
//!
//! The key (`<state_dir>/audit.key`, the 32-byte seed in hex, owner-only) is made at the
//! first start and never logged; `gatecmd audit key` prints its public half.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A public key (what `gatecmd audit key` prints, in hex).
pub use ed25519_dalek::VerifyingKey;
use ed25519_dalek::{Signature, Signer as _, SigningKey, Verifier as _};
use sha2::{Digest, Sha256};

/// The key's file name inside the state directory.
pub const KEY_FILE: &str = "audit.key";
/// `prev` of the first line ever written.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";
/// Bytes the chain adds to a line: `,"prev":"` 64 `"` and `,"sig":"` 128 `"`.
pub(super) const CHAIN_BYTES: usize = PREV_MEMBER + SIG_MEMBER;
const PREV_MEMBER: usize = 9 + 64 + 1;
const SIG_MEMBER: usize = 8 + 128 + 1;

/// Why the key cannot be read or made.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("cannot read the audit key {path}: {source}; {hint}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
        hint: &'static str,
    },
    #[error(
        "cannot create the audit key {path}: {source}; check that gatecmd may write its state directory"
    )]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the audit key {path} is not 64 hex digits; restore it from a backup (a new key would not verify the records already signed)"
    )]
    Malformed { path: PathBuf },
    #[error("`{0}` is not an ed25519 public key (64 hex digits, as `gatecmd audit key` prints it)")]
    Public(String),
}

/// The host's signing key.
pub struct Signer {
    key: SigningKey,
}

impl Signer {
    /// The key at `<state_dir>/audit.key`, made (owner-only) when there is none yet.
    pub fn load_or_create(state_dir: &Path) -> Result<Signer, KeyError> {
        let path = state_dir.join(KEY_FILE);
        match Signer::load(&path) {
            Err(KeyError::Read { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                match Signer::create(&path) {
                    // Another process made it between our read and our create.
                    Err(KeyError::Create { source, .. })
                        if source.kind() == std::io::ErrorKind::AlreadyExists =>
                    {
                        Signer::load(&path)
                    }
                    other => other,
                }
            }
            other => other,
        }
    }

    /// The key at `path`; a file others may read is tightened to 0600 with a warning.
    pub fn load(path: &Path) -> Result<Signer, KeyError> {
        let read = |source| KeyError::Read {
            path: path.to_path_buf(),
            source,
            hint: "run as the service's user (or root), or start `gatecmd serve` once to make it",
        };
        let mut file = File::open(path).map_err(read)?;
        let mode = file.metadata().map_err(read)?.permissions().mode();
        if mode & 0o077 != 0 {
            tracing::warn!(path = %path.display(), mode = format!("{:o}", mode & 0o777),
                "the audit key was readable by others; made owner-only (if anyone read it, they can sign records)");
            file.set_permissions(std::fs::Permissions::from_mode(0o600))
                .map_err(read)?;
        }
        let mut text = String::new();
        Read::by_ref(&mut file)
            .take(256)
            .read_to_string(&mut text)
            .map_err(read)?;
        let seed = decode32(text.trim()).ok_or_else(|| KeyError::Malformed {
            path: path.to_path_buf(),
        })?;
        Ok(Signer {
            key: SigningKey::from_bytes(&seed),
        })
    }

    fn create(path: &Path) -> Result<Signer, KeyError> {
        let err = |source| KeyError::Create {
            path: path.to_path_buf(),
            source,
        };
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| err(std::io::Error::other(e.to_string())))?;
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(err)?;
        file.write_all(format!("{}\n", hex::encode(seed)).as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(err)?;
        if let Some(dir) = path.parent() {
            File::open(dir).and_then(|d| d.sync_all()).map_err(err)?;
        }
        tracing::info!(path = %path.display(), "audit key made (its public half: `gatecmd audit key`)");
        Ok(Signer {
            key: SigningKey::from_bytes(&seed),
        })
    }

    /// A key from a seed (tests and the bench).
    pub fn from_seed(seed: [u8; 32]) -> Signer {
        Signer {
            key: SigningKey::from_bytes(&seed),
        }
    }

    /// The public key, hex (64 digits).
    pub fn public_hex(&self) -> String {
        hex::encode(self.key.verifying_key().as_bytes())
    }

    /// The public key.
    pub fn public(&self) -> VerifyingKey {
        self.key.verifying_key()
    }

    /// `body` (one JSON object, no `\n`) with `prev` and `sig` added, and a `\n`.
    pub fn seal(&self, body: &[u8], prev: &str) -> Vec<u8> {
        let open = body.strip_suffix(b"}").unwrap_or(body);
        let mut out = Vec::with_capacity(body.len() + CHAIN_BYTES + 2);
        out.extend_from_slice(open);
        if open.len() > 1 {
            out.push(b',');
        }
        out.extend_from_slice(b"\"prev\":\"");
        out.extend_from_slice(prev.as_bytes());
        out.extend_from_slice(b"\"}");
        let sig = self.key.sign(&out);
        out.pop();
        out.extend_from_slice(b",\"sig\":\"");
        out.extend_from_slice(hex::encode(sig.to_bytes()).as_bytes());
        out.extend_from_slice(b"\"}\n");
        out
    }
}

/// The hex SHA-256 of a line (its bytes without the `\n`): the next line's `prev`.
pub fn line_hash(line: &[u8]) -> String {
    hex::encode(Sha256::digest(line))
}

/// A line taken apart: the bytes its signature covers, its `prev`, its signature.
pub struct Sealed<'a> {
    pub signed: Vec<u8>,
    pub prev: &'a str,
    pub sig: Signature,
}

/// Splits a line (without `\n`) as [`Signer::seal`] made it; `Err` says what is wrong.
pub fn unseal(line: &[u8]) -> Result<Sealed<'_>, &'static str> {
    const NOT: &str = "not a signed audit record (no `prev` and `sig` at its end: cut by a crash, altered, or written before signing)";
    let body = line.strip_suffix(b"\"}").ok_or(NOT)?;
    let (head, sig_hex) = body
        .split_at_checked(body.len().checked_sub(128).ok_or(NOT)?)
        .ok_or(NOT)?;
    let head = head.strip_suffix(b",\"sig\":\"").ok_or(NOT)?;
    let sig_bytes: [u8; 64] = hex::decode(sig_hex)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or(NOT)?;
    let prev_at = head.len().checked_sub(65).ok_or(NOT)?;
    let (with_key, prev) = head.split_at(prev_at);
    if !with_key.ends_with(b"\"prev\":\"") || !prev.ends_with(b"\"") {
        return Err(NOT);
    }
    let prev = std::str::from_utf8(&prev[..64]).map_err(|_| NOT)?;
    if !prev
        .bytes()
        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    {
        return Err(NOT);
    }
    let mut signed = head.to_vec();
    signed.push(b'}');
    Ok(Sealed {
        signed,
        prev,
        sig: Signature::from_bytes(&sig_bytes),
    })
}

impl Sealed<'_> {
    /// Whether `key` made this signature.
    pub fn verifies(&self, key: &VerifyingKey) -> bool {
        key.verify(&self.signed, &self.sig).is_ok()
    }
}

/// A public key from its hex form (`gatecmd audit key`'s output; whitespace ignored).
pub fn public_key(text: &str) -> Result<VerifyingKey, KeyError> {
    let t = text.trim();
    decode32(t)
        .and_then(|b| VerifyingKey::from_bytes(&b).ok())
        .ok_or_else(|| KeyError::Public(t.chars().take(80).collect()))
}

fn decode32(hex_text: &str) -> Option<[u8; 32]> {
    hex::decode(hex_text).ok()?.try_into().ok()
}

/// The last line of `path` (without `\n`), and whether it was cut (no `\n` at its end).
/// `None` for an empty or missing file.
pub(super) fn last_line(path: &Path) -> std::io::Result<Option<(Vec<u8>, bool)>> {
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(None);
    }
    // Read ever larger tails until one holds a whole last line.
    let mut tail = 16 * 1024u64;
    loop {
        let take = tail.min(len);
        file.seek(SeekFrom::Start(len - take))?;
        let mut buf = Vec::with_capacity(take as usize);
        Read::by_ref(&mut file).take(take).read_to_end(&mut buf)?;
        let cut = buf.last() != Some(&b'\n');
        let body = if cut { &buf[..] } else { &buf[..buf.len() - 1] };
        if let Some(nl) = memchr::memrchr(b'\n', body) {
            return Ok(Some((body[nl + 1..].to_vec(), cut)));
        }
        if take == len {
            return Ok(Some((body.to_vec(), cut)));
        }
        tail *= 4;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_line_unseals_and_verifies_and_one_byte_breaks_it() {
        let s = Signer::from_seed([7; 32]);
        let line = s.seal(br#"{"ts":"t","event":"x"}"#, GENESIS);
        let text = std::str::from_utf8(&line).expect("utf8");
        assert!(text.ends_with("\"}\n"), "{text}");
        let v: serde_json::Value = serde_json::from_str(text).expect("json");
        assert_eq!(v["prev"], GENESIS);
        assert_eq!(v["event"], "x");
        let body = &line[..line.len() - 1];
        let sealed = unseal(body).expect("unseal");
        assert_eq!(sealed.prev, GENESIS);
        assert!(sealed.verifies(&s.public()));
        assert!(!sealed.verifies(&Signer::from_seed([8; 32]).public()));
        assert_eq!(line.len(), 22 + CHAIN_BYTES + 1);
        let mut bad = body.to_vec();
        bad[12] ^= 1;
        assert!(!unseal(&bad).expect("still shaped").verifies(&s.public()));
        assert!(unseal(br#"{"event":"x"}"#).is_err());
    }

    #[test]
    fn the_key_is_made_once_owner_only_and_read_back() {
        let dir = tempfile::tempdir().expect("tmp");
        let a = Signer::load_or_create(dir.path()).expect("made");
        let path = dir.path().join(KEY_FILE);
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let b = Signer::load_or_create(dir.path()).expect("read");
        assert_eq!(a.public_hex(), b.public_hex());
        assert_eq!(
            public_key(&a.public_hex()).expect("parse").as_bytes(),
            a.public().as_bytes()
        );
        std::fs::write(&path, "zz\n").expect("write");
        assert!(matches!(
            Signer::load(&path),
            Err(KeyError::Malformed { .. })
        ));
    }

    #[test]
    fn the_last_line_is_found_whole_or_cut() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("f");
        assert!(last_line(&p).expect("missing").is_none());
        let long = "y".repeat(40_000);
        std::fs::write(&p, format!("a\n{long}\n")).expect("write");
        assert_eq!(
            last_line(&p).expect("read"),
            Some((long.into_bytes(), false))
        );
        std::fs::write(&p, "a\nbc").expect("write");
        assert_eq!(last_line(&p).expect("read"), Some((b"bc".to_vec(), true)));
    }
}
