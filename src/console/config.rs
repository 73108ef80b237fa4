//! Stand-in for the board console configuration.
//!
//! The `boards:` section (src/config/boards.rs, written in parallel) holds a
//! `ConsoleConfig` of exactly this shape per board; at merge this file becomes a re-export
//! of that type (or that type moves here), and nothing else in `console/` changes.

use std::path::PathBuf;

/// Where a board's serial console is and how fast it talks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleConfig {
    /// The USB port path of the serial adapter ("1-3"): its tty is found under
    /// `/sys/bus/usb/devices/1-3:*/` and followed through re-enumeration.
    pub port: Option<String>,
    /// Or a tty path (`/dev/serial/by-path/…`, `/dev/ttyS0`), reopened when it comes back.
    pub path: Option<PathBuf>,
    /// Baud rate, one of the termios rates (see `baud_rate` in `src/console/tty.rs`).
    pub baud: u32,
}

/// How consoles capture; one set for every board.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleSettings {
    /// Bytes of output kept per board (the ring); older output is dropped and counted.
    pub ring_bytes: usize,
    /// How often an absent tty is tried again (a port adapter is also tried at once when
    /// the device registry reports a change on its port).
    pub retry: std::time::Duration,
    /// Longest one `console_write` may wait for the tty to take its bytes.
    pub write_timeout: std::time::Duration,
    /// Where sysfs lists USB devices (tests point it at a fixture).
    pub sys_usb: PathBuf,
}

/// Default ring size per board.
pub const DEFAULT_RING_BYTES: usize = 1 << 20;

impl Default for ConsoleSettings {
    fn default() -> Self {
        ConsoleSettings {
            ring_bytes: DEFAULT_RING_BYTES,
            retry: std::time::Duration::from_millis(250),
            write_timeout: std::time::Duration::from_secs(5),
            sys_usb: PathBuf::from("/sys/bus/usb/devices"),
        }
    }
}
