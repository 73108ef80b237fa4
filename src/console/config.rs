//! What the consoles are configured with: each board's `console:` (defined with the
//! `boards:` section in src/config/boards.rs) and the capture settings.

use std::path::PathBuf;

pub use crate::config::ConsoleConfig;

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
