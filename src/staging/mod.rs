//! File staging: agents in VMs have no shared folder, so they list, inspect, upload and
//! remove files inside the configured `file_roots` through MCP tools.
//!
//! - [`beneath`]: resolution that cannot leave a root (no `..`, no symlinks, `*at` calls).
//! - [`upload`]: chunked uploads into a hidden temporary file, verified by SHA-256, then
//!   renamed into place.
//! - this file: paths as agents give them, client rights, listings, stat, remove, the
//!   per-file and per-root locks, and [`audit`].
//!
//! Everything here is blocking file I/O: the tools call it from `spawn_blocking`.

pub mod beneath;
pub mod upload;

use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use dashmap::DashMap;
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::FileStat;
use sha2::{Digest, Sha256};

use crate::config::{ClientStaging, WriteRoots};
use beneath::{Denied, Dir, Kind, RelPath, kind_of};

/// Why a file operation was refused; every message tells the agent what to do next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StagingError {
    #[error(
        "no file_roots are configured on this server, so there is nowhere to keep files; ask the operator to add file_roots"
    )]
    NoRoots,
    #[error(
        "{path:?} is not inside a file root ({roots}); give a path relative to a root or an absolute path under one (list_files shows the roots)"
    )]
    OutsideRoots { path: String, roots: String },
    #[error("{path:?}: {reason}")]
    BadPath { path: String, reason: &'static str },
    #[error(
        "there is no file root {given:?}; give its index (from 0) or its path, one of: {roots}"
    )]
    UnknownRoot { given: String, roots: String },
    #[error("client {client:?} may not write under {root}; {hint}")]
    NotWritable {
        client: String,
        root: String,
        hint: String,
    },
    #[error(
        "{path}: {link} is a symbolic link; gatecmd never follows symlinks inside file roots: use the real directory or file"
    )]
    Symlink { path: String, link: String },
    #[error("{path}: {component} is not a directory")]
    NotADirectory { path: String, component: String },
    #[error("{path}: {missing} does not exist{hint}")]
    NotFound {
        path: String,
        missing: String,
        hint: String,
    },
    #[error(
        "{path} is a {kind}, not a regular file; only regular files can be read, written or removed here"
    )]
    NotRegular { path: String, kind: &'static str },
    #[error("{path} is a directory; {what}")]
    IsDirectory { path: String, what: &'static str },
    #[error(
        "{path} has {links} hard links; an upload is only written through a file with one link (remove it and start again at offset 0)"
    )]
    HardLinked { path: String, links: u64 },
    #[error(
        "this chunk is {bytes} bytes; at most {max} bytes per write_file call: split the file into chunks of at most {max} bytes"
    )]
    ChunkTooLarge { bytes: u64, max: u64 },
    #[error("the file would grow to {size} bytes, more than the {max} bytes allowed for one file")]
    FileTooLarge { size: u64, max: u64 },
    #[error(
        "{root} would hold {would} bytes, more than its quota of {quota} bytes ({used} in use); remove files you no longer need with remove_file, then retry"
    )]
    QuotaExceeded {
        root: String,
        used: u64,
        would: u64,
        quota: u64,
    },
    #[error(
        "offset {given} does not continue the upload of {path}: {have} bytes are stored so far; send the chunk at offset {have}, or restart at offset 0 with truncate: true"
    )]
    WrongOffset { path: String, given: u64, have: u64 },
    #[error(
        "no upload of {path} is in progress (never started, completed, discarded or expired); start it with a chunk at offset 0"
    )]
    NoUpload { path: String },
    #[error(
        "an upload of {path} is already in progress with {have} bytes stored; continue at offset {have}, or restart at offset 0 with truncate: true"
    )]
    UploadInProgress { path: String, have: u64 },
    #[error("truncate: true restarts an upload and needs offset 0 (got offset {0})")]
    TruncateNeedsZeroOffset(u64),
    #[error("content_base64 is not valid base64: {0}")]
    BadBase64(String),
    #[error("sha256 must be 64 hex digits: the SHA-256 of the whole file, e.g. from `sha256sum`")]
    BadSha256,
    #[error(
        "SHA-256 mismatch for {path}: expected {expected}, but the {size} bytes received hash to {actual}; the upload was discarded: send the file again from offset 0"
    )]
    HashMismatch {
        path: String,
        expected: String,
        actual: String,
        size: u64,
    },
    #[error("{name:?} is reserved for unfinished uploads; choose another file name")]
    ReservedName { name: String },
    #[error("{op} {path} failed: {reason}")]
    Io {
        op: &'static str,
        path: String,
        reason: String,
    },
}

impl StagingError {
    fn io(op: &'static str, path: &str, e: Errno) -> Self {
        StagingError::Io {
            op,
            path: path.to_string(),
            reason: e.desc().to_lowercase(),
        }
    }
}

/// A path inside a root, resolved lexically (no file system access yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Index of the root in `file_roots`.
    pub index: usize,
    /// The root as configured.
    pub root: PathBuf,
    /// The path below the root.
    pub rel: RelPath,
}

impl Target {
    /// The absolute path, for messages and results.
    pub fn display(&self) -> String {
        self.root.join(self.rel.to_path()).display().to_string()
    }

    /// The path relative to the root (`.` for the root itself).
    pub fn relative(&self) -> String {
        if self.rel.is_empty() {
            ".".into()
        } else {
            self.rel.to_path().display().to_string()
        }
    }

    fn open_root(&self) -> Result<Dir, StagingError> {
        Dir::open_root(&self.root)
            .map_err(|e| StagingError::io("opening the root", &self.root.display().to_string(), e))
    }

    /// The parent directory (opened beneath the root) and the last component.
    fn parent(&self, create: bool) -> Result<(Dir, &OsStr), StagingError> {
        let Some((parent, name)) = self.rel.split_last() else {
            return Err(StagingError::IsDirectory {
                path: self.display(),
                what: "it is a file root: give a file name inside it",
            });
        };
        let root = self.open_root()?;
        let dir = if create {
            root.create_dirs(&parent)
        } else {
            root.open_dir(&parent)
        };
        Ok((dir.map_err(|d| self.denied(d))?, name))
    }

    fn denied(&self, d: Denied) -> StagingError {
        let at = |p: PathBuf| self.root.join(p).display().to_string();
        match d {
            Denied::Symlink(p) => StagingError::Symlink {
                path: self.display(),
                link: at(p),
            },
            Denied::NotDir(p) => StagingError::NotADirectory {
                path: self.display(),
                component: at(p),
            },
            Denied::NotFound(p) => StagingError::NotFound {
                path: self.display(),
                missing: at(p),
                hint: String::new(),
            },
            Denied::Io(p, e) => StagingError::io("resolving", &at(p), e),
        }
    }
}

/// Which root `list_files` lists: its index in `file_roots` or its path.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum RootSel {
    Index(usize),
    Path(String),
}

fn roots_list(roots: &[PathBuf]) -> String {
    roots
        .iter()
        .map(|r| r.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Resolves what an agent wrote: relative to `root` (or the first root), or absolute
/// under one of the roots. Nothing is opened; `..` is refused outright.
pub fn resolve(
    roots: &[PathBuf],
    root: Option<&RootSel>,
    path: &str,
) -> Result<Target, StagingError> {
    if roots.is_empty() {
        return Err(StagingError::NoRoots);
    }
    let bad = |reason| StagingError::BadPath {
        path: path.to_string(),
        reason,
    };
    if path.contains('\0') {
        return Err(bad("a path may not contain NUL"));
    }
    let chosen = match root {
        None => None,
        Some(sel) => Some(select_root(roots, sel)?),
    };
    let p = Path::new(path);
    if p.components()
        .any(|c| matches!(c, std::path::Component::ParentDir))
    {
        return Err(bad("'..' is not allowed: give the path from the root down"));
    }
    if !p.is_absolute() {
        let index = chosen.unwrap_or(0);
        let rel = RelPath::parse(p).map_err(bad)?;
        return Ok(Target {
            index,
            root: roots[index].clone(),
            rel,
        });
    }
    // The longest root that contains the path, as configured or canonicalised (an agent
    // may give a path it saw in a command's argv, which has symlinks resolved).
    let mut best: Option<(usize, usize, PathBuf)> = None;
    for (i, r) in roots.iter().enumerate() {
        if chosen.is_some_and(|c| c != i) {
            continue;
        }
        let forms = [Some(r.clone()), r.canonicalize().ok()];
        for form in forms.into_iter().flatten() {
            if let Ok(rest) = p.strip_prefix(&form) {
                let len = form.components().count();
                if best.as_ref().is_none_or(|(_, l, _)| len > *l) {
                    best = Some((i, len, rest.to_path_buf()));
                }
            }
        }
    }
    let Some((index, _, rest)) = best else {
        let within = match chosen {
            Some(i) => roots[i].display().to_string(),
            None => roots_list(roots),
        };
        return Err(StagingError::OutsideRoots {
            path: path.to_string(),
            roots: within,
        });
    };
    Ok(Target {
        index,
        root: roots[index].clone(),
        rel: RelPath::parse(&rest).map_err(bad)?,
    })
}

fn select_root(roots: &[PathBuf], sel: &RootSel) -> Result<usize, StagingError> {
    let found = match sel {
        RootSel::Index(i) => (*i < roots.len()).then_some(*i),
        RootSel::Path(s) => match s.parse::<usize>() {
            Ok(i) if i < roots.len() => Some(i),
            _ => roots
                .iter()
                .position(|r| r.components().eq(Path::new(s).components())),
        },
    };
    found.ok_or_else(|| StagingError::UnknownRoot {
        given: match sel {
            RootSel::Index(i) => i.to_string(),
            RootSel::Path(s) => s.clone(),
        },
        roots: roots_list(roots),
    })
}

/// Refuses unless `client` may write under the target's root.
pub fn check_writable(
    client: &str,
    policy: &ClientStaging,
    roots: &[PathBuf],
    t: &Target,
) -> Result<(), StagingError> {
    if policy.write_roots.allows(&t.root) {
        return Ok(());
    }
    let hint = match &policy.write_roots {
        WriteRoots::Only(w) if !w.is_empty() => format!("it may write under: {}", roots_list(w)),
        _ => format!(
            "it may not write files at all (no write_roots for it in the server's config; the roots are {}): ask the operator",
            roots_list(roots)
        ),
    };
    Err(StagingError::NotWritable {
        client: client.to_string(),
        root: t.root.display().to_string(),
        hint,
    })
}

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

/// One line of the audit trail.
#[derive(Debug, Clone)]
pub struct AuditRecord<'a> {
    pub client: &'a str,
    /// `write` (a chunk), `finalize`, `remove`, `expire`, `list`, `stat`.
    pub action: &'static str,
    pub path: &'a str,
    pub bytes: Option<u64>,
    pub sha256: Option<&'a str>,
    /// `None`: allowed; `Some(reason)`: refused.
    pub refused: Option<&'a str>,
}

/// Records a staging decision in the audit log (and the service log): the one place file
/// staging reports to the audit trail.
pub fn audit(log: &crate::audit::Audit, r: &AuditRecord<'_>) {
    log.record(&serde_json::json!({
        "event": "file",
        "client": r.client,
        "action": r.action,
        "path": r.path,
        "bytes": r.bytes,
        "sha256": r.sha256,
        "verdict": if r.refused.is_some() { "refused" } else { "allowed" },
        "reason": r.refused,
    }));
    tracing::info!(
        target: "gatecmd::audit",
        client = %r.client,
        action = r.action,
        path = %r.path,
        bytes = r.bytes,
        sha256 = r.sha256,
        verdict = if r.refused.is_some() { "refused" } else { "allowed" },
        reason = r.refused,
        "file staging"
    );
}

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

fn entry(name: &OsStr, st: &FileStat) -> Entry {
    let name = name.to_string_lossy().into_owned();
    let kind = kind_of(st);
    Entry {
        partial_upload: kind == Kind::File && upload::final_name_of(&name).is_some(),
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

/// At most this many entries are listed (the rest is counted).
pub const MAX_LIST_ENTRIES: usize = 10_000;

/// A directory listing.
#[derive(Debug, Clone)]
pub struct Listing {
    pub target: Target,
    pub entries: Vec<Entry>,
    /// Entries left out beyond [`MAX_LIST_ENTRIES`].
    pub omitted: usize,
    /// Bytes of regular files under the root (for the quota).
    pub used_bytes: u64,
}

/// Lists a directory beneath a root, without following any symlink.
pub fn list(t: &Target) -> Result<Listing, StagingError> {
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
    Ok(Listing {
        target: t.clone(),
        entries,
        omitted,
        used_bytes: upload::usage(&root),
    })
}

/// Stat and SHA-256 of a regular file.
#[derive(Debug, Clone)]
pub struct FileFacts {
    pub entry: Entry,
    pub sha256: String,
}

/// Size and SHA-256 of a regular file beneath a root.
pub fn stat(t: &Target) -> Result<FileFacts, StagingError> {
    let (dir, name) = t.parent(false)?;
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

/// Removes a regular file beneath a root; returns its size.
pub fn remove(staging: &Staging, t: &Target) -> Result<u64, StagingError> {
    let key = t.root.join(t.rel.to_path());
    staging.files.with(&key, || {
        let (dir, name) = t.parent(false)?;
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

/// `lstat` of the target's last component; missing is an error naming an upload in
/// progress when there is one.
fn lstat_existing(t: &Target, dir: &Dir, name: &OsStr) -> Result<FileStat, StagingError> {
    match dir.stat(name) {
        Ok(Some(st)) => Ok(st),
        Ok(None) => {
            let temp = upload::temp_name(name);
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

#[cfg(test)]
mod tests;
