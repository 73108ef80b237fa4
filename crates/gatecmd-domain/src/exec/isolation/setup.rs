//! The child's side: every step that builds the view, prepared before the fork as
//! C strings and byte buffers, so that [`Setup::apply`] in the forked child makes raw
//! syscalls only. A failed step is reported on a pipe as one byte, which
//! [`Setup::spawn_error`] turns into a message for the agent and the operator.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::error::IsolationError;
use super::host::{Privilege, Roots};
use super::sys::{self, RawFdGuard, check, proc_fd_path, seal, write_file};

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
    /// The setup of an empty view (no entries, no node): what the executor's probe
    /// builds in a throw-away child to learn whether isolated commands can run here.
    pub fn empty(roots: &Roots, privilege: Privilege) -> Result<Setup, IsolationError> {
        Setup::new(roots, privilege, &[], None)
    }

    /// The setup of a view holding `links` (name in the listing, symlink target) and,
    /// when given, the usbfs `node` in its bus directory.
    pub(super) fn new(
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
            Some(Step::Unshare) if eperm => {
                let seen = super::confinement::Confinement::read();
                match self.privilege {
                    Privilege::Root => seen.mountns_cause(),
                    Privilege::UserNamespace => seen.userns_cause(),
                }
            }
            Some(Step::Unshare) => "creating the namespace failed".to_owned(),
            Some(Step::Setgroups | Step::UidMap | Step::GidMap) => {
                "mapping gatecmd's uid/gid into the user namespace failed".to_owned()
            }
            Some(Step::MakePrivate) => "making the child's mounts private failed".to_owned(),
            Some(Step::OpenNode) => match &self.node {
                Some((_, n)) => format!(
                    "opening the board's node {} failed (did it just re-enumerate?)",
                    path(n)
                ),
                None => "opening the board's node failed".to_owned(),
            },
            Some(Step::MountListing) => format!(
                "mounting a tmpfs over {} failed (is there a USB bus? is sysfs_root right?)",
                path(&self.listing)
            ),
            Some(Step::Symlink) => format!(
                "creating the view's entries in {} failed",
                path(&self.listing)
            ),
            Some(Step::SealListing) | Some(Step::SealUsbfs) => {
                "making the view read-only failed".to_owned()
            }
            Some(Step::MountUsbfs) => format!(
                "mounting a tmpfs over {} failed (is devfs_root right?)",
                path(&self.usbfs)
            ),
            Some(Step::MkdirBus) | Some(Step::CreateNode) => {
                format!("creating the board's node in {} failed", path(&self.usbfs))
            }
            Some(Step::BindNode) => {
                "bind-mounting the board's node into the view failed".to_owned()
            }
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

/// A pipe for the child to report a failed step: (read end, write end), both
/// close-on-exec so the tool never inherits them.
pub fn report_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) })?;
    // SAFETY: pipe2 returned two fresh fds we now own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_round_trip_through_their_byte() {
        for b in 1..=14u8 {
            assert_eq!(Step::from_byte(b).map(|s| s as u8), Some(b));
        }
        assert_eq!(Step::from_byte(0), None);
        assert_eq!(Step::from_byte(15), None);
    }
}
