//! `list_files`: one directory beneath a root, and what the root holds for the quota.

use super::error::StagingError;
use super::inspect::{Entry, entry};
use super::quota;
use super::target::Target;

/// At most this many entries are listed (the rest is counted).
pub const MAX_LIST_ENTRIES: usize = 10_000;

/// A directory listing.
#[derive(Debug, Clone)]
pub struct Listing {
    pub target: Target,
    pub entries: Vec<Entry>,
    /// Entries left out beyond [`MAX_LIST_ENTRIES`].
    pub omitted: usize,
    /// Bytes of regular files under the root, at every depth (for the quota).
    pub used_bytes: u64,
    /// Files, directories and other entries under the root, at every depth (for the
    /// entry quota).
    pub used_entries: u64,
}

/// Lists a directory beneath a root, without following any symlink.
pub fn list(t: &Target) -> Result<Listing, StagingError> {
    t.refuse_reserved(true)?;
    let root = t.open_root()?;
    let dir = root.open_dir(&t.rel).map_err(|d| t.denied(d))?;
    let names = dir
        .names()
        .map_err(|e| StagingError::io("listing", &t.display(), e))?;
    let mut entries = Vec::new();
    for n in names {
        // Entries may vanish while we look; skip those.
        if let Ok(Some(st)) = dir.stat(&n) {
            entries.push(entry(&n, &st));
        }
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    let omitted = entries.len().saturating_sub(MAX_LIST_ENTRIES);
    entries.truncate(MAX_LIST_ENTRIES);
    let used = quota::usage(&root).map_err(|e| {
        StagingError::io(
            "counting what is stored under",
            &t.root.display().to_string(),
            e,
        )
    })?;
    Ok(Listing {
        target: t.clone(),
        entries,
        omitted,
        used_bytes: used.bytes,
        used_entries: used.entries,
    })
}
