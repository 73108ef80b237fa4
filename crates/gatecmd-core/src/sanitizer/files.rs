//! File slots: a caller's path opened beneath a file root, and the open file handed to the
//! child.
//!
//! A path that is checked and then handed to the child can be swapped between the two (a
//! symlink flipped to a file outside the roots). So the check *is* the open: the argument is
//! opened beneath its root with the resolver file staging uses (`Dir::open_beneath` in
//! src/beneath.rs: `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`; symlinks are
//! followed only while they stay beneath the root), and the child is given that open file as
//! `/proc/self/fd/N`, under the file's own name where a tool needs it (`named_link`). What
//! the child reads is exactly what was checked, whatever happens to the path meanwhile.
//!
//! An output cannot be opened before the tool creates it. Its directory is, and the child gets
//! `/proc/self/fd/N/NAME`, so the directory cannot be swapped; the last component can still be
//! replaced by a symlink between the check and the tool's own `open` (docs/SECURITY.md names
//! this residual race).

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use nix::fcntl::OFlag;

use super::error::FileArgError;
use crate::beneath::{Denied, Dir, Kind, RelPath, kind_of};

/// What a command's file slot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// Must exist and be a regular file inside a file root.
    Input,
    /// May be new; its directory must lie inside a file root.
    Output,
}

/// Where file arguments may come from.
#[derive(Debug, Clone, Copy)]
pub struct FileRules<'a> {
    /// The configured `file_roots`; a relative argument lies beneath the first.
    pub roots: &'a [PathBuf],
    /// Whether an input with more than one hard link is accepted (`allow_hardlinked_inputs`).
    pub allow_hardlinked_inputs: bool,
}

/// A file argument opened beneath its root.
#[derive(Debug, Clone)]
pub struct OpenedArg {
    /// The open file (an input) or directory (an output), kept open until the child has
    /// started; the child inherits it under the same number.
    pub fd: Arc<OwnedFd>,
    /// What the argument resolved to, for people: results, logs, the audit record.
    pub real: PathBuf,
    /// What the child is given: `<links>/N/NAME`, a symlink to `/proc/self/fd/N` (or that
    /// path itself), or `/proc/self/fd/N/NAME` for an output.
    pub passed: String,
}

/// Opens a file argument beneath one of the roots, or says why not.
pub fn open_file_arg(
    value: &str,
    kind: FileKind,
    rules: FileRules<'_>,
) -> Result<OpenedArg, FileArgError> {
    let (root, rel) = locate(value, rules.roots)?;
    let dir = Dir::open_root(root).map_err(|errno| FileArgError::RootUnopenable {
        root: root.display().to_string(),
        errno,
    })?;
    match kind {
        FileKind::Input => open_input(root, &dir, &rel, rules.allow_hardlinked_inputs),
        FileKind::Output => open_output(root, dir, &rel),
    }
}

fn open_input(
    root: &Path,
    dir: &Dir,
    rel: &RelPath,
    hardlinks: bool,
) -> Result<OpenedArg, FileArgError> {
    let file = dir
        .open_beneath(rel, OFlag::O_RDONLY)
        .map_err(|d| denied(root, rel, d, ""))?;
    let fd = OwnedFd::from(file);
    let real = real_path(&fd).unwrap_or_else(|| root.join(rel.to_path()));
    let dup = fd
        .try_clone()
        .map_err(|e| FileArgError::Descriptor { why: e.to_string() })?;
    let meta = std::fs::File::from(dup)
        .metadata()
        .map_err(|e| FileArgError::Stat {
            path: real.display().to_string(),
            why: e.to_string(),
        })?;
    if !meta.is_file() {
        return Err(FileArgError::NotRegular {
            path: real.display().to_string(),
        });
    }
    if meta.nlink() > 1 && !hardlinks {
        return Err(FileArgError::HardLinked {
            path: real.display().to_string(),
            links: meta.nlink(),
        });
    }
    let passed = real
        .file_name()
        .and_then(|name| named_link(fd.as_raw_fd(), name))
        .unwrap_or_else(|| format!("/proc/self/fd/{}", fd.as_raw_fd()));
    Ok(OpenedArg {
        fd: Arc::new(fd),
        real,
        passed,
    })
}

/// The open input under its own file name, for tools that look at the name: rkdeveloptool
/// reads a `db`/`ul` loader as a boot file only when its path contains `.bin`
/// (`RKImage.cpp`), which `/proc/self/fd/N` does not. The child gets
/// `<links>/N/<name>`, a symlink to `/proc/self/fd/N`: resolved by the child, it is the
/// descriptor it inherited, so it still reads exactly what was checked. `<links>` is this
/// server's own directory (mode 0700, random name, made once in the temporary directory);
/// `N/` belongs to descriptor N while N is open (no other argument can have that number
/// meanwhile), so whatever an earlier N left there is stale and replaced. `None` (the plain
/// `/proc/self/fd/N`) when the directory cannot be made.
fn named_link(fd: std::os::fd::RawFd, name: &std::ffi::OsStr) -> Option<String> {
    static LINKS: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    let root = LINKS
        .get_or_init(|| {
            use std::os::unix::fs::DirBuilderExt;
            let mut tag = [0u8; 8];
            getrandom::fill(&mut tag).ok()?;
            let dir = std::env::temp_dir().join(format!("gatecmd-args-{}", hex::encode(tag)));
            // `create` fails on anything already there: nobody can plant this directory.
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&dir)
                .map_err(|e| tracing::warn!(dir = %dir.display(), error = %e, "cannot make the directory for named file arguments; tools get /proc/self/fd/N"))
                .ok()?;
            Some(dir)
        })
        .as_ref()?;
    let slot = root.join(fd.to_string());
    let _ = std::fs::remove_dir_all(&slot);
    std::fs::create_dir(&slot).ok()?;
    let link = slot.join(name);
    std::os::unix::fs::symlink(format!("/proc/self/fd/{fd}"), &link).ok()?;
    link.into_os_string().into_string().ok()
}

fn open_output(root: &Path, root_dir: Dir, rel: &RelPath) -> Result<OpenedArg, FileArgError> {
    let (parent, name) = rel.split_last().ok_or(FileArgError::NoOutputName)?;
    // The directory is resolved like an input (symlinks only while they stay beneath the
    // root) and pinned by its descriptor.
    let dir = if parent.is_empty() {
        root_dir
    } else {
        root_dir
            .open_beneath(&parent, OFlag::O_RDONLY | OFlag::O_DIRECTORY)
            .map(|f| Dir::from_fd(OwnedFd::from(f)))
            .map_err(|d| denied(root, &parent, d, "the directory "))?
    };
    let shown = root.join(rel.to_path());
    match dir.stat(name) {
        Ok(None) => {}
        Ok(Some(st)) if kind_of(&st) == Kind::File => {}
        Ok(Some(st)) if kind_of(&st) == Kind::Symlink => {
            return Err(FileArgError::OutputSymlink {
                path: shown.display().to_string(),
            });
        }
        Ok(Some(_)) => {
            return Err(FileArgError::OutputNotRegular {
                path: shown.display().to_string(),
            });
        }
        Err(e) => {
            return Err(FileArgError::Stat {
                path: shown.display().to_string(),
                why: e.desc().to_string(),
            });
        }
    }
    let fd = dir.into_fd();
    let name = name.to_string_lossy().into_owned();
    let real = real_path(&fd).map_or(shown, |d| d.join(&name));
    let passed = format!("/proc/self/fd/{}/{name}", fd.as_raw_fd());
    Ok(OpenedArg {
        fd: Arc::new(fd),
        real,
        passed,
    })
}

/// Where an open descriptor leads now, as the kernel sees it.
fn real_path(fd: &OwnedFd) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()
}

/// Which root `value` names and the path beneath it. A relative path lies beneath the first
/// root; an absolute one must start with a root as configured (or as that root resolves).
fn locate<'a>(value: &str, roots: &'a [PathBuf]) -> Result<(&'a PathBuf, RelPath), FileArgError> {
    let path = Path::new(value);
    if path.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(FileArgError::ParentDir);
    }
    let Some(first) = roots.first() else {
        return Err(FileArgError::NoRoots);
    };
    let parse = |p: &Path, root: &'a PathBuf| {
        RelPath::parse(p)
            .map(|rel| (root, rel))
            .map_err(|why| FileArgError::BadPath {
                value: value.to_string(),
                why,
            })
    };
    if !path.is_absolute() {
        return parse(path, first);
    }
    for root in roots {
        if let Ok(rest) = path.strip_prefix(root) {
            return parse(rest, root);
        }
        if let Some(rest) = root
            .canonicalize()
            .ok()
            .and_then(|r| path.strip_prefix(r).ok().map(Path::to_path_buf))
        {
            return parse(&rest, root);
        }
    }
    Err(FileArgError::OutsideRoots {
        value: value.to_string(),
        roots: roots
            .iter()
            .map(|r| r.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// The refusal for a path that could not be opened beneath its root; `what` names it
/// ("the directory " for an output's parent).
fn denied(root: &Path, rel: &RelPath, d: Denied, what: &'static str) -> FileArgError {
    let at = |p: PathBuf| root.join(p).display().to_string();
    match d {
        Denied::Outside(_) => FileArgError::Escapes {
            what,
            path: root.join(rel.to_path()).display().to_string(),
        },
        Denied::Symlink(p) => FileArgError::Symlink { path: at(p) },
        Denied::NotDir(p) => FileArgError::NotDir { path: at(p) },
        Denied::NotFound(p) => FileArgError::NotFound { what, path: at(p) },
        Denied::TooManyNew(p) | Denied::Io(p, nix::errno::Errno::UnknownErrno) => {
            FileArgError::Unresolvable { path: at(p) }
        }
        Denied::Io(p, errno) => FileArgError::Io { path: at(p), errno },
    }
}
