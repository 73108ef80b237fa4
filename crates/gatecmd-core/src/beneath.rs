//! Resolution that cannot leave a file root, by construction: the one resolver behind file
//! staging (src/staging/) and command file arguments (src/sanitizer/files.rs).
//!
//! Every operation starts from a directory file descriptor of the root and names children
//! relative to it, one plain component at a time: `..` and absolute components are never
//! followed. Staging follows no symlink at all (not even one that points back inside the
//! root: it is simpler to refuse them all than to reason about where each one leads at the
//! moment it is used). The one exception is [`Dir::open_beneath`], for command file
//! arguments: it follows symlinks only while they stay beneath the root (the kernel's
//! `RESOLVE_BENEATH` refuses one that leads out), and without `openat2` it follows none.
//! Directories are opened with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` where the
//! kernel has it (Linux 5.6+), otherwise by a walk of `openat(O_NOFOLLOW | O_DIRECTORY)`
//! per component; the walk also explains a refusal (which component is a symlink or a file).
//! The last component is always handled with `*at` calls on its parent's descriptor and
//! `O_NOFOLLOW` / `AT_SYMLINK_NOFOLLOW`, so swapping a component for a symlink between two
//! calls makes the second call fail instead of escaping.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{FileStat, Mode};

/// A relative path made only of plain components (no `..`, no `/`, no NUL, not empty).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RelPath(Vec<OsString>);

impl RelPath {
    /// Parses a relative path; `.` components are dropped, `..` is refused.
    pub fn parse(p: &Path) -> Result<RelPath, &'static str> {
        let mut out = Vec::new();
        for c in p.components() {
            match c {
                Component::Normal(n) => out.push(n.to_os_string()),
                Component::CurDir => {}
                Component::ParentDir => {
                    return Err("'..' is not allowed: give the path from the root down");
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err("an absolute path here must lie under a file root");
                }
            }
        }
        if out.iter().any(|c| c.as_bytes().contains(&0)) {
            return Err("a path may not contain NUL");
        }
        Ok(RelPath(out))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Number of components.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The parent path and the last component.
    pub fn split_last(&self) -> Option<(RelPath, &OsStr)> {
        let (last, parent) = self.0.split_last()?;
        Some((RelPath(parent.to_vec()), last.as_os_str()))
    }

    /// This path followed by `name`.
    pub fn join(&self, name: &OsStr) -> RelPath {
        let mut v = self.0.clone();
        v.push(name.to_os_string());
        RelPath(v)
    }

    /// As a `Path` (for display and for `openat2`).
    pub fn to_path(&self) -> PathBuf {
        self.0.iter().collect()
    }

    fn prefix(&self, n: usize) -> PathBuf {
        self.0[..n].iter().collect()
    }
}

/// Why a path could not be resolved beneath the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    /// This prefix of the path is a symbolic link.
    Symlink(PathBuf),
    /// This prefix of the path exists but is not a directory.
    NotDir(PathBuf),
    /// This prefix of the path does not exist.
    NotFound(PathBuf),
    /// Creating this prefix would exceed the number of directories the caller allowed.
    TooManyNew(PathBuf),
    /// Another error, at this prefix.
    Io(PathBuf, Errno),
    /// The path leads (through a symlink) out of the root.
    Outside(PathBuf),
}

/// Which way directories are resolved; `Auto` uses `openat2` when the kernel has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolver {
    Auto,
    /// The `openat(O_NOFOLLOW)` walk only (what kernels before 5.6 get; tested directly).
    Walk,
}

// 0: not tried yet, 1: openat2 works, 2: not available (ENOSYS, or refused by seccomp).
static OPENAT2: AtomicU8 = AtomicU8::new(0);

/// Whether `openat2` is in use on this kernel (known after the first resolution).
pub fn openat2_in_use() -> Option<bool> {
    match OPENAT2.load(Ordering::Relaxed) {
        1 => Some(true),
        2 => Some(false),
        _ => None,
    }
}

/// An open directory: the anchor of every `*at` call.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
}

fn owned(fd: RawFd) -> OwnedFd {
    // SAFETY: `fd` was just returned by a successful open call and is owned by no one else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

const DIR_FLAGS: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

impl Dir {
    /// Opens a configured root. The root's own path may contain symlinks: the operator
    /// wrote it. Everything below it is resolved without them.
    pub fn open_root(path: &Path) -> Result<Dir, Errno> {
        let fd = nix::fcntl::open(
            path,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Dir { fd: owned(fd) })
    }

    fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    fn try_clone(&self) -> Result<Dir, Errno> {
        Ok(Dir {
            fd: self.fd.try_clone().map_err(io_errno)?,
        })
    }

    /// Opens the directory `rel` beneath this one (itself when `rel` is empty).
    pub fn open_dir(&self, rel: &RelPath) -> Result<Dir, Denied> {
        self.open_dir_with(rel, Resolver::Auto)
    }

    /// [`Self::open_dir`] with a chosen resolver.
    pub fn open_dir_with(&self, rel: &RelPath, how: Resolver) -> Result<Dir, Denied> {
        if rel.is_empty() {
            return self.try_clone().map_err(|e| Denied::Io(PathBuf::new(), e));
        }
        if how == Resolver::Auto && OPENAT2.load(Ordering::Relaxed) != 2 {
            let open_how = nix::fcntl::OpenHow::new().flags(DIR_FLAGS).resolve(
                nix::fcntl::ResolveFlag::RESOLVE_BENEATH
                    | nix::fcntl::ResolveFlag::RESOLVE_NO_SYMLINKS
                    | nix::fcntl::ResolveFlag::RESOLVE_NO_MAGICLINKS,
            );
            match nix::fcntl::openat2(self.raw(), &rel.to_path(), open_how) {
                Ok(fd) => {
                    OPENAT2.store(1, Ordering::Relaxed);
                    return Ok(Dir { fd: owned(fd) });
                }
                // Old kernel, or a seccomp filter that does not know the call.
                Err(Errno::ENOSYS | Errno::EPERM) => OPENAT2.store(2, Ordering::Relaxed),
                // A refusal (ELOOP, ENOTDIR, ENOENT, ...) or a rename race (EAGAIN): the
                // walk below is just as confined and says which component is at fault.
                Err(_) => {}
            }
        }
        self.walk(rel, None)
    }

    /// Opens the file `rel` beneath this directory in one `openat2` call with
    /// `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`: symlinks are followed only while they stay
    /// beneath this directory (one that leads out fails with `EXDEV`), which is what command
    /// file arguments allow. `O_NOCTTY`, `O_NONBLOCK` (a FIFO swapped in never blocks) and
    /// `O_CLOEXEC` are always added. Where the kernel lacks `openat2`, the stricter walk opens
    /// the parent without following any symlink and the last component with `O_NOFOLLOW`.
    pub fn open_beneath(&self, rel: &RelPath, flags: OFlag) -> Result<File, Denied> {
        let flags = flags | OFlag::O_NOCTTY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
        if OPENAT2.load(Ordering::Relaxed) != 2 {
            let how = nix::fcntl::OpenHow::new().flags(flags).resolve(
                nix::fcntl::ResolveFlag::RESOLVE_BENEATH
                    | nix::fcntl::ResolveFlag::RESOLVE_NO_MAGICLINKS,
            );
            match nix::fcntl::openat2(self.raw(), &rel.to_path(), how) {
                Ok(fd) => {
                    OPENAT2.store(1, Ordering::Relaxed);
                    return clear_nonblock(File::from(owned(fd)))
                        .map_err(|e| Denied::Io(rel.to_path(), e));
                }
                Err(Errno::ENOSYS | Errno::EPERM) => OPENAT2.store(2, Ordering::Relaxed),
                Err(Errno::EXDEV) => return Err(Denied::Outside(rel.to_path())),
                Err(Errno::ENOENT) => return Err(Denied::NotFound(rel.to_path())),
                Err(e) => return Err(Denied::Io(rel.to_path(), e)),
            }
        }
        let (parent, name) = rel.split_last().ok_or(Denied::NotFound(PathBuf::new()))?;
        let dir = self.open_dir_with(&parent, Resolver::Walk)?;
        dir.open_file(name, flags, 0).map_err(|e| match e {
            Errno::ELOOP => Denied::Symlink(rel.to_path()),
            Errno::ENOENT => Denied::NotFound(rel.to_path()),
            e => Denied::Io(rel.to_path(), e),
        })
    }

    /// A directory already opened (and checked) by the caller.
    pub fn from_fd(fd: OwnedFd) -> Dir {
        Dir { fd }
    }

    /// The directory's descriptor, for a child that must inherit it.
    pub fn into_fd(self) -> OwnedFd {
        self.fd
    }

    /// Opens `rel` beneath this directory, creating missing directories (mode 0755 less
    /// the umask) one component at a time, at most `max_new` of them: the one place that
    /// bounds how many directories a caller makes, whatever it counted beforehand.
    pub fn create_dirs(&self, rel: &RelPath, max_new: usize) -> Result<Dir, Denied> {
        self.walk(rel, Some(max_new))
    }

    /// How many trailing components of `rel` do not exist yet (0: all do). An existing
    /// component that is a symlink or not a directory is refused as by [`Self::open_dir`].
    pub fn missing_dirs(&self, rel: &RelPath) -> Result<usize, Denied> {
        match self.open_dir(rel) {
            Ok(_) => Ok(0),
            Err(Denied::NotFound(p)) => Ok(rel.len() + 1 - p.components().count()),
            Err(d) => Err(d),
        }
    }

    /// `create`: `Some(budget)` makes missing directories, at most `budget` of them.
    fn walk(&self, rel: &RelPath, create: Option<usize>) -> Result<Dir, Denied> {
        let mut cur = self
            .try_clone()
            .map_err(|e| Denied::Io(PathBuf::new(), e))?;
        let mut budget = create;
        for (i, name) in rel.0.iter().enumerate() {
            let here = || rel.prefix(i + 1);
            if let Some(left) = budget.as_mut() {
                match nix::sys::stat::mkdirat(
                    Some(cur.raw()),
                    name.as_os_str(),
                    Mode::from_bits_truncate(0o755),
                ) {
                    // Created: undone at once when it is one too many (it is empty).
                    Ok(()) if *left == 0 => {
                        let _ = nix::unistd::unlinkat(
                            Some(cur.raw()),
                            name.as_os_str(),
                            nix::unistd::UnlinkatFlags::RemoveDir,
                        );
                        return Err(Denied::TooManyNew(here()));
                    }
                    Ok(()) => *left -= 1,
                    Err(Errno::EEXIST) => {}
                    Err(e) => return Err(Denied::Io(here(), e)),
                }
            }
            match nix::fcntl::openat(Some(cur.raw()), name.as_os_str(), DIR_FLAGS, Mode::empty()) {
                Ok(fd) => cur = Dir { fd: owned(fd) },
                Err(e) => {
                    return Err(match cur.stat(name) {
                        Ok(Some(st)) if kind_of(&st) == Kind::Symlink => Denied::Symlink(here()),
                        Ok(Some(st)) if kind_of(&st) != Kind::Dir => Denied::NotDir(here()),
                        Ok(None) => Denied::NotFound(here()),
                        _ => Denied::Io(here(), e),
                    });
                }
            }
        }
        Ok(cur)
    }

    /// Opens one child directory, never through a symlink.
    pub fn open_child_dir(&self, name: &OsStr) -> Result<Dir, Errno> {
        let fd = nix::fcntl::openat(Some(self.raw()), name, DIR_FLAGS, Mode::empty())?;
        Ok(Dir { fd: owned(fd) })
    }

    /// Opens this directory's parent through `..`. Only for the quota count, which compares
    /// [`Self::id`] with the directory it came down from, so a directory moved meanwhile
    /// is noticed instead of leading the count elsewhere.
    pub fn open_parent_dir(&self) -> Result<Dir, Errno> {
        self.open_child_dir(OsStr::new(".."))
    }

    /// Device and inode number: which directory this descriptor is.
    pub fn id(&self) -> Result<(u64, u64), Errno> {
        let st = nix::sys::stat::fstat(self.raw())?;
        Ok((st.st_dev, st.st_ino))
    }

    /// `lstat` of a child: `None` when it does not exist.
    pub fn stat(&self, name: &OsStr) -> Result<Option<FileStat>, Errno> {
        match nix::sys::stat::fstatat(Some(self.raw()), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(st)),
            Err(Errno::ENOENT) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Opens a child file. `O_NOFOLLOW` (a symlink fails with ELOOP), `O_NONBLOCK` (a FIFO
    /// swapped in never blocks the open), `O_NOCTTY` and `O_CLOEXEC` are always added; the
    /// caller checks with `fstat` that it got a regular file before using it.
    pub fn open_file(&self, name: &OsStr, flags: OFlag, mode: u32) -> Result<File, Errno> {
        let flags =
            flags | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_NOCTTY | OFlag::O_CLOEXEC;
        let fd = nix::fcntl::openat(
            Some(self.raw()),
            name,
            flags,
            Mode::from_bits_truncate(mode),
        )?;
        clear_nonblock(File::from(owned(fd)))
    }

    /// Renames a child to another child name (replacing it; a symlink there is replaced,
    /// never followed).
    pub fn rename(&self, from: &OsStr, to: &OsStr) -> Result<(), Errno> {
        nix::fcntl::renameat(Some(self.raw()), from, Some(self.raw()), to)
    }

    /// Removes a child that is not a directory.
    pub fn unlink(&self, name: &OsStr) -> Result<(), Errno> {
        nix::unistd::unlinkat(
            Some(self.raw()),
            name,
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        )
    }

    /// Makes renames and unlinks in this directory durable.
    pub fn sync(&self) -> Result<(), Errno> {
        nix::unistd::fsync(self.raw())
    }

    /// Names of the children (without `.` and `..`).
    pub fn names(&self) -> Result<Vec<OsString>, Errno> {
        // A fresh descriptor of the same directory: `nix::dir::Dir` owns and closes it.
        let mut d = nix::dir::Dir::openat(Some(self.raw()), ".", DIR_FLAGS, Mode::empty())?;
        let mut out = Vec::new();
        for entry in d.iter() {
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if name != b"." && name != b".." {
                out.push(OsStr::from_bytes(name).to_os_string());
            }
        }
        Ok(out)
    }
}

/// Regular files ignore O_NONBLOCK; clear it anyway so reads and writes are plain.
fn clear_nonblock(file: File) -> Result<File, Errno> {
    let fl = nix::fcntl::fcntl(file.as_raw_fd(), nix::fcntl::FcntlArg::F_GETFL)?;
    let fl = OFlag::from_bits_truncate(fl) & !OFlag::O_NONBLOCK;
    nix::fcntl::fcntl(file.as_raw_fd(), nix::fcntl::FcntlArg::F_SETFL(fl))?;
    Ok(file)
}

fn io_errno(e: std::io::Error) -> Errno {
    Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO))
}

/// The type of a file system object, from its mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
}

impl Kind {
    /// A word for messages and listings.
    pub fn name(self) -> &'static str {
        match self {
            Kind::File => "file",
            Kind::Dir => "dir",
            Kind::Symlink => "symlink",
            Kind::Fifo => "fifo",
            Kind::Socket => "socket",
            Kind::CharDevice => "char_device",
            Kind::BlockDevice => "block_device",
        }
    }
}

/// The kind of a `stat` result.
pub fn kind_of(st: &FileStat) -> Kind {
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => Kind::File,
        libc::S_IFDIR => Kind::Dir,
        libc::S_IFLNK => Kind::Symlink,
        libc::S_IFIFO => Kind::Fifo,
        libc::S_IFSOCK => Kind::Socket,
        libc::S_IFCHR => Kind::CharDevice,
        _ => Kind::BlockDevice,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn rel(s: &str) -> RelPath {
        RelPath::parse(Path::new(s)).expect("valid")
    }

    fn setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let t = tempfile::tempdir().expect("tempdir");
        let root = t.path().join("root");
        let outside = t.path().join("outside");
        std::fs::create_dir_all(root.join("a/b")).expect("mkdir");
        std::fs::create_dir_all(&outside).expect("mkdir");
        std::fs::write(root.join("a/file"), b"x").expect("write");
        symlink(&outside, root.join("out")).expect("symlink");
        symlink("b", root.join("a/inner")).expect("symlink");
        (t, root, outside)
    }

    #[test]
    fn parse_refuses_parent_and_absolute() {
        assert!(RelPath::parse(Path::new("a/../b")).is_err());
        assert!(RelPath::parse(Path::new("/etc")).is_err());
        assert_eq!(rel("./a/./b").to_path(), PathBuf::from("a/b"));
    }

    #[test]
    fn both_resolvers_refuse_symlinks_and_files() {
        let (_t, root, _out) = setup();
        let r = Dir::open_root(&root).expect("root");
        for how in [Resolver::Auto, Resolver::Walk] {
            assert!(r.open_dir_with(&rel("a/b"), how).is_ok(), "{how:?}");
            assert_eq!(
                r.open_dir_with(&rel("out"), how).map(|_| ()),
                Err(Denied::Symlink("out".into())),
                "{how:?}"
            );
            // A symlink that stays inside is refused too.
            assert_eq!(
                r.open_dir_with(&rel("a/inner"), how).map(|_| ()),
                Err(Denied::Symlink("a/inner".into()))
            );
            assert_eq!(
                r.open_dir_with(&rel("a/file/x"), how).map(|_| ()),
                Err(Denied::NotDir("a/file".into()))
            );
            assert_eq!(
                r.open_dir_with(&rel("a/nope/x"), how).map(|_| ()),
                Err(Denied::NotFound("a/nope".into()))
            );
        }
        assert_eq!(openat2_in_use(), Some(true), "this kernel has openat2");
    }

    #[test]
    fn create_dirs_does_not_follow_symlinks() {
        let (_t, root, outside) = setup();
        let r = Dir::open_root(&root).expect("root");
        assert!(r.create_dirs(&rel("new/deep"), 2).is_ok());
        assert!(root.join("new/deep").is_dir());
        assert_eq!(
            r.create_dirs(&rel("out/x"), 8).map(|_| ()),
            Err(Denied::Symlink("out".into()))
        );
        assert!(!outside.join("x").exists());
    }

    #[test]
    fn missing_dirs_are_counted_and_their_creation_bounded() {
        let (_t, root, _outside) = setup();
        let r = Dir::open_root(&root).expect("root");
        assert_eq!(r.missing_dirs(&rel("a/b")), Ok(0));
        assert_eq!(r.missing_dirs(&rel("a/b/c/d/e")), Ok(3));
        assert_eq!(
            r.missing_dirs(&rel("out/x")),
            Err(Denied::Symlink("out".into()))
        );
        assert_eq!(
            r.create_dirs(&rel("a/b/c/d/e"), 2).map(|_| ()),
            Err(Denied::TooManyNew("a/b/c/d/e".into()))
        );
        assert!(root.join("a/b/c/d").is_dir(), "two were allowed");
        assert!(!root.join("a/b/c/d/e").exists(), "the third is undone");
        assert!(r.create_dirs(&rel("a/b/c/d/e"), 1).is_ok());
    }

    #[test]
    fn open_file_does_not_follow_a_final_symlink() {
        let (_t, root, outside) = setup();
        std::fs::write(outside.join("secret"), b"s").expect("write");
        symlink(outside.join("secret"), root.join("link")).expect("symlink");
        let r = Dir::open_root(&root).expect("root");
        assert_eq!(
            r.open_file(OsStr::new("link"), OFlag::O_RDONLY, 0)
                .map(|_| ()),
            Err(Errno::ELOOP)
        );
        let st = r.stat(OsStr::new("link")).expect("stat").expect("exists");
        assert_eq!(kind_of(&st), Kind::Symlink);
    }
}
