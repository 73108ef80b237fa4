//! Looking at one file: its facts, its SHA-256, and opening it only when it is a regular
//! file (a FIFO or device node is never opened; a symlink is never followed).

use std::ffi::OsStr;
use std::io::Read;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::FileStat;
use sha2::{Digest, Sha256};

use super::error::StagingError;
use super::target::Target;
use super::temp::{final_name_of, temp_name};
use gatecmd_core::beneath::{Dir, Kind, kind_of};

/// Facts about one directory entry or file.
#[derive(Debug, Clone)]
pub struct Entry {
    pub name: String,
    pub kind: Kind,
    pub size: u64,
    /// Seconds and nanoseconds since the epoch.
    pub modified: (i64, i64),
    /// A hidden temporary file of an unfinished upload.
    pub partial_upload: bool,
}

pub(super) fn entry(name: &OsStr, st: &FileStat) -> Entry {
    let name = name.to_string_lossy().into_owned();
    let kind = kind_of(st);
    Entry {
        partial_upload: kind == Kind::File && final_name_of(&name).is_some(),
        name,
        kind,
        size: if kind == Kind::File {
            st.st_size as u64
        } else {
            0
        },
        modified: (st.st_mtime, st.st_mtime_nsec),
    }
}

/// Stat and SHA-256 of a regular file.
#[derive(Debug, Clone)]
pub struct FileFacts {
    pub entry: Entry,
    pub sha256: String,
}

/// Size and SHA-256 of a regular file beneath a root.
pub fn stat(t: &Target) -> Result<FileFacts, StagingError> {
    let (dir, name) = t.parent()?;
    let (mut file, st) = open_regular(t, &dir, name, OFlag::O_RDONLY)?;
    let sha256 = hash_reader(&mut file).map_err(|e| StagingError::Io {
        op: "reading",
        path: t.display(),
        reason: e.to_string(),
    })?;
    Ok(FileFacts {
        entry: entry(name, &st),
        sha256,
    })
}

/// `lstat` of the target's last component; missing is an error naming an upload in
/// progress when there is one.
pub(super) fn lstat_existing(
    t: &Target,
    dir: &Dir,
    name: &OsStr,
) -> Result<FileStat, StagingError> {
    match dir.stat(name) {
        Ok(Some(st)) => Ok(st),
        Ok(None) => {
            let temp = temp_name(name);
            let hint = match temp.as_deref().map(|n| dir.stat(n)) {
                Some(Ok(Some(st))) => format!(
                    " (an unfinished upload of it holds {} bytes; continue it with write_file at offset {})",
                    st.st_size, st.st_size
                ),
                _ => String::new(),
            };
            Err(StagingError::NotFound {
                path: t.display(),
                missing: t.display(),
                hint,
            })
        }
        Err(e) => Err(StagingError::io("inspecting", &t.display(), e)),
    }
}

/// Opens a child that must be a regular file: checked before the open (so a device node or
/// FIFO is never opened) and again on the descriptor (in case it was swapped meanwhile).
fn open_regular(
    t: &Target,
    dir: &Dir,
    name: &OsStr,
    flags: OFlag,
) -> Result<(std::fs::File, FileStat), StagingError> {
    let before = lstat_existing(t, dir, name)?;
    let not_regular = |st: &FileStat| match kind_of(st) {
        Kind::File => None,
        Kind::Symlink => Some(StagingError::Symlink {
            path: t.display(),
            link: t.display(),
        }),
        Kind::Dir => Some(StagingError::IsDirectory {
            path: t.display(),
            what: "give a file (list_files lists directories)",
        }),
        k => Some(StagingError::NotRegular {
            path: t.display(),
            kind: k.name(),
        }),
    };
    if let Some(e) = not_regular(&before) {
        return Err(e);
    }
    let file = dir.open_file(name, flags, 0).map_err(|e| match e {
        Errno::ELOOP => StagingError::Symlink {
            path: t.display(),
            link: t.display(),
        },
        e => StagingError::io("opening", &t.display(), e),
    })?;
    let st = nix::sys::stat::fstat(std::os::fd::AsRawFd::as_raw_fd(&file))
        .map_err(|e| StagingError::io("inspecting", &t.display(), e))?;
    if let Some(e) = not_regular(&st) {
        return Err(e);
    }
    Ok((file, st))
}

/// SHA-256 of everything a reader yields, as lowercase hex.
pub fn hash_reader(r: &mut impl Read) -> std::io::Result<String> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}
