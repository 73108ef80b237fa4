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
) -> Result<OpenedArg, String> {
    let (root, rel) = locate(value, rules.roots)?;
    let dir = Dir::open_root(root)
        .map_err(|e| format!("cannot open the file root {}: {}", root.display(), e.desc()))?;
    match kind {
        FileKind::Input => open_input(root, &dir, &rel, rules.allow_hardlinked_inputs),
        FileKind::Output => open_output(root, dir, &rel),
    }
}

fn open_input(root: &Path, dir: &Dir, rel: &RelPath, hardlinks: bool) -> Result<OpenedArg, String> {
    let file = dir
        .open_beneath(rel, OFlag::O_RDONLY)
        .map_err(|d| denied(root, rel, d, ""))?;
    let fd = OwnedFd::from(file);
    let real = real_path(&fd).unwrap_or_else(|| root.join(rel.to_path()));
    let meta = std::fs::File::from(fd.try_clone().map_err(|e| e.to_string())?)
        .metadata()
        .map_err(|e| format!("cannot stat {}: {e}", real.display()))?;
    if !meta.is_file() {
        return Err(format!("{} is not a regular file", real.display()));
    }
    if meta.nlink() > 1 && !hardlinks {
        return Err(format!(
            "{} has {} hard links; an input with more than one link may be a file from outside \
             the file roots, so it is refused (copy the file instead; the operator may set \
             allow_hardlinked_inputs: true)",
            real.display(),
            meta.nlink()
        ));
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

fn open_output(root: &Path, root_dir: Dir, rel: &RelPath) -> Result<OpenedArg, String> {
    let (parent, name) = rel.split_last().ok_or("an output needs a file name")?;
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
            return Err(format!(
                "{} is a symbolic link; outputs must be plain files",
                shown.display()
            ));
        }
        Ok(Some(_)) => {
            return Err(format!(
                "{} exists and is not a regular file",
                shown.display()
            ));
        }
        Err(e) => return Err(format!("cannot stat {}: {}", shown.display(), e.desc())),
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
fn locate<'a>(value: &str, roots: &'a [PathBuf]) -> Result<(&'a PathBuf, RelPath), String> {
    let path = Path::new(value);
    if path.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err("'..' is not allowed in file arguments".into());
    }
    let Some(first) = roots.first() else {
        return Err("no file_roots are configured".into());
    };
    let parse = |p: &Path, root: &'a PathBuf| {
        RelPath::parse(p)
            .map(|rel| (root, rel))
            .map_err(|e| format!("{value:?}: {e}"))
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
    Err(format!(
        "{value} is outside the file roots ({})",
        roots
            .iter()
            .map(|r| r.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// The refusal for a path that could not be opened beneath its root; `what` names it
/// ("the directory " for an output's parent).
fn denied(root: &Path, rel: &RelPath, d: Denied, what: &str) -> String {
    let at = |p: PathBuf| root.join(p).display().to_string();
    let whole = root.join(rel.to_path()).display().to_string();
    match d {
        Denied::Outside(_) => format!(
            "{what}{whole} resolves to somewhere outside the file roots (through a symbolic \
             link that leaves its root, or an absolute one: only relative links that stay \
             beneath the root are followed)"
        ),
        Denied::Symlink(p) => format!("{} is a symbolic link", at(p)),
        Denied::NotDir(p) => format!("{} is not a directory", at(p)),
        Denied::NotFound(p) => format!("cannot resolve {what}{}: no such file or directory", at(p)),
        Denied::TooManyNew(p) | Denied::Io(p, nix::errno::Errno::UnknownErrno) => {
            format!("cannot resolve {}", at(p))
        }
        Denied::Io(p, e) => format!("cannot resolve {}: {}", at(p), e.desc()),
    }
}
