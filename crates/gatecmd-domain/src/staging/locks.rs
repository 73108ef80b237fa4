//! Per-file and per-root serialisation of staging operations.

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

/// Shared staging state: the locks. Cheap to share behind the `AppState`.
#[derive(Default)]
pub struct Staging {
    /// One upload (or remove) at a time per file.
    pub files: KeyedLocks,
    /// Quota check and write as one step per root.
    pub roots: KeyedLocks,
}
