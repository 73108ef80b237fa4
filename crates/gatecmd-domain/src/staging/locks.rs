//! Per-file and per-root serialisation of staging operations, and the streamed uploads
//! (`PUT /upload`) being received now with the bytes each was promised.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use dashmap::DashMap;

/// Serialises operations on one key (a file, or a root for its quota). Locks are taken
/// from blocking threads only, so a std mutex is right; entries are removed when unused.
#[derive(Default)]
pub struct KeyedLocks {
    map: DashMap<PathBuf, Arc<Mutex<()>>>,
}

impl KeyedLocks {
    /// Runs `f` while holding the lock of `key`.
    pub fn with<R>(&self, key: &Path, f: impl FnOnce() -> R) -> R {
        let lock = self
            .map
            .entry(key.to_path_buf())
            .or_insert_with(|| Arc::new(Mutex::new(())))
            .clone();
        let r = {
            // A panic while holding it poisons nothing we rely on: the file system is the state.
            let _guard = lock.lock().unwrap_or_else(|p| p.into_inner());
            f()
        };
        drop(lock);
        // Under the shard lock: nobody can clone the Arc between the count and the removal.
        self.map.remove_if(key, |_, v| Arc::strong_count(v) == 1);
        r
    }
}

/// Shared staging state: the locks and the streams. Cheap to share behind the `AppState`.
#[derive(Default)]
pub struct Staging {
    /// One upload (or remove) at a time per file.
    pub files: KeyedLocks,
    /// Quota check and write as one step per root.
    pub roots: KeyedLocks,
    /// The streamed uploads being received now.
    pub streams: Streams,
}

/// One streamed upload being received.
#[derive(Debug)]
struct Stream {
    client: String,
    root: PathBuf,
    /// Bytes promised to it now: counted as used by every other write's quota check in the
    /// root. A window ahead of what it has written, never its whole declared length: a
    /// promise costs the client nothing until its bytes arrive, so it is kept small
    /// (`staging.upload_promise_bytes`) and renewed as the bytes come (issue 46).
    reserved: u64,
    /// Bytes its request declared and has not written yet.
    remaining: u64,
    /// The most it may be promised at once.
    window: u64,
}

/// What every stream is admitted under (from `staging:`).
#[derive(Debug, Clone, Copy)]
pub struct StreamRules {
    /// Streams one client may have at once (`staging.max_uploads_per_client`).
    pub max_per_client: u64,
    /// The most one stream is promised ahead of what it has written
    /// (`staging.upload_promise_bytes`).
    pub promise_bytes: u64,
}

/// Why a stream was not admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimRefused {
    /// The file is being received by another request (of this client or another).
    Busy { client: String },
    /// The client has this many streams already.
    TooMany { max: u64 },
}

/// The streamed uploads being received now, by file (the final path).
#[derive(Default)]
pub struct Streams {
    table: Arc<Mutex<HashMap<PathBuf, Stream>>>,
}

impl Streams {
    /// Admits a stream of `client` into the file `key` under `root`, unless the file is
    /// being received already or the client has `max_per_client` streams. The stream holds
    /// the file until the returned claim is dropped.
    pub fn claim(
        &self,
        key: &Path,
        root: &Path,
        client: &str,
        rules: StreamRules,
    ) -> Result<Claim, ClaimRefused> {
        let max_per_client = rules.max_per_client;
        let mut t = self.table.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = t.get(key) {
            return Err(ClaimRefused::Busy {
                client: s.client.clone(),
            });
        }
        let mine = t.values().filter(|s| s.client == client).count() as u64;
        if mine >= max_per_client {
            return Err(ClaimRefused::TooMany {
                max: max_per_client,
            });
        }
        t.insert(
            key.to_path_buf(),
            Stream {
                client: client.to_string(),
                root: root.to_path_buf(),
                reserved: 0,
                remaining: 0,
                window: rules.promise_bytes,
            },
        );
        Ok(Claim {
            table: self.table.clone(),
            key: key.to_path_buf(),
        })
    }

    /// The client whose stream holds `key`, if one does.
    pub fn holder(&self, key: &Path) -> Option<String> {
        let t = self.table.lock().unwrap_or_else(|p| p.into_inner());
        t.get(key).map(|s| s.client.clone())
    }

    /// Bytes promised to the streams into `root`, but the one into `except`.
    pub fn reserved_in(&self, root: &Path, except: Option<&Path>) -> u64 {
        let t = self.table.lock().unwrap_or_else(|p| p.into_inner());
        t.iter()
            .filter(|(k, s)| s.root == root && Some(k.as_path()) != except)
            .fold(0u64, |sum, (_, s)| sum.saturating_add(s.reserved))
    }

    /// Streams being received now.
    pub fn len(&self) -> usize {
        self.table.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether no stream is being received.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A stream's hold on its file, released when dropped.
#[derive(Debug)]
pub struct Claim {
    table: Arc<Mutex<HashMap<PathBuf, Stream>>>,
    key: PathBuf,
}

impl Claim {
    /// The file this claim holds.
    pub fn key(&self) -> &Path {
        &self.key
    }

    /// Sets the bytes its request declared (`remaining`) and promises it `promised` of
    /// them now.
    pub(super) fn set_plan(&self, remaining: u64, promised: u64) {
        let mut t = self.table.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = t.get_mut(&self.key) {
            s.remaining = remaining;
            s.reserved = promised.min(remaining);
        }
    }

    /// Promises it `bytes` from now on (a renewed window).
    pub(super) fn set_reserved(&self, bytes: u64) {
        let mut t = self.table.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = t.get_mut(&self.key) {
            s.reserved = bytes.min(s.remaining);
        }
    }

    /// Bytes still promised to this stream.
    pub(super) fn promised(&self) -> u64 {
        let t = self.table.lock().unwrap_or_else(|p| p.into_inner());
        t.get(&self.key).map_or(0, |s| s.reserved)
    }

    /// Declared bytes not written yet, and the most it may be promised at once.
    pub(super) fn outlook(&self) -> (u64, u64) {
        let t = self.table.lock().unwrap_or_else(|p| p.into_inner());
        t.get(&self.key).map_or((0, 0), |s| (s.remaining, s.window))
    }

    /// Takes `bytes` written off what is promised and what is still to come.
    pub(super) fn wrote(&self, bytes: u64) {
        let mut t = self.table.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = t.get_mut(&self.key) {
            s.reserved = s.reserved.saturating_sub(bytes);
            s.remaining = s.remaining.saturating_sub(bytes);
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut t = self.table.lock().unwrap_or_else(|p| p.into_inner());
        t.remove(&self.key);
    }
}
