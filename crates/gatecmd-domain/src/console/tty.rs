//! The tty of a board's serial adapter: finding it (by USB port path or by path), opening it
//! in raw mode at the configured baud rate, non-blocking for tokio's `AsyncFd`.
//!
//! nix's termios is used directly (already a dependency): a serial crate would add its own
//! port enumeration (libudev again) and a blocking read thread per board, where one
//! `AsyncFd` per tty on the runtime is all the capture needs.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::sys::termios::{self, BaudRate, ControlFlags, SetArg, SpecialCharacterIndices};

/// Where sysfs lists USB devices and their interfaces.
pub const SYS_USB: &str = "/sys/bus/usb/devices";

/// Why a tty cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TtyError {
    #[error("{path} does not exist (adapter unplugged?)")]
    Missing { path: PathBuf },
    #[error("cannot open {path}: {source}")]
    Open { path: PathBuf, source: io::Error },
    #[error("{path} is not a terminal or refused raw mode: {source}")]
    Termios { path: PathBuf, source: nix::Error },
    #[error("baud rate {0} is not a termios rate (e.g. 9600, 115200, 921600, 1500000, 3000000)")]
    Baud(u32),
}

impl TtyError {
    /// The adapter is simply not there (as opposed to there and failing).
    pub fn is_absent(&self) -> bool {
        match self {
            TtyError::Missing { .. } => true,
            TtyError::Open { source, .. } => matches!(
                source.raw_os_error(),
                // EIO: a tty whose other side hung up (a pty without its master).
                Some(libc::ENOENT | libc::ENODEV | libc::ENXIO | libc::EIO)
            ),
            _ => false,
        }
    }
}

/// The termios rate for `baud` bits per second, if Linux has one.
pub fn baud_rate(baud: u32) -> Option<BaudRate> {
    use BaudRate::*;
    Some(match baud {
        50 => B50,
        75 => B75,
        110 => B110,
        134 => B134,
        150 => B150,
        200 => B200,
        300 => B300,
        600 => B600,
        1200 => B1200,
        1800 => B1800,
        2400 => B2400,
        4800 => B4800,
        9600 => B9600,
        19200 => B19200,
        38400 => B38400,
        57600 => B57600,
        115200 => B115200,
        230400 => B230400,
        460800 => B460800,
        500000 => B500000,
        576000 => B576000,
        921600 => B921600,
        1000000 => B1000000,
        1152000 => B1152000,
        1500000 => B1500000,
        2000000 => B2000000,
        2500000 => B2500000,
        3000000 => B3000000,
        3500000 => B3500000,
        4000000 => B4000000,
        _ => return None,
    })
}

/// The tty node of the serial adapter at USB port `port` ("1-3"), if one is bound now:
/// `<port>:*/tty/<name>` (CDC-ACM, most drivers) or `<port>:*/ttyUSB*` (usb-serial).
pub fn find_by_port(sys_usb: &Path, port: &str) -> Option<PathBuf> {
    let prefix = format!("{port}:");
    let mut interfaces: Vec<PathBuf> = std::fs::read_dir(sys_usb)
        .ok()?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect();
    // The first interface with a tty wins, in a stable order.
    interfaces.sort();
    for iface in interfaces {
        let Ok(entries) = std::fs::read_dir(&iface) else {
            continue;
        };
        let mut names: Vec<String> = entries
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        for name in names {
            if name == "tty" {
                let tty = std::fs::read_dir(iface.join("tty")).ok().and_then(|mut d| {
                    d.next()
                        .and_then(Result::ok)
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                });
                if let Some(tty) = tty {
                    return Some(Path::new("/dev").join(tty));
                }
            } else if name.starts_with("ttyUSB") {
                return Some(Path::new("/dev").join(name));
            }
        }
    }
    None
}

/// Opens `path` read-write, non-blocking, without becoming its controlling terminal, in raw
/// mode at `baud`; other non-root openers are kept out (`TIOCEXCL`): the server owns it.
pub fn open_raw(path: &Path, baud: u32) -> Result<File, TtyError> {
    let rate = baud_rate(baud).ok_or(TtyError::Baud(baud))?;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|source| {
            if source.kind() == io::ErrorKind::NotFound {
                TtyError::Missing { path: path.into() }
            } else {
                TtyError::Open {
                    path: path.into(),
                    source,
                }
            }
        })?;
    let termios_err = |source| TtyError::Termios {
        path: path.into(),
        source,
    };
    let mut t = termios::tcgetattr(&file).map_err(termios_err)?;
    termios::cfmakeraw(&mut t);
    // CLOCAL: no modem lines on a console adapter; without it an open or read can wait for
    // carrier detect. CREAD: receive at all.
    t.control_flags |= ControlFlags::CLOCAL | ControlFlags::CREAD;
    t.control_flags &= !ControlFlags::CRTSCTS;
    t.control_chars[SpecialCharacterIndices::VMIN as usize] = 1;
    t.control_chars[SpecialCharacterIndices::VTIME as usize] = 0;
    termios::cfsetspeed(&mut t, rate).map_err(termios_err)?;
    termios::tcsetattr(&file, SetArg::TCSANOW, &t).map_err(termios_err)?;
    // SAFETY: TIOCEXCL takes no argument and only sets a flag on the open tty. A failure
    // (not a tty that supports it) leaves the console usable, so it is ignored.
    unsafe {
        libc::ioctl(file.as_raw_fd(), libc::TIOCEXCL);
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_rates_are_known_and_others_are_not() {
        assert_eq!(baud_rate(1_500_000), Some(BaudRate::B1500000));
        assert_eq!(baud_rate(115_200), Some(BaudRate::B115200));
        assert!(baud_rate(0).is_none());
        assert!(baud_rate(123_456).is_none());
    }

    #[test]
    fn the_tty_of_a_port_is_found_in_sysfs() {
        let sys = tempfile::tempdir().expect("tempdir");
        // CDC-ACM: <port>:1.0/tty/ttyACM0; a second adapter on another port is ignored.
        std::fs::create_dir_all(sys.path().join("1-3:1.0/tty/ttyACM0")).expect("mkdir");
        std::fs::create_dir_all(sys.path().join("1-30:1.0/tty/ttyACM1")).expect("mkdir");
        // usb-serial: <port>:1.0/ttyUSB2.
        std::fs::create_dir_all(sys.path().join("2-1:1.0/ttyUSB2")).expect("mkdir");
        assert_eq!(
            find_by_port(sys.path(), "1-3"),
            Some(PathBuf::from("/dev/ttyACM0"))
        );
        assert_eq!(
            find_by_port(sys.path(), "2-1"),
            Some(PathBuf::from("/dev/ttyUSB2"))
        );
        assert_eq!(find_by_port(sys.path(), "1-4"), None);
    }

    #[test]
    fn a_missing_tty_is_absent_not_an_error() {
        let e = open_raw(Path::new("/nonexistent/ttyX"), 115200).expect_err("missing");
        assert!(e.is_absent(), "{e}");
        assert!(matches!(
            open_raw(Path::new("/dev/null"), 7),
            Err(TtyError::Baud(7))
        ));
        let e = open_raw(Path::new("/dev/null"), 115200).expect_err("not a tty");
        assert!(!e.is_absent(), "{e}");
    }
}
