//! What a root holds, as the per-root quotas count it, and the check a write must pass.
//!
//! Both quotas count everything beneath the root at every depth, whoever wrote it:
//! bytes of regular files, and entries (a file of any size, a directory, anything else).
//! A deep tree needs no descriptor per level: the count goes down one directory at a time
//! and back up through `..`, checking that it arrived where it came from.

use std::ffi::OsString;
use std::path::Path;

use nix::errno::Errno;

use super::error::StagingError;
use crate::config::StagingLimits;
use gatecmd_core::beneath::{Dir, Kind, kind_of};

/// What a root holds, unfinished uploads included.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Bytes of regular files.
    pub bytes: u64,
    /// Files, directories and other entries (the root itself not included).
    pub entries: u64,
}

/// A directory on the way down, with the names still to look at.
struct Level {
    id: (u64, u64),
    pending: Vec<OsString>,
}

/// Counts everything beneath `root` without following symlinks. A directory that cannot be
/// opened counts as one entry (its content is not gatecmd's). Fails with `EAGAIN` when a
/// directory is moved while it is being counted.
pub fn usage(root: &Dir) -> Result<Usage, Errno> {
    let mut cur = root.open_child_dir(std::ffi::OsStr::new("."))?;
    let mut levels = vec![Level {
        id: cur.id()?,
        pending: cur.names()?,
    }];
    let mut u = Usage::default();
    while let Some(level) = levels.last_mut() {
        let Some(name) = level.pending.pop() else {
            levels.pop();
            let Some(parent) = levels.last() else { break };
            let up = cur.open_parent_dir()?;
            if up.id()? != parent.id {
                return Err(Errno::EAGAIN);
            }
            cur = up;
            continue;
        };
        // Entries may vanish while we look; skip those.
        let Ok(Some(st)) = cur.stat(&name) else {
            continue;
        };
        u.entries += 1;
        match kind_of(&st) {
            Kind::File => u.bytes = u.bytes.saturating_add(st.st_size as u64),
            Kind::Dir => {
                let Ok(sub) = cur.open_child_dir(&name) else {
                    continue;
                };
                if let (Ok(id), Ok(pending)) = (sub.id(), sub.names()) {
                    levels.push(Level { id, pending });
                    cur = sub;
                }
            }
            _ => {}
        }
    }
    Ok(u)
}

/// What one write adds to its root.
#[derive(Debug, Clone, Copy, Default)]
pub struct Growth {
    /// Bytes written by this call.
    pub bytes: u64,
    /// Bytes this call discards first (an unfinished upload restarted).
    pub freed: u64,
    /// Entries this call creates: directories, and the temporary file of a new upload.
    pub entries: u64,
    /// Bytes promised to other uploads being received into the root now (streams admitted
    /// on their declared length): counted as used.
    pub reserved: u64,
}

/// Refuses unless the root stays within both quotas after `growth`. A call that adds
/// nothing (the last, empty chunk of an upload) always passes, so an upload can be finished
/// even when the operator lowered a quota meanwhile.
pub fn check(
    root: &Dir,
    root_path: &Path,
    limits: &StagingLimits,
    growth: Growth,
) -> Result<Usage, StagingError> {
    let used = usage(root).map_err(|e| {
        StagingError::io(
            "counting what is stored under",
            &root_path.display().to_string(),
            e,
        )
    })?;
    if growth.entries > 0 {
        let would = used.entries.saturating_add(growth.entries);
        if would > limits.quota_entries_per_root {
            return Err(StagingError::EntryQuotaExceeded {
                root: root_path.display().to_string(),
                used: used.entries,
                would,
                quota: limits.quota_entries_per_root,
            });
        }
    }
    if growth.bytes > 0 || growth.entries > 0 {
        let would = used
            .bytes
            .saturating_sub(growth.freed)
            .saturating_add(growth.reserved)
            .saturating_add(growth.bytes);
        if would > limits.quota_bytes_per_root {
            return Err(StagingError::QuotaExceeded {
                root: root_path.display().to_string(),
                used: used.bytes,
                reserved: growth.reserved,
                would,
                quota: limits.quota_bytes_per_root,
            });
        }
    }
    Ok(used)
}
