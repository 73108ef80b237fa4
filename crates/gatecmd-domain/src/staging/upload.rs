//! Chunked uploads.
//!
//! A chunk at offset 0 starts an upload into `.<name>.gatecmd-upload` in the target's
//! directory (created beneath the root if missing, at most `staging.max_new_dirs_per_call`
//! directories per call, and only after both quotas allowed them and the file). A file lies
//! at most `staging.max_depth` components below its root. Each following chunk must come at
//! exactly the size stored so far. The chunk that carries `sha256` finalises (or, for a
//! streamed upload, the last piece of a request that says it is the last): the whole
//! temporary file is fsynced and hashed, and only when the hash matches is it renamed over
//! `<name>` (then the directory is fsynced). A mismatch deletes the temporary file. So
//! nothing unverified ever appears under the final name, and an interrupted upload leaves
//! only the hidden temporary file, which a later chunk may continue (also after a restart
//! of the server) and which expires after `staging.stale_upload_secs`.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use nix::errno::Errno;
use nix::fcntl::OFlag;

use super::error::StagingError;
use super::inspect::hash_reader;
use super::locks::{Claim, Staging};
use super::quota::{self, Growth};
use super::target::Target;
pub use super::temp::{TEMP_SUFFIX, final_name_of, temp_name};
use crate::config::StagingLimits;
use gatecmd_core::beneath::{Denied, Dir, Kind, RelPath, kind_of};

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

/// One chunk of an upload (a `write_file` call, or a piece of a streamed `PUT /upload`),
/// checked for form.
#[derive(Debug, Clone)]
pub struct Chunk {
    pub offset: u64,
    pub data: Vec<u8>,
    pub truncate: bool,
    /// Whether this chunk finishes the upload, and how the result is checked.
    pub finish: Option<Finish>,
}

/// How an upload's last chunk finishes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finish {
    /// The whole file must have this SHA-256 (lowercase hex) or nothing appears.
    Expect(String),
    /// The file appears as received; its SHA-256 is computed and reported (the streamed
    /// upload's client that did not give one reads it in the answer).
    AsReceived,
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
    /// Stale temporary files removed in passing, and what occupied this upload's
    /// temporary name when it started and was removed (absolute paths).
    pub expired: Vec<String>,
}

/// Writes one chunk of an upload (see the module documentation). Refused while a streamed
/// upload (`PUT /upload`) of the same file is being received.
pub fn write(
    staging: &Staging,
    limits: &StagingLimits,
    stale_after: Duration,
    t: &Target,
    chunk: Chunk,
) -> Result<Written, StagingError> {
    let key = t.root.join(t.rel.to_path());
    if staging.streams.holder(&key).is_some() {
        return Err(StagingError::UploadReceiving {
            path: t.display(),
            by: String::new(),
        });
    }
    write_as(staging, limits, stale_after, t, chunk, None)
}

/// Writes one piece of a streamed upload that `claim` admitted (see [`admit`]): as
/// [`write`], without the per-call chunk limit (the stream's pieces are the server's own),
/// and the bytes written are taken off what the stream was promised.
pub fn write_piece(
    staging: &Staging,
    limits: &StagingLimits,
    stale_after: Duration,
    t: &Target,
    chunk: Chunk,
    claim: &Claim,
) -> Result<Written, StagingError> {
    write_as(staging, limits, stale_after, t, chunk, Some(claim))
}

/// What a streamed upload's request says before its body is read.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Where the body goes (0 starts an upload).
    pub offset: u64,
    /// With offset 0: discard an unfinished upload first.
    pub restart: bool,
    /// The body's length, when the request declares it (`Content-Length`).
    pub length: Option<u64>,
}

/// What a stream may be promised now (issue 46): its declared bytes still to come, at most
/// its window (`staging.upload_promise_bytes`), and never so much that the promises into
/// one root add up to more than half its byte quota. A promise is counted as used by every
/// other write into the root but costs its client nothing until the bytes arrive, so it is
/// kept to a window that is renewed as they come: four header-only requests declaring the
/// largest file hold at most four windows, and the root's other writers go on.
pub fn promise(remaining: u64, window: u64, quota: u64, others: u64) -> u64 {
    remaining
        .min(window)
        .min((quota / 2).saturating_sub(others))
}

/// Admits a streamed upload from its request line and headers, before any of its body is
/// read: the path's form and depth, the file size the body would reach, the state of the
/// upload it starts or continues, the directories it would create and both quotas with the
/// declared length (what other streams into the root were promised counted as used): an
/// upload that cannot fit now is refused before a byte is read. On success the claim is
/// promised a window of the declared length ([`promise`]), renewed piece by piece as the
/// bytes arrive; so an upload admitted may still be refused later, when the root filled
/// meanwhile (what it wrote is kept for a later `PUT`). Each piece beyond the promise is
/// checked as it is written ([`write_piece`]), which is also what bounds a body of
/// undeclared length. Returns what occupied the upload's temporary name and was removed
/// (see [`write`]; absolute paths, for the audit).
pub fn admit(
    staging: &Staging,
    limits: &StagingLimits,
    t: &Target,
    plan: Plan,
    claim: &Claim,
) -> Result<Vec<String>, StagingError> {
    let length = plan.length.unwrap_or(0);
    let names = check_form(limits, t, plan.offset, length, plan.restart, None)?;
    let start = plan.offset == 0;
    let key = t.root.join(t.rel.to_path());
    staging.files.with(&key, || {
        let root = t.open_root()?;
        let dir = match root.open_dir(&names.parent) {
            Ok(dir) => Some(dir),
            Err(Denied::NotFound(_)) if start => None,
            Err(d) => return Err(t.denied(d)),
        };
        let mut cleared = vec![];
        let (dir, existing) = match dir {
            Some(dir) => {
                let dir = if start {
                    clear_temp(dir, t, &names, &mut cleared)?
                } else {
                    dir
                };
                let existing = existing_upload(t, &dir, &names, plan.offset, plan.restart)?;
                (Some(dir), existing)
            }
            None => (None, None),
        };
        staging.roots.with(&t.root, || {
            let missing = match &dir {
                Some(_) => 0,
                None => root.missing_dirs(&names.parent).map_err(|d| t.denied(d))?,
            };
            too_many_dirs(t, limits, missing)?;
            let others = staging.streams.reserved_in(&t.root, Some(claim.key()));
            let freed = if start { existing.unwrap_or(0) } else { 0 };
            let used = quota::check(
                &root,
                &t.root,
                limits,
                Growth {
                    bytes: length,
                    freed,
                    entries: missing as u64 + u64::from(start && existing.is_none()),
                    reserved: others,
                },
            )?;
            let (_, window) = claim.outlook();
            let room = limits
                .quota_bytes_per_root
                .saturating_sub(used.bytes.saturating_sub(freed).saturating_add(others));
            claim.set_plan(
                length,
                promise(length, window, limits.quota_bytes_per_root, others).min(room),
            );
            Ok(cleared)
        })
    })
}

fn write_as(
    staging: &Staging,
    limits: &StagingLimits,
    stale_after: Duration,
    t: &Target,
    chunk: Chunk,
    claim: Option<&Claim>,
) -> Result<Written, StagingError> {
    let len = chunk.data.len() as u64;
    let chunk_max = match claim {
        Some(_) => None,
        None => Some(limits.max_chunk_bytes),
    };
    let names = check_form(limits, t, chunk.offset, len, chunk.truncate, chunk_max)?;
    let start = chunk.offset == 0;
    let key = t.root.join(t.rel.to_path());
    staging.files.with(&key, || {
        let root = t.open_root()?;
        // Directories are created only when an upload starts (after the quota check);
        // later chunks must find the very same path (a component swapped for a symlink
        // meanwhile is refused).
        let dir = match root.open_dir(&names.parent) {
            Ok(dir) => Some(dir),
            Err(Denied::NotFound(_)) if start => None,
            Err(d) => return Err(t.denied(d)),
        };
        let mut expired = vec![];
        let (dir, existing) = match dir {
            Some(dir) => {
                let dir = if start {
                    expired = sweep(&dir, &names.parent_path, stale_after, &names.temp);
                    clear_temp(dir, t, &names, &mut expired)?
                } else {
                    dir
                };
                let existing = existing_upload(t, &dir, &names, chunk.offset, chunk.truncate)?;
                (Some(dir), existing)
            }
            None => (None, None),
        };
        let (dir, file) = staging.roots.with(&t.root, || {
            // A stream's later piece within what it was promised at admission needs no count
            // of the root: every other write counted the promise as used since. (The count
            // walks the whole root: once per piece of 1 MiB would cost a large root dearly.)
            let covered = claim.is_some_and(|c| !start && c.promised() >= len);
            let reserved =
                (!covered).then(|| staging.streams.reserved_in(&t.root, claim.map(Claim::key)));
            let (dir, file, counted) = store(
                &root,
                dir,
                t,
                &names,
                limits,
                Piece {
                    chunk: &chunk,
                    existing,
                    reserved,
                },
            )?;
            if let Some(claim) = claim {
                claim.wrote(len);
                // Counted afresh: the stream's next window, from what is left after this
                // piece (the window is what spares the next pieces a count of the root).
                if let (Some(used), Some(others)) = (counted, reserved) {
                    let (remaining, window) = claim.outlook();
                    let freed = if start { existing.unwrap_or(0) } else { 0 };
                    let after = used
                        .bytes
                        .saturating_sub(freed)
                        .saturating_add(others)
                        .saturating_add(len);
                    let room = limits.quota_bytes_per_root.saturating_sub(after);
                    let next = promise(remaining, window, limits.quota_bytes_per_root, others);
                    claim.set_reserved(next.min(room));
                }
            }
            Ok::<_, StagingError>((dir, file))
        })?;
        let mut written = Written {
            bytes: len,
            size: chunk.offset + len,
            complete: false,
            sha256: None,
            temp_path: names.temp_display.clone(),
            expired,
        };
        if let Some(finish) = &chunk.finish {
            written.sha256 = Some(finalise(&dir, &file, t, &names, finish, written.size)?);
            written.complete = true;
        }
        Ok(written)
    })
}

/// Clears the temporary name of an upload that starts: what is there and is not a regular
/// file was not left by gatecmd's uploads (no staging call can make it: the name is
/// reserved). An empty directory is removed, and so is a symlink, FIFO, socket or device
/// node (only the name: nothing it points to is touched); their paths join `removed`. A
/// directory with content is refused: its content may be someone's, and only the operator
/// removes it.
fn clear_temp(
    dir: Dir,
    t: &Target,
    names: &Names<'_>,
    removed: &mut Vec<String>,
) -> Result<Dir, StagingError> {
    let st = match dir.stat(&names.temp) {
        Ok(Some(st)) => st,
        Ok(None) => return Ok(dir),
        Err(e) => return Err(StagingError::io("inspecting", &names.temp_display, e)),
    };
    match kind_of(&st) {
        Kind::File => Ok(dir),
        Kind::Dir => {
            let fd = dir.into_fd();
            let r = nix::unistd::unlinkat(
                Some(fd.as_raw_fd()),
                names.temp.as_os_str(),
                nix::unistd::UnlinkatFlags::RemoveDir,
            );
            let dir = Dir::from_fd(fd);
            match r {
                Ok(()) => {
                    removed.push(names.temp_display.clone());
                    Ok(dir)
                }
                Err(Errno::ENOTEMPTY | Errno::EEXIST) => Err(StagingError::TempNameTaken {
                    path: t.display(),
                    temp: names.temp_display.clone(),
                    kind: "directory",
                }),
                Err(e) => Err(StagingError::io("removing", &names.temp_display, e)),
            }
        }
        _ => {
            dir.unlink(&names.temp)
                .map_err(|e| StagingError::io("removing", &names.temp_display, e))?;
            removed.push(names.temp_display.clone());
            Ok(dir)
        }
    }
}

/// Where an upload goes: the final name and its hidden temporary name.
struct Names<'a> {
    /// The directory of the file, below the root.
    parent: RelPath,
    /// The same, absolute (for messages and the sweep's report).
    parent_path: PathBuf,
    name: &'a OsStr,
    temp: OsString,
    temp_display: String,
}

/// Checks that need no file system: offsets, sizes, depth and names. `len` bytes at
/// `offset`; `chunk_max`: the per-call chunk limit, when there is one.
fn check_form<'a>(
    limits: &StagingLimits,
    t: &'a Target,
    offset: u64,
    len: u64,
    truncate: bool,
    chunk_max: Option<u64>,
) -> Result<Names<'a>, StagingError> {
    if truncate && offset != 0 {
        return Err(StagingError::TruncateNeedsZeroOffset(offset));
    }
    if let Some(max) = chunk_max
        && len > max
    {
        return Err(StagingError::ChunkTooLarge { bytes: len, max });
    }
    let end = offset.saturating_add(len);
    if end > limits.max_file_bytes {
        return Err(StagingError::FileTooLarge {
            size: end,
            max: limits.max_file_bytes,
        });
    }
    if t.rel.len() as u64 > limits.max_depth {
        return Err(StagingError::TooDeep {
            path: t.display(),
            depth: t.rel.len(),
            max: limits.max_depth,
        });
    }
    let (parent, name) = t.split_last()?;
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
    let parent_path = t.root.join(parent.to_path());
    Ok(Names {
        temp_display: parent_path.join(&temp).display().to_string(),
        parent,
        parent_path,
        name,
        temp,
    })
}

fn too_many_dirs(t: &Target, limits: &StagingLimits, count: usize) -> Result<(), StagingError> {
    if count as u64 > limits.max_new_dirs_per_call {
        return Err(StagingError::TooManyNewDirs {
            path: t.display(),
            count,
            max: limits.max_new_dirs_per_call,
        });
    }
    Ok(())
}

/// The size of the unfinished upload this chunk continues or restarts (`None`: there is
/// none), after checking that the chunk fits it.
fn existing_upload(
    t: &Target,
    dir: &Dir,
    names: &Names<'_>,
    offset: u64,
    truncate: bool,
) -> Result<Option<u64>, StagingError> {
    if let Ok(Some(st)) = dir.stat(names.name)
        && kind_of(&st) == Kind::Dir
    {
        return Err(StagingError::IsDirectory {
            path: t.display(),
            what: "write_file writes files: choose another name",
        });
    }
    let existing = dir
        .stat(&names.temp)
        .map_err(|e| StagingError::io("inspecting", &names.temp_display, e))?;
    if let Some(st) = &existing
        && kind_of(st) != Kind::File
    {
        return Err(StagingError::NotRegular {
            path: names.temp_display.clone(),
            kind: kind_of(st).name(),
        });
    }
    let have = existing.as_ref().map(|st| st.st_size as u64);
    match (offset, have) {
        (0, Some(have)) if have > 0 && !truncate => Err(StagingError::UploadInProgress {
            path: t.display(),
            have,
        }),
        (0, _) => Ok(have),
        (_, None) => Err(StagingError::NoUpload { path: t.display() }),
        (given, Some(have)) if have != given => Err(StagingError::WrongOffset {
            path: t.display(),
            given,
            have,
        }),
        (_, have) => Ok(have),
    }
}

/// What [`store`] writes: the chunk, the size of the unfinished upload it continues or
/// restarts, and the bytes promised to other streams into the root (see [`store`]).
struct Piece<'a> {
    chunk: &'a Chunk,
    existing: Option<u64>,
    reserved: Option<u64>,
}

/// The directory bound, the quota check and the write, as one step under the root's lock:
/// the missing directories and the temporary file are created only once the bound and
/// both quotas allow them. `reserved`: bytes promised to other streams into the root, or
/// `None` when the chunk is a stream's piece within its own promise (no new entry, its
/// bytes already counted by every other write): then the root is not counted again.
/// Returns the root's usage as counted before the write, when it was counted.
fn store(
    root: &Dir,
    dir: Option<Dir>,
    t: &Target,
    names: &Names<'_>,
    limits: &StagingLimits,
    piece: Piece<'_>,
) -> Result<(Dir, File, Option<quota::Usage>), StagingError> {
    let Piece {
        chunk,
        existing,
        reserved,
    } = piece;
    let start = chunk.offset == 0;
    let missing = match &dir {
        Some(_) => 0,
        None => root.missing_dirs(&names.parent).map_err(|d| t.denied(d))?,
    };
    too_many_dirs(t, limits, missing)?;
    let new_file = start && existing.is_none();
    let mut counted = None;
    if let Some(reserved) = reserved {
        counted = Some(quota::check(
            root,
            &t.root,
            limits,
            Growth {
                bytes: chunk.data.len() as u64,
                freed: if start { existing.unwrap_or(0) } else { 0 },
                entries: missing as u64 + u64::from(new_file),
                reserved,
            },
        )?);
    }
    let dir = match dir {
        Some(dir) => dir,
        None => {
            let max = usize::try_from(limits.max_new_dirs_per_call).unwrap_or(usize::MAX);
            root.create_dirs(&names.parent, max).map_err(|d| match d {
                Denied::TooManyNew(_) => StagingError::TooManyNewDirs {
                    path: t.display(),
                    count: missing,
                    max: limits.max_new_dirs_per_call,
                },
                d => t.denied(d),
            })?
        }
    };
    let file = open_temp(&dir, t, names, start)?;
    let io = |op, e: std::io::Error| StagingError::Io {
        op,
        path: names.temp_display.clone(),
        reason: e.to_string(),
    };
    if start {
        file.set_len(0).map_err(|e| io("truncating", e))?;
    } else {
        let size = file.metadata().map_err(|e| io("inspecting", e))?.len();
        if size != chunk.offset {
            return Err(StagingError::WrongOffset {
                path: t.display(),
                given: chunk.offset,
                have: size,
            });
        }
    }
    file.write_all_at(&chunk.data, chunk.offset)
        .map_err(|e| io("writing", e))?;
    start_writeback(&file, chunk.offset, chunk.data.len());
    Ok((dir, file, counted))
}

/// Starts the disk write of what a chunk just put in the page cache, without waiting for
/// it: the fsync that finalises an upload then finds most of the file already on disk, so
/// the disk works while the next chunks arrive (a streamed `PUT /upload` of 64 MiB by curl
/// went from 201 to 259 MB/s here, where `dd conv=fsync` writes 269; docs/PERFORMANCE.md).
/// Advice only: a failure changes nothing but the speed, and the finalising fsync still
/// decides.
fn start_writeback(file: &File, offset: u64, len: usize) {
    let (Ok(off), Ok(n)) = (i64::try_from(offset), i64::try_from(len)) else {
        return;
    };
    // SAFETY: sync_file_range on a descriptor this function borrows, plain integers.
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), off, n, libc::SYNC_FILE_RANGE_WRITE);
    }
}

/// Opens (at the start of an upload: creates) the temporary file, which must be a private
/// regular file.
fn open_temp(dir: &Dir, t: &Target, names: &Names<'_>, create: bool) -> Result<File, StagingError> {
    let flags = if create {
        OFlag::O_RDWR | OFlag::O_CREAT
    } else {
        OFlag::O_RDWR
    };
    let file = dir
        .open_file(&names.temp, flags, 0o644)
        .map_err(|e| match e {
            Errno::ELOOP => StagingError::Symlink {
                path: t.display(),
                link: names.temp_display.clone(),
            },
            Errno::ENOENT => StagingError::NoUpload { path: t.display() },
            e => StagingError::io("opening", &names.temp_display, e),
        })?;
    let st = nix::sys::stat::fstat(file.as_raw_fd())
        .map_err(|e| StagingError::io("inspecting", &names.temp_display, e))?;
    if kind_of(&st) != Kind::File {
        return Err(StagingError::NotRegular {
            path: names.temp_display.clone(),
            kind: kind_of(&st).name(),
        });
    }
    // A hard link planted under the temporary name would let writes land in a file
    // elsewhere (even outside the root); only a private file is written.
    if st.st_nlink != 1 {
        return Err(StagingError::HardLinked {
            path: names.temp_display.clone(),
            links: st.st_nlink as u64,
        });
    }
    Ok(file)
}

/// Hashes what is on disk and, when it matches, renames it into place; a mismatch
/// discards the upload. Returns the verified hash.
fn finalise(
    dir: &Dir,
    file: &File,
    t: &Target,
    names: &Names<'_>,
    finish: &Finish,
    size: u64,
) -> Result<String, StagingError> {
    let io = |op, e: std::io::Error| StagingError::Io {
        op,
        path: names.temp_display.clone(),
        reason: e.to_string(),
    };
    file.sync_all().map_err(|e| io("syncing", e))?;
    let mut reader = file;
    reader
        .seek(SeekFrom::Start(0))
        .map_err(|e| io("reading", e))?;
    let actual = hash_reader(&mut reader).map_err(|e| io("reading", e))?;
    if let Finish::Expect(expected) = finish
        && actual != *expected
    {
        let _ = dir.unlink(&names.temp);
        return Err(StagingError::HashMismatch {
            path: t.display(),
            expected: expected.clone(),
            actual,
            size,
        });
    }
    dir.rename(&names.temp, names.name).map_err(|e| match e {
        Errno::EISDIR | Errno::ENOTEMPTY => StagingError::IsDirectory {
            path: t.display(),
            what: "write_file writes files: choose another name",
        },
        e => StagingError::io("renaming into place", &t.display(), e),
    })?;
    dir.sync()
        .map_err(|e| StagingError::io("syncing the directory of", &t.display(), e))?;
    Ok(actual)
}

/// How far the upload of `t` got: the bytes its unfinished temporary file holds (the
/// offset to continue at), and whether the file itself exists. For a client that lost its
/// connection mid-upload and goes on where it stopped.
pub fn progress(t: &Target) -> Result<Progress, StagingError> {
    let (parent, name) = t.split_last()?;
    let temp = temp_name(name).ok_or_else(|| StagingError::BadPath {
        path: t.display(),
        reason: "the file name is too long",
    })?;
    let root = t.open_root()?;
    let dir = match root.open_dir(&parent) {
        Ok(dir) => dir,
        Err(Denied::NotFound(_)) => return Ok(Progress::default()),
        Err(d) => return Err(t.denied(d)),
    };
    let size_of = |n: &OsStr| -> Result<Option<u64>, StagingError> {
        match dir.stat(n) {
            Ok(Some(st)) if kind_of(&st) == Kind::File => Ok(Some(st.st_size as u64)),
            Ok(_) => Ok(None),
            Err(e) => Err(StagingError::io("inspecting", &t.display(), e)),
        }
    };
    Ok(Progress {
        received: size_of(&temp)?.unwrap_or(0),
        complete_size: size_of(name)?,
    })
}

/// An upload's state, from [`progress`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Progress {
    /// Bytes of the unfinished upload (0: none).
    pub received: u64,
    /// The size of the finished file under its name, if there is one.
    pub complete_size: Option<u64>,
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
