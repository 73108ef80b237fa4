//! `remove_file`: regular files only, never through a symlink.

use super::error::StagingError;
use super::inspect::lstat_existing;
use super::locks::Staging;
use super::target::Target;
use gatecmd_core::beneath::{Kind, kind_of};

/// Removes a regular file beneath a root; returns its size.
pub fn remove(staging: &Staging, t: &Target) -> Result<u64, StagingError> {
    let key = t.root.join(t.rel.to_path());
    staging.files.with(&key, || {
        let (dir, name) = t.parent()?;
        let st = lstat_existing(t, &dir, name)?;
        match kind_of(&st) {
            Kind::File => {}
            Kind::Dir => {
                return Err(StagingError::IsDirectory {
                    path: t.display(),
                    what: "remove_file removes files only",
                });
            }
            k => {
                return Err(StagingError::NotRegular {
                    path: t.display(),
                    kind: k.name(),
                });
            }
        }
        // unlinkat never follows a symlink and fails on a directory swapped in meanwhile.
        dir.unlink(name)
            .map_err(|e| StagingError::io("removing", &t.display(), e))?;
        dir.sync()
            .map_err(|e| StagingError::io("syncing the directory of", &t.display(), e))?;
        Ok(st.st_size as u64)
    })
}
