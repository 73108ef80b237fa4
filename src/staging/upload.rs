//! Chunked uploads.
//!
//! A chunk at offset 0 starts an upload into `.<name>.gatecmd-upload` in the target's
//! directory (created beneath the root if missing). Each following chunk must come at
//! exactly the size stored so far. The chunk that carries `sha256` finalises: the whole
//! temporary file is fsynced and hashed, and only when the hash matches is it renamed over
//! `<name>` (then the directory is fsynced). A mismatch deletes the temporary file. So
//! nothing unverified ever appears under the final name, and an interrupted upload leaves
//! only the hidden temporary file, which a later chunk may continue (also after a restart
//! of the server) and which expires after `staging.stale_upload_secs`.

use std::ffi::OsStr;
use std::io::{Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use nix::errno::Errno;
use nix::fcntl::OFlag;

use super::beneath::{Dir, Kind, kind_of};
use super::error::StagingError;
use super::inspect::hash_reader;
use super::locks::Staging;
use super::quota::usage;
use super::target::Target;
pub use super::temp::{TEMP_SUFFIX, final_name_of, temp_name};
use crate::config::StagingLimits;

/// Decodes a chunk, refusing oversized ones before decoding them.
pub fn decode_chunk(content_base64: &str, max_chunk: u64) -> Result<Vec<u8>, StagingError> {
    // Whitespace is tolerated (some encoders wrap lines); it does not count.
    let compact: String;
    let text = if content_base64.bytes().any(|b| b.is_ascii_whitespace()) {
        compact = content_base64
            .chars()
            .filter(|c| !c.is_ascii_whitespace())
            .collect();
        compact.as_str()
    } else {
        content_base64
    };
    let approx = (text.len() as u64 / 4) * 3;
    if approx > max_chunk + 2 {
        return Err(StagingError::ChunkTooLarge {
            bytes: approx,
            max: max_chunk,
        });
    }
    let data = base64::engine::general_purpose::STANDARD_PAD_INDIFFERENT
        .decode(text)
        .map_err(|e| StagingError::BadBase64(e.to_string()))?;
    if data.len() as u64 > max_chunk {
        return Err(StagingError::ChunkTooLarge {
            bytes: data.len() as u64,
            max: max_chunk,
        });
    }
    Ok(data)
}

/// Parses a SHA-256 given as 64 hex digits (either case).
pub fn parse_sha256(s: &str) -> Result<String, StagingError> {
    let s = s.trim().to_ascii_lowercase();
    let mut out = [0u8; 32];
    hex::decode_to_slice(&s, &mut out).map_err(|_| StagingError::BadSha256)?;
    Ok(s)
}

/// One `write_file` call, checked for form.
#[derive(Debug, Clone)]
pub struct Chunk {
    pub offset: u64,
    pub data: Vec<u8>,
    pub truncate: bool,
    /// Lowercase hex SHA-256 of the whole file: finalises the upload.
    pub sha256: Option<String>,
}

/// What a chunk did.
#[derive(Debug, Clone)]
pub struct Written {
    /// Bytes of this chunk.
    pub bytes: u64,
    /// Bytes stored so far (the next offset), or the final size.
    pub size: u64,
    /// The file is verified and visible under its name.
    pub complete: bool,
    pub sha256: Option<String>,
    /// Path of the temporary file while incomplete.
    pub temp_path: String,
    /// Stale temporary files removed in passing (absolute paths).
    pub expired: Vec<String>,
}

/// Writes one chunk of an upload (see the module documentation).
pub fn write(
    staging: &Staging,
    limits: &StagingLimits,
    stale_after: Duration,
    t: &Target,
    chunk: Chunk,
) -> Result<Written, StagingError> {
    let Chunk {
        offset,
        data,
        truncate,
        sha256,
    } = chunk;
    if truncate && offset != 0 {
        return Err(StagingError::TruncateNeedsZeroOffset(offset));
    }
    let len = data.len() as u64;
    if len > limits.max_chunk_bytes {
        return Err(StagingError::ChunkTooLarge {
            bytes: len,
            max: limits.max_chunk_bytes,
        });
    }
    let end = offset.saturating_add(len);
    if end > limits.max_file_bytes {
        return Err(StagingError::FileTooLarge {
            size: end,
            max: limits.max_file_bytes,
        });
    }
    let Some((parent_rel, name)) = t.rel.split_last() else {
        return Err(StagingError::IsDirectory {
            path: t.display(),
            what: "it is a file root: give a file name inside it",
        });
    };
    let name_str = name.to_string_lossy();
    if final_name_of(&name_str).is_some() {
        return Err(StagingError::ReservedName {
            name: name_str.into_owned(),
        });
    }
    let temp = temp_name(name).ok_or_else(|| StagingError::BadPath {
        path: t.display(),
        reason: "the file name is too long (at most 239 bytes, to leave room for the upload's temporary name)",
    })?;
    let temp_display = t
        .root
        .join(parent_rel.to_path())
        .join(&temp)
        .display()
        .to_string();
    let key = t.root.join(t.rel.to_path());
    staging.files.with(&key, || {
        // Directories are created only when an upload starts; later chunks must find
        // the very same path (a component swapped for a symlink meanwhile is refused).
        let (dir, name) = t.parent(offset == 0)?;
        let expired = if offset == 0 {
            sweep(&dir, &t.root.join(parent_rel.to_path()), stale_after, &temp)
        } else {
            vec![]
        };
        if let Ok(Some(st)) = dir.stat(name)
            && kind_of(&st) == Kind::Dir
        {
            return Err(StagingError::IsDirectory {
                path: t.display(),
                what: "write_file writes files: choose another name",
            });
        }
        let existing = dir
            .stat(&temp)
            .map_err(|e| StagingError::io("inspecting", &temp_display, e))?;
        if let Some(st) = &existing
            && kind_of(st) != Kind::File
        {
            return Err(StagingError::NotRegular {
                path: temp_display.clone(),
                kind: kind_of(st).name(),
            });
        }
        let have = existing.as_ref().map_or(0, |st| st.st_size as u64);
        match (offset, &existing) {
            (0, Some(_)) if have > 0 && !truncate => {
                return Err(StagingError::UploadInProgress {
                    path: t.display(),
                    have,
                });
            }
            (0, _) => {}
            (_, None) => return Err(StagingError::NoUpload { path: t.display() }),
            (_, Some(_)) if have != offset => {
                return Err(StagingError::WrongOffset {
                    path: t.display(),
                    given: offset,
                    have,
                });
            }
            _ => {}
        }
        let restart = offset == 0;
        let file = staging.roots.with(&t.root, || {
            let root = t.open_root()?;
            let used = usage(&root);
            let discarded = if restart { have } else { 0 };
            let would = used.saturating_sub(discarded).saturating_add(len);
            if len > 0 && would > limits.quota_bytes_per_root {
                return Err(StagingError::QuotaExceeded {
                    root: t.root.display().to_string(),
                    used,
                    would,
                    quota: limits.quota_bytes_per_root,
                });
            }
            let flags = if restart {
                OFlag::O_RDWR | OFlag::O_CREAT
            } else {
                OFlag::O_RDWR
            };
            let file = dir.open_file(&temp, flags, 0o644).map_err(|e| match e {
                Errno::ELOOP => StagingError::Symlink {
                    path: t.display(),
                    link: temp_display.clone(),
                },
                Errno::ENOENT => StagingError::NoUpload { path: t.display() },
                e => StagingError::io("opening", &temp_display, e),
            })?;
            let st = nix::sys::stat::fstat(file.as_raw_fd())
                .map_err(|e| StagingError::io("inspecting", &temp_display, e))?;
            if kind_of(&st) != Kind::File {
                return Err(StagingError::NotRegular {
                    path: temp_display.clone(),
                    kind: kind_of(&st).name(),
                });
            }
            // A hard link planted under the temporary name would let writes land in a
            // file elsewhere (even outside the root); only a private file is written.
            if st.st_nlink != 1 {
                return Err(StagingError::HardLinked {
                    path: temp_display.clone(),
                    links: st.st_nlink as u64,
                });
            }
            let io = |op, e: std::io::Error| StagingError::Io {
                op,
                path: temp_display.clone(),
                reason: e.to_string(),
            };
            if restart {
                file.set_len(0).map_err(|e| io("truncating", e))?;
            } else if st.st_size as u64 != offset {
                return Err(StagingError::WrongOffset {
                    path: t.display(),
                    given: offset,
                    have: st.st_size as u64,
                });
            }
            file.write_all_at(&data, offset)
                .map_err(|e| io("writing", e))?;
            Ok(file)
        })?;
        let mut written = Written {
            bytes: len,
            size: end,
            complete: false,
            sha256: None,
            temp_path: temp_display.clone(),
            expired,
        };
        let Some(expected) = sha256 else {
            return Ok(written);
        };
        let io = |op, e: std::io::Error| StagingError::Io {
            op,
            path: temp_display.clone(),
            reason: e.to_string(),
        };
        file.sync_all().map_err(|e| io("syncing", e))?;
        let mut reader = &file;
        reader
            .seek(SeekFrom::Start(0))
            .map_err(|e| io("reading", e))?;
        let actual = hash_reader(&mut reader).map_err(|e| io("reading", e))?;
        if actual != expected {
            let _ = dir.unlink(&temp);
            return Err(StagingError::HashMismatch {
                path: t.display(),
                expected,
                actual,
                size: end,
            });
        }
        dir.rename(&temp, name).map_err(|e| match e {
            Errno::EISDIR | Errno::ENOTEMPTY => StagingError::IsDirectory {
                path: t.display(),
                what: "write_file writes files: choose another name",
            },
            e => StagingError::io("renaming into place", &t.display(), e),
        })?;
        dir.sync()
            .map_err(|e| StagingError::io("syncing the directory of", &t.display(), e))?;
        written.complete = true;
        written.sha256 = Some(actual);
        Ok(written)
    })
}

/// Removes temporary files in `dir` not modified for `stale_after` (except `keep`).
fn sweep(
    dir: &Dir,
    dir_path: &std::path::Path,
    stale_after: Duration,
    keep: &OsStr,
) -> Vec<String> {
    let Ok(names) = dir.names() else {
        return vec![];
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let cutoff = now.saturating_sub(stale_after.as_secs() as i64);
    let mut out = Vec::new();
    for n in names {
        if n == keep || final_name_of(&n.to_string_lossy()).is_none() {
            continue;
        }
        if let Ok(Some(st)) = dir.stat(&n)
            && kind_of(&st) == Kind::File
            && st.st_mtime < cutoff
            && dir.unlink(&n).is_ok()
        {
            out.push(dir_path.join(&n).display().to_string());
        }
    }
    out
}
