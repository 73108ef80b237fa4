//! The syscalls the child makes, issued with `syscall(2)` rather than through libc's
//! wrappers: an `LD_PRELOAD` library in the server (umockdev's, in tests) interposes
//! on those wrappers, and its code may take locks or allocate, which a forked child of
//! a multithreaded process must not.

use std::ffi::CString;
use std::io;
use std::os::fd::RawFd;

use libc::{c_char, c_int, c_ulong, c_void};

fn int(rc: libc::c_long) -> c_int {
    rc as c_int
}

pub(super) unsafe fn unshare(flags: c_int) -> c_int {
    int(unsafe { libc::syscall(libc::SYS_unshare, flags) })
}

pub(super) unsafe fn mount(
    source: *const c_char,
    target: *const c_char,
    fstype: *const c_char,
    flags: c_ulong,
    data: *const c_void,
) -> c_int {
    int(unsafe { libc::syscall(libc::SYS_mount, source, target, fstype, flags, data) })
}

pub(super) unsafe fn open(path: *const c_char, flags: c_int, mode: libc::mode_t) -> c_int {
    int(unsafe { libc::syscall(libc::SYS_openat, libc::AT_FDCWD, path, flags, mode) })
}

pub(super) unsafe fn symlink(target: *const c_char, link: *const c_char) -> c_int {
    int(unsafe { libc::syscall(libc::SYS_symlinkat, target, libc::AT_FDCWD, link) })
}

pub(super) unsafe fn mkdir(path: *const c_char, mode: libc::mode_t) -> c_int {
    int(unsafe { libc::syscall(libc::SYS_mkdirat, libc::AT_FDCWD, path, mode) })
}

pub(super) unsafe fn write(fd: c_int, buf: *const c_void, len: usize) -> isize {
    unsafe { libc::syscall(libc::SYS_write, fd, buf, len) as isize }
}

pub(super) unsafe fn close(fd: c_int) -> c_int {
    int(unsafe { libc::syscall(libc::SYS_close, fd) })
}

pub(super) fn check(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// An fd the child closes with a raw syscall (an `OwnedFd` would call libc's `close`).
pub(super) struct RawFdGuard(pub(super) RawFd);

impl Drop for RawFdGuard {
    fn drop(&mut self) {
        unsafe { close(self.0) };
    }
}

/// Remounts a tmpfs of the view read-only, so the tool cannot add entries to it.
pub(super) fn seal(target: &CString, flags: libc::c_ulong) -> io::Result<()> {
    check(unsafe {
        mount(
            std::ptr::null(),
            target.as_ptr(),
            std::ptr::null(),
            libc::MS_REMOUNT | libc::MS_RDONLY | flags,
            std::ptr::null(),
        )
    })
}

pub(super) fn write_file(path: &CString, data: &[u8]) -> io::Result<()> {
    let fd = unsafe { open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC, 0) };
    check(fd)?;
    let n = unsafe { write(fd, data.as_ptr().cast(), data.len()) };
    let err = io::Error::last_os_error();
    unsafe { close(fd) };
    if n < 0 || n as usize != data.len() {
        return Err(err);
    }
    Ok(())
}

/// `/proc/self/fd/<fd>` as a C string in `buf`, without allocating.
pub(super) fn proc_fd_path(buf: &mut [u8; 32], fd: RawFd) -> *const libc::c_char {
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
}
