//! The resume journal: per board, the chunks confirmed written to it (offset, length,
//! keyed hash), so that the next flash of the same image reads those chunks back, skips the
//! ones the board still holds, and writes only the rest.
//!
//! **Keys.** The file is the board's (`flash-journal-<board>-<hash>.json` in the caller's
//! state directory); the image's identity is content-based: the hash of each chunk as it
//! streams (crate::chunk_hash, under the journal's own random key). A journal entry applies
//! to a chunk of the image being flashed only when offset, length and hash are all equal;
//! the chunk is then read back and skipped only when the board's bytes *equal* the chunk's.
//! A journal left by another image therefore skips nothing it should not, and no separate
//! image checksum is needed before the first byte is written.
//!
//! **Geometry.** Entries are valid for one grid: block size, start LBA and chunk size are
//! recorded, and a journal of another grid is set aside (started afresh).
//!
//! **Durability.** Written atomically (a temporary file, fsync, rename, fsync of the
//! directory), owner-only (0600 in a 0700 directory created if missing), at most once a
//! second while writing, and at every stop: the end of a phase, an error, a cancel. A
//! process killed outright loses at most the last second of entries, whose chunks are then
//! simply written again.

use std::collections::BTreeMap;
use std::fs::{DirBuilder, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::chunk_hash::{ChunkHash, ChunkKey};
use crate::error::FlashError;

/// The journal's format version. 2: keyed XXH3-128 chunk hashes and the key (format 1 held
/// SHA-256s; such a journal is set aside, so a flash cut by an older gatecmd starts over).
const FORMAT: u32 = 2;
/// Flushed at most this often while chunks are being recorded.
const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// The grid the entries are valid for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Geometry {
    /// Target block size.
    pub block_size: u32,
    /// LBA of image offset 0.
    pub start_lba: u64,
    /// Chunk size.
    pub chunk_size: u64,
}

/// Where the last flash got to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Chunks are being written (or the flash was cut).
    Writing,
    /// Every chunk was written; verification has not completed.
    Written,
    /// Written and verified.
    Verified,
}

#[derive(Serialize, Deserialize)]
struct OnDisk {
    format: u32,
    board: String,
    geometry: Geometry,
    state: State,
    /// What was being flashed, for a person reading the file (not used for matching).
    image: serde_json::Value,
    /// The chunk hashes' secret (hex): the file is owner-only for this.
    key: String,
    /// `[offset, length, hash hex]`, by offset.
    chunks: Vec<(u64, u64, String)>,
}

/// A board's journal, in memory and on disk.
pub struct Journal {
    path: PathBuf,
    board: String,
    geometry: Geometry,
    state: State,
    image: serde_json::Value,
    key: ChunkKey,
    chunks: BTreeMap<u64, (u64, ChunkHash)>,
    dirty: bool,
    last_flush: Instant,
}

/// The file name of `board`'s journal: the name's safe characters (readable) and a hash
/// of the whole name (unique, whatever characters it has).
pub fn file_name(board: &str) -> String {
    let safe: String = board
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .take(48)
        .collect();
    let h = hex::encode(&Sha256::digest(board.as_bytes())[..6]);
    format!("flash-journal-{safe}-{h}.json")
}

impl Journal {
    /// `board`'s journal in `state_dir` (created 0700 if missing). An absent, unreadable,
    /// other-format or other-grid journal starts empty; a state directory that cannot be
    /// created is an error.
    pub fn open(
        state_dir: &Path,
        board: &str,
        geometry: Geometry,
        image: serde_json::Value,
    ) -> Result<Journal, FlashError> {
        if !state_dir.is_dir() {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(state_dir)
                .map_err(|source| FlashError::Journal {
                    path: state_dir.to_path_buf(),
                    action: "created (state directory)",
                    source,
                })?;
        }
        let path = state_dir.join(file_name(board));
        let kept = std::fs::read_to_string(&path)
            .ok()
            .and_then(|text| serde_json::from_str::<OnDisk>(&text).ok())
            .filter(|d| d.format == FORMAT && d.board == board && d.geometry == geometry)
            .and_then(|d| Some((ChunkKey::from_hex(&d.key)?, d.chunks)));
        let (key, chunks) = match kept {
            Some((key, listed)) => {
                let chunks = listed
                    .into_iter()
                    .filter_map(|(off, len, h)| Some((off, (len, ChunkHash::from_hex(&h)?))))
                    .collect();
                (key, chunks)
            }
            None => {
                let key = ChunkKey::random().map_err(|source| FlashError::Journal {
                    path: path.clone(),
                    action: "keyed (no random bytes from the operating system)",
                    source,
                })?;
                (key, BTreeMap::new())
            }
        };
        Ok(Journal {
            path,
            board: board.to_string(),
            geometry,
            state: State::Writing,
            image,
            key,
            chunks,
            dirty: true,
            last_flush: Instant::now(),
        })
    }

    /// Starts over: no chunk is known (a flash without resume).
    pub fn clear(&mut self) {
        self.chunks.clear();
        self.dirty = true;
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Chunks listed.
    pub fn len(&self) -> usize {
        self.chunks.len()
    }

    /// Whether no chunk is listed.
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// The key chunks are hashed with (the journal's own, kept in its file).
    pub fn key(&self) -> &ChunkKey {
        &self.key
    }

    /// Whether the chunk at `offset` of `len` bytes with `hash` was recorded written: a
    /// hint that it is worth reading back, never a reason to skip it on its own.
    pub fn lists(&self, offset: u64, len: u64, hash: &ChunkHash) -> bool {
        self.chunks
            .get(&offset)
            .is_some_and(|(l, h)| *l == len && h == hash)
    }

    /// The entry at `offset` when it is shorter than `len`: the first bytes of a chunk
    /// whose write was cut (each of their transfers acknowledged), with their hash.
    pub fn prefix(&self, offset: u64, len: u64) -> Option<(u64, ChunkHash)> {
        self.chunks
            .get(&offset)
            .filter(|(l, _)| *l > 0 && *l < len)
            .map(|(l, h)| (*l, *h))
    }

    /// Records a chunk confirmed written (the device acknowledged every transfer), or the
    /// first `len` bytes of one whose write was cut.
    pub fn record(&mut self, offset: u64, len: u64, hash: ChunkHash) {
        // A chunk of another grid cell overlapping this one cannot exist on one grid; an
        // entry at the same offset is replaced.
        self.chunks.insert(offset, (len, hash));
        self.dirty = true;
    }

    /// Forgets a chunk (it failed verification: the next flash must write it).
    pub fn forget(&mut self, offset: u64) {
        self.chunks.remove(&offset);
        self.dirty = true;
    }

    /// Sets the state (written on the next flush).
    pub fn set_state(&mut self, s: State) {
        self.state = s;
        self.dirty = true;
    }

    /// Flushes if a second has passed since the last flush.
    pub fn flush_if_due(&mut self) -> Result<(), FlashError> {
        if self.dirty && self.last_flush.elapsed() >= FLUSH_EVERY {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes the journal atomically, owner-only.
    pub fn flush(&mut self) -> Result<(), FlashError> {
        if !self.dirty {
            return Ok(());
        }
        let d = OnDisk {
            format: FORMAT,
            board: self.board.clone(),
            geometry: self.geometry,
            state: self.state,
            image: self.image.clone(),
            key: self.key.to_hex(),
            chunks: self
                .chunks
                .iter()
                .map(|(o, (l, h))| (*o, *l, h.to_hex()))
                .collect(),
        };
        let text = serde_json::to_vec(&d).map_err(|e| FlashError::Journal {
            path: self.path.clone(),
            action: "written",
            source: std::io::Error::other(e),
        })?;
        write_atomic(&self.path, &text).map_err(|source| FlashError::Journal {
            path: self.path.clone(),
            action: "written",
            source,
        })?;
        self.dirty = false;
        self.last_flush = Instant::now();
        Ok(())
    }
}

/// temp file (0600, exclusive) → write → fsync → rename over `path` → fsync the directory.
fn write_atomic(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    // A stale temporary of this process id (a crash mid-write) is ours to replace.
    let _ = std::fs::remove_file(&tmp);
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    let r = f.write_all(data).and_then(|_| f.sync_all());
    if let Err(e) = r {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    std::fs::rename(&tmp, path)?;
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const G: Geometry = Geometry {
        block_size: 512,
        start_lba: 0,
        chunk_size: 1 << 20,
    };

    #[test]
    fn entries_survive_a_reopen_owner_only() {
        let dir = tempfile::tempdir().expect("tmp");
        let state = dir.path().join("state");
        let mut j = Journal::open(&state, "vb1", G, serde_json::json!({})).expect("open");
        j.record(0, 4096, ChunkHash([1; 16]));
        j.record(1 << 20, 512, ChunkHash([2; 16]));
        j.flush().expect("flush");
        let meta = std::fs::metadata(j.path()).expect("meta");
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let dmeta = std::fs::metadata(&state).expect("dir");
        assert_eq!(dmeta.permissions().mode() & 0o777, 0o700);
        let j2 = Journal::open(&state, "vb1", G, serde_json::json!({})).expect("reopen");
        assert!(j2.lists(0, 4096, &ChunkHash([1; 16])));
        assert!(
            !j2.lists(0, 4096, &ChunkHash([2; 16])),
            "another hash is another chunk"
        );
        assert!(
            !j2.lists(0, 512, &ChunkHash([1; 16])),
            "another length is another chunk"
        );
        assert_eq!(j2.key(), j.key(), "the key is kept with the entries");
        // Another grid: set aside.
        let other = Geometry {
            chunk_size: 4 << 20,
            ..G
        };
        let j3 = Journal::open(&state, "vb1", other, serde_json::json!({})).expect("other");
        assert!(j3.is_empty());
        assert_ne!(j3.key(), j.key(), "a journal started afresh gets a new key");
        // Another board: its own file.
        let j4 = Journal::open(&state, "vb2", G, serde_json::json!({})).expect("vb2");
        assert!(j4.is_empty());
        assert_ne!(file_name("vb1"), file_name("vb2"));
        assert_ne!(
            file_name("a/b"),
            file_name("ab"),
            "the hash keeps names apart"
        );
    }

    #[test]
    fn a_format_1_journal_is_set_aside() {
        // gatecmd before keyed hashes wrote SHA-256 entries and no key.
        let dir = tempfile::tempdir().expect("tmp");
        let old = serde_json::json!({"format": 1, "board": "vb1", "geometry": G,
            "state": "writing", "image": {}, "chunks": [[0, 4096, "ab".repeat(32)]]});
        std::fs::write(dir.path().join(file_name("vb1")), old.to_string()).expect("write");
        let j = Journal::open(dir.path(), "vb1", G, serde_json::json!({})).expect("open");
        assert!(j.is_empty());
    }

    #[test]
    fn a_damaged_journal_starts_empty() {
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::write(dir.path().join(file_name("vb1")), b"{ not json").expect("write");
        let j = Journal::open(dir.path(), "vb1", G, serde_json::json!({})).expect("open");
        assert!(j.is_empty());
    }
}
