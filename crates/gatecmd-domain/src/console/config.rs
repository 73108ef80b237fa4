//! What the consoles are configured with: each board's `console:` (defined with the
//! `boards:` section in src/config/boards.rs, ring size included) and the capture settings
//! shared by every board.

use std::path::PathBuf;

pub use crate::config::ConsoleConfig;

/// How consoles capture; one set for every board (the ring's size is per board, in
/// [`ConsoleConfig::buffer_bytes`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleSettings {
    /// How often an absent tty is tried again (a port adapter is also tried at once when
    /// the device registry reports a change on its port).
    pub retry: std::time::Duration,
    /// Longest one `console_write` may wait for the tty to take its bytes.
    pub write_timeout: std::time::Duration,
    /// Where sysfs lists USB devices (tests point it at a fixture).
    pub sys_usb: PathBuf,
}

impl Default for ConsoleSettings {
    fn default() -> Self {
        ConsoleSettings {
            retry: std::time::Duration::from_millis(250),
            write_timeout: std::time::Duration::from_secs(5),
            sys_usb: PathBuf::from("/sys/bus/usb/devices"),
        }
    }
}
