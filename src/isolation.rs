//! Per-board isolation: an isolated command runs in its own mount namespace in which
//! the USB view holds only the chosen board, so a tool with no device selector (upstream
//! `rkdeveloptool`, vendor tools that take "the first device") can only find that board.
//!
//! The view, built between fork and exec of the child (docs/ISOLATION.md has the long
//! form):
//! - `<sysfs_root>/bus/usb/devices` (what libudev and libusb enumerate) is covered by a
//!   read-only tmpfs holding only the board's entry and its interfaces' entries, as the
//!   same relative symlinks the kernel made, so they resolve to the real device
//!   directories (parents, port numbers, attributes all real);
//! - `<devfs_root>/bus/usb` is covered by a read-only tmpfs holding only
//!   `BBB/DDD`, the board's usbfs node, bind-mounted from the real one.
//!
//! Everything the child needs is computed and allocated here, before the fork
//! ([`Plan::new`]); [`Setup::apply`] only makes raw syscalls, as the child of a
//! multithreaded process must (no allocation, no locks). As root the child unshares a
//! mount namespace; as any other user it first unshares a user namespace mapping only
//! its own uid and gid (where the kernel allows unprivileged user namespaces).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use schemars::JsonSchema;
use serde::Serialize;

use crate::devices::DeviceId;

/// Where the real sysfs and devfs are (tests point them at a umockdev testbed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roots {
    pub sysfs: PathBuf,
    pub devfs: PathBuf,
}

impl Roots {
    /// The directory whose listing libudev and libusb enumerate.
    pub fn listing(&self) -> PathBuf {
        self.sysfs.join("bus/usb/devices")
    }

    /// The usbfs device directory (`/dev/bus/usb`).
    pub fn usbfs(&self) -> PathBuf {
        self.devfs.join("bus/usb")
    }
}

/// How the child gets the right to mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Privilege {
    /// gatecmd runs as root: a mount namespace is enough.
    Root,
    /// Unprivileged: a user namespace mapping only gatecmd's own uid and gid, then a
    /// mount namespace inside it.
    UserNamespace,
}

impl Privilege {
    /// The mode this process would use.
    pub fn current() -> Self {
        if nix::unistd::geteuid().is_root() {
            Privilege::Root
        } else {
            Privilege::UserNamespace
        }
    }
}

/// The view an isolated command gets, as dry runs and results show it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct View {
    /// The board (its port path).
    pub device: String,
    /// Bus and device number of the board when the view was built.
    pub busnum: u16,
    pub devnum: u16,
    /// The directory replaced by the view's listing.
    pub sysfs_listing: String,
    /// Entries of that listing in the view (the board and its interfaces).
    pub sysfs_entries: Vec<String>,
    /// The directory replaced by the view's usbfs tree.
    pub usbfs_dir: String,
    /// Device nodes in the view (bind-mounted from the real ones).
    pub device_nodes: Vec<String>,
    /// How the namespace is created.
    pub privilege: Privilege,
}

/// Why an isolated view could not be built. Messages are read by agents and operators.
#[derive(Debug, thiserror::Error)]
pub enum IsolationError {
    #[error(
        "device {device} is not in {listing} (it was unplugged or is re-enumerating); call wait_for_device, then retry"
    )]
    NotInSysfs { device: String, listing: String },
    #[error("cannot read {path} to build the isolated view: {source}")]
    Read { path: String, source: io::Error },
    #[error("device {device} has no usbfs node at {path}; the isolated view would not contain it")]
    NoNode { device: String, path: String },
    #[error("a path for the isolated view contains a NUL byte: {0}")]
    Nul(String),
    #[error("{0}")]
    Setup(String),
}

/// The child's setup steps, reported back to the server when one fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Step {
    Unshare = 1,
    Setgroups,
    UidMap,
    GidMap,
    MakePrivate,
    OpenNode,
    MountListing,
    Symlink,
    SealListing,
    MountUsbfs,
    MkdirBus,
    CreateNode,
    BindNode,
    SealUsbfs,
}

impl Step {
    fn from_byte(b: u8) -> Option<Step> {
        use Step::*;
        [
            Unshare,
            Setgroups,
            UidMap,
            GidMap,
            MakePrivate,
            OpenNode,
            MountListing,
            Symlink,
            SealListing,
            MountUsbfs,
            MkdirBus,
            CreateNode,
            BindNode,
            SealUsbfs,
        ]
        .into_iter()
        .find(|s| *s as u8 == b)
    }
}

/// A view and the syscall-ready setup that builds it.
#[derive(Debug, Clone)]
pub struct Plan {
    pub view: View,
    pub setup: Arc<Setup>,
}

impl Plan {
    /// Reads the board's current state (entries, bus and device number) from sysfs and
    /// prepares the setup. Call it right before spawning: a board that re-enumerated
    /// since the last command gets a view of it as it is now.
    pub fn new(
        roots: &Roots,
        device: &DeviceId,
        privilege: Privilege,
    ) -> Result<Plan, IsolationError> {
        let listing = roots.listing();
        let id = device.as_str();
        let read_err = |path: &Path, source: io::Error| IsolationError::Read {
            path: path.display().to_string(),
            source,
        };
        let entries = std::fs::read_dir(&listing).map_err(|e| read_err(&listing, e))?;
        let interface_prefix = format!("{id}:");
        let mut links = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name != id && !name.starts_with(&interface_prefix) {
                continue;
            }
            let target =
                std::fs::read_link(entry.path()).map_err(|e| read_err(&entry.path(), e))?;
            links.push((name.to_owned(), target));
        }
        links.sort();
        if !links.iter().any(|(n, _)| n == id) {
            return Err(IsolationError::NotInSysfs {
                device: id.to_owned(),
                listing: listing.display().to_string(),
            });
        }
        let attr = |name: &str| -> Result<u16, IsolationError> {
            let path = listing.join(id).join(name);
            let text = std::fs::read_to_string(&path).map_err(|e| read_err(&path, e))?;
            text.trim().parse().map_err(|_| {
                read_err(
                    &path,
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("not a number: {text:?}"),
                    ),
                )
            })
        };
        let (busnum, devnum) = (attr("busnum")?, attr("devnum")?);
        let bus_dir = roots.usbfs().join(format!("{busnum:03}"));
        let node = bus_dir.join(format!("{devnum:03}"));
        if std::fs::symlink_metadata(&node).is_err() {
            return Err(IsolationError::NoNode {
                device: id.to_owned(),
                path: node.display().to_string(),
            });
        }
        let setup = Setup::new(roots, privilege, &links, Some((&bus_dir, &node)))?;
        Ok(Plan {
            view: View {
                device: id.to_owned(),
                busnum,
                devnum,
                sysfs_listing: listing.display().to_string(),
                sysfs_entries: links.into_iter().map(|(n, _)| n).collect(),
                usbfs_dir: roots.usbfs().display().to_string(),
                device_nodes: vec![node.display().to_string()],
                privilege,
            },
            setup: Arc::new(setup),
        })
    }
}

/// Everything [`Setup::apply`] needs, allocated before the fork.
#[derive(Debug)]
pub struct Setup {
    privilege: Privilege,
    root: CString,
    tmpfs: CString,
    tmpfs_options: CString,
    listing: CString,
    /// (target, link path) of each symlink in the listing.
    links: Vec<(CString, CString)>,
    usbfs: CString,
    /// (bus directory, node path) of the board's usbfs node.
    node: Option<(CString, CString)>,
    setgroups_path: CString,
    uid_map_path: CString,
    gid_map_path: CString,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
}

fn cstr(p: &Path) -> Result<CString, IsolationError> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| IsolationError::Nul(p.display().to_string()))
}

fn lit(s: &str) -> CString {
    // Only called with literals, which hold no NUL.
    CString::new(s).unwrap_or_default()
}

impl Setup {
    fn new(
        roots: &Roots,
        privilege: Privilege,
        links: &[(String, PathBuf)],
        node: Option<(&Path, &Path)>,
    ) -> Result<Setup, IsolationError> {
        let listing = roots.listing();
        let uid = nix::unistd::getuid().as_raw();
        let gid = nix::unistd::getgid().as_raw();
        Ok(Setup {
            privilege,
            root: lit("/"),
            tmpfs: lit("tmpfs"),
            tmpfs_options: lit("mode=0755"),
            links: links
                .iter()
                .map(|(name, target)| Ok((cstr(target)?, cstr(&listing.join(name))?)))
                .collect::<Result<_, IsolationError>>()?,
            listing: cstr(&listing)?,
            usbfs: cstr(&roots.usbfs())?,
            node: match node {
                Some((dir, node)) => Some((cstr(dir)?, cstr(node)?)),
                None => None,
            },
            setgroups_path: lit("/proc/self/setgroups"),
            uid_map_path: lit("/proc/self/uid_map"),
            gid_map_path: lit("/proc/self/gid_map"),
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
        })
    }

    /// Builds the view in the calling process. Runs in the forked child before exec:
    /// raw syscalls on memory prepared by [`Setup::new`] only. On failure the failed
    /// step's number is written to `report` (a pipe to the server) before returning.
    pub fn apply(&self, report: RawFd) -> io::Result<()> {
        match self.steps() {
            Ok(()) => Ok(()),
            Err((step, err)) => {
                let b = [step as u8];
                // SAFETY: writing one byte from a stack buffer to a pipe fd.
                unsafe { sys::write(report, b.as_ptr().cast(), 1) };
                Err(err)
            }
        }
    }

    fn steps(&self) -> Result<(), (Step, io::Error)> {
        let fail = |step| move |e| (step, e);
        match self.privilege {
            Privilege::Root => {
                check(unsafe { sys::unshare(libc::CLONE_NEWNS) }).map_err(fail(Step::Unshare))?
            }
            Privilege::UserNamespace => {
                check(unsafe { sys::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) })
                    .map_err(fail(Step::Unshare))?;
                // An unprivileged process may write its gid_map only after giving up
                // setgroups(2); supplementary groups stay as they are (so a plugdev
                // membership still opens device nodes).
                write_file(&self.setgroups_path, b"deny").map_err(fail(Step::Setgroups))?;
                write_file(&self.uid_map_path, &self.uid_map).map_err(fail(Step::UidMap))?;
                write_file(&self.gid_map_path, &self.gid_map).map_err(fail(Step::GidMap))?;
            }
        }
        // Nothing mounted here may propagate back to the host's namespace.
        check(unsafe {
            sys::mount(
                std::ptr::null(),
                self.root.as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            )
        })
        .map_err(fail(Step::MakePrivate))?;
        // Opened before the usbfs tree is covered, and after the unshare: a bind mount's
        // source must be in the caller's mount namespace.
        let node_fd = match &self.node {
            Some((_, node)) => {
                let fd = unsafe { sys::open(node.as_ptr(), libc::O_PATH | libc::O_CLOEXEC, 0) };
                check(fd).map_err(fail(Step::OpenNode))?;
                // Closed on drop, also on the error paths.
                Some(RawFdGuard(fd))
            }
            None => None,
        };
        let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
        self.mount_tmpfs(&self.listing, flags)
            .map_err(fail(Step::MountListing))?;
        for (target, link) in &self.links {
            check(unsafe { sys::symlink(target.as_ptr(), link.as_ptr()) })
                .map_err(fail(Step::Symlink))?;
        }
        seal(&self.listing, flags).map_err(fail(Step::SealListing))?;
        self.mount_tmpfs(&self.usbfs, flags)
            .map_err(fail(Step::MountUsbfs))?;
        if let (Some((dir, node)), Some(fd)) = (&self.node, &node_fd) {
            check(unsafe { sys::mkdir(dir.as_ptr(), 0o755) }).map_err(fail(Step::MkdirBus))?;
            let f = unsafe {
                sys::open(
                    node.as_ptr(),
                    libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                    0o600,
                )
            };
            check(f).map_err(fail(Step::CreateNode))?;
            unsafe { sys::close(f) };
            let mut buf = [0u8; 32];
            let source = proc_fd_path(&mut buf, fd.0);
            check(unsafe {
                sys::mount(
                    source,
                    node.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND,
                    std::ptr::null(),
                )
            })
            .map_err(fail(Step::BindNode))?;
        }
        seal(&self.usbfs, flags).map_err(fail(Step::SealUsbfs))?;
        drop(node_fd);
        Ok(())
    }

    fn mount_tmpfs(&self, target: &CString, flags: libc::c_ulong) -> io::Result<()> {
        check(unsafe {
            sys::mount(
                self.tmpfs.as_ptr(),
                target.as_ptr(),
                self.tmpfs.as_ptr(),
                flags,
                self.tmpfs_options.as_ptr().cast(),
            )
        })
    }

    /// Describes a failed setup for the agent and the operator.
    fn explain(&self, step: Option<Step>, err: &io::Error) -> String {
        let path = |c: &CString| c.to_string_lossy().into_owned();
        let errno = err.raw_os_error().unwrap_or(0);
        let eperm = errno == libc::EPERM || errno == libc::EACCES;
        let what = match step {
            Some(Step::Unshare) if eperm => match self.privilege {
                Privilege::Root => "creating a mount namespace was refused although gatecmd runs as root: it lacks CAP_SYS_ADMIN (a container without it, a seccomp filter, or systemd's RestrictNamespaces=/CapabilityBoundingSet=). Give the service CAP_SYS_ADMIN and allow mount namespaces".to_owned(),
                Privilege::UserNamespace => "creating a user namespace was refused: this host does not allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=0, user.max_user_namespaces=0, or kernel.apparmor_restrict_unprivileged_userns=1). Run gatecmd as root, or enable unprivileged user namespaces".to_owned(),
            },
            Some(Step::Unshare) => "creating the namespace failed".to_owned(),
            Some(Step::Setgroups | Step::UidMap | Step::GidMap) => "mapping gatecmd's uid/gid into the user namespace failed".to_owned(),
            Some(Step::MakePrivate) => "making the child's mounts private failed".to_owned(),
            Some(Step::OpenNode) => match &self.node {
                Some((_, n)) => format!("opening the board's node {} failed (did it just re-enumerate?)", path(n)),
                None => "opening the board's node failed".to_owned(),
            },
            Some(Step::MountListing) => format!("mounting a tmpfs over {} failed (is there a USB bus? is sysfs_root right?)", path(&self.listing)),
            Some(Step::Symlink) => format!("creating the view's entries in {} failed", path(&self.listing)),
            Some(Step::SealListing) | Some(Step::SealUsbfs) => "making the view read-only failed".to_owned(),
            Some(Step::MountUsbfs) => format!("mounting a tmpfs over {} failed (is devfs_root right?)", path(&self.usbfs)),
            Some(Step::MkdirBus) | Some(Step::CreateNode) => format!("creating the board's node in {} failed", path(&self.usbfs)),
            Some(Step::BindNode) => "bind-mounting the board's node into the view failed".to_owned(),
            None => "setting up the isolated view failed".to_owned(),
        };
        format!("isolation: {what}: {err}")
    }

    /// The error of a spawn that failed in the view's setup, with the step the child
    /// reported on `report`; `None` when setup succeeded and the exec itself failed.
    pub fn spawn_error(&self, report: &OwnedFd, err: &io::Error) -> Option<IsolationError> {
        let mut b = [0u8; 1];
        // SAFETY: reading one byte into a stack buffer from a non-blocking pipe.
        let n = unsafe { libc::read(report.as_raw_fd(), b.as_mut_ptr().cast(), 1) };
        (n == 1).then(|| IsolationError::Setup(self.explain(Step::from_byte(b[0]), err)))
    }
}

/// The syscalls the child makes, issued with `syscall(2)` rather than through libc's
/// wrappers: an `LD_PRELOAD` library in the server (umockdev's, in tests) interposes
/// on those wrappers, and its code may take locks or allocate, which a forked child of
/// a multithreaded process must not.
mod sys {
    use libc::{c_char, c_int, c_ulong, c_void};

    fn int(rc: libc::c_long) -> c_int {
        rc as c_int
    }

    pub unsafe fn unshare(flags: c_int) -> c_int {
        int(unsafe { libc::syscall(libc::SYS_unshare, flags) })
    }

    pub unsafe fn mount(
        source: *const c_char,
        target: *const c_char,
        fstype: *const c_char,
        flags: c_ulong,
        data: *const c_void,
    ) -> c_int {
        int(unsafe { libc::syscall(libc::SYS_mount, source, target, fstype, flags, data) })
    }

    pub unsafe fn open(path: *const c_char, flags: c_int, mode: libc::mode_t) -> c_int {
        int(unsafe { libc::syscall(libc::SYS_openat, libc::AT_FDCWD, path, flags, mode) })
    }

    pub unsafe fn symlink(target: *const c_char, link: *const c_char) -> c_int {
        int(unsafe { libc::syscall(libc::SYS_symlinkat, target, libc::AT_FDCWD, link) })
    }

    pub unsafe fn mkdir(path: *const c_char, mode: libc::mode_t) -> c_int {
        int(unsafe { libc::syscall(libc::SYS_mkdirat, libc::AT_FDCWD, path, mode) })
    }

    pub unsafe fn write(fd: c_int, buf: *const c_void, len: usize) -> isize {
        unsafe { libc::syscall(libc::SYS_write, fd, buf, len) as isize }
    }

    pub unsafe fn close(fd: c_int) -> c_int {
        int(unsafe { libc::syscall(libc::SYS_close, fd) })
    }
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// An fd the child closes with a raw syscall (an `OwnedFd` would call libc's `close`).
struct RawFdGuard(RawFd);

impl Drop for RawFdGuard {
    fn drop(&mut self) {
        unsafe { sys::close(self.0) };
    }
}

/// Remounts a tmpfs of the view read-only, so the tool cannot add entries to it.
fn seal(target: &CString, flags: libc::c_ulong) -> io::Result<()> {
    check(unsafe {
        sys::mount(
            std::ptr::null(),
            target.as_ptr(),
            std::ptr::null(),
            libc::MS_REMOUNT | libc::MS_RDONLY | flags,
            std::ptr::null(),
        )
    })
}

fn write_file(path: &CString, data: &[u8]) -> io::Result<()> {
    let fd = unsafe { sys::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC, 0) };
    check(fd)?;
    let n = unsafe { sys::write(fd, data.as_ptr().cast(), data.len()) };
    let err = io::Error::last_os_error();
    unsafe { sys::close(fd) };
    if n < 0 || n as usize != data.len() {
        return Err(err);
    }
    Ok(())
}

/// `/proc/self/fd/<fd>` as a C string in `buf`, without allocating.
fn proc_fd_path(buf: &mut [u8; 32], fd: RawFd) -> *const libc::c_char {
    const PREFIX: &[u8] = b"/proc/self/fd/";
    buf[..PREFIX.len()].copy_from_slice(PREFIX);
    let mut digits = [0u8; 10];
    let mut n = fd.max(0) as u32;
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..len {
        buf[PREFIX.len() + i] = digits[len - 1 - i];
    }
    buf[PREFIX.len() + len] = 0;
    buf.as_ptr().cast()
}

/// A pipe for the child to report a failed step: (read end, write end), both
/// close-on-exec so the tool never inherits them.
pub fn report_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) })?;
    // SAFETY: pipe2 returned two fresh fds we now own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Whether this host lets gatecmd build isolated views with `roots`: a child builds
/// an empty view (no entries, no node) and exits. `gatecmd check` and the first
/// isolated command use it to say exactly what is missing.
pub fn probe(roots: &Roots) -> Result<Privilege, IsolationError> {
    let privilege = Privilege::current();
    let setup = Arc::new(Setup::new(roots, privilege, &[], None)?);
    crate::exec::probe_isolation(setup)?;
    Ok(privilege)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_fd_paths_are_formatted_without_allocating() {
        let mut buf = [0u8; 32];
        for (fd, want) in [
            (0, "/proc/self/fd/0"),
            (7, "/proc/self/fd/7"),
            (1234, "/proc/self/fd/1234"),
        ] {
            let p = proc_fd_path(&mut buf, fd);
            let s = unsafe { std::ffi::CStr::from_ptr(p) };
            assert_eq!(s.to_str().unwrap(), want);
        }
    }

    #[test]
    fn steps_round_trip_through_their_byte() {
        for b in 1..=14u8 {
            assert_eq!(Step::from_byte(b).map(|s| s as u8), Some(b));
        }
        assert_eq!(Step::from_byte(0), None);
        assert_eq!(Step::from_byte(15), None);
    }
}
