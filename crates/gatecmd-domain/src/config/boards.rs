//! `boards:`: named boards, each a flashing USB port with an optional serial console and
//! power switch (docs/BOARDS.md; the switches are `power/`). Built by `validate/boards.rs`;
//! read by `src/boards/` and the board tools, and by the console capture (which owns what
//! it does with [`ConsoleConfig`]).

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::power::{PowerAction, PowerConfig};
use gatecmd_devices::DeviceId;

/// The baud rates termios can set (`B50` … `B4000000` on Linux); anything else the tty
/// driver would refuse at open time, so it is refused at load time instead.
pub const STANDARD_BAUDS: &[u32] = &[
    50, 75, 110, 134, 150, 200, 300, 600, 1200, 1800, 2400, 4800, 9600, 19200, 38400, 57600,
    115200, 230400, 460800, 500000, 576000, 921600, 1000000, 1152000, 1500000, 2000000, 2500000,
    3000000, 3500000, 4000000,
];

/// Bytes of console output a board keeps when its `console:` sets no `buffer_bytes`.
pub const DEFAULT_CONSOLE_BUFFER_BYTES: usize = 1 << 20;

/// The smallest `console.buffer_bytes`: below one screen of boot log a `wait_for` could
/// lose its match to the ring before the reader looks.
pub const MIN_CONSOLE_BUFFER_BYTES: usize = 4 << 10;

/// The largest `console.buffer_bytes`: every board with a console may hold this much in
/// memory, so a typo (an extra zero or three) must not take the host's memory.
pub const MAX_CONSOLE_BUFFER_BYTES: usize = 64 << 20;

/// One configured board.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoardConfig {
    /// Its name: the lock key is `board:NAME`.
    pub name: String,
    /// Free-form labels matched by `lock_board {match: {...}}`.
    pub tags: BTreeMap<String, String>,
    /// The port path of its flashing USB (`1-2`): whatever enumerates there is the board's
    /// device, in any mode. Parsed at load, so every user holds a valid port path.
    pub usb: DeviceId,
    /// Its serial console, if it has one.
    pub console: Option<ConsoleConfig>,
    /// How to switch it on and off, if it can be.
    pub power: Option<PowerConfig>,
    /// `power.maskrom`: the command that puts it into MaskROM (button held, reset).
    pub maskrom: Option<PowerAction>,
    /// `power.recovery`: the command that puts it into its family's recovery or flashing
    /// mode, with what then enumerates. See [`BoardConfig::recovery`].
    pub recovery_action: Option<super::power::Recovery>,
    /// How to talk to it over its console (`console.prompt`, `login`, `uboot`, …).
    pub shell: super::shell::ShellConfig,
    /// What is done to it when a lease on it ends (`on_release`).
    pub on_release: OnRelease,
    /// `loaders`: the loader files (or directories) this board takes, instead of
    /// `flash.loaders`.
    pub loaders: Option<Vec<PathBuf>>,
    /// `usbplug: {ddr, usbplug}`: its default DDR blob + usbplug pair (absolute paths, sent
    /// only if `flash.loaders` allows them): what `flash_board` brings it up with when the
    /// call names no loader, and what verifies whole an image a packed loader's reads could
    /// not (docs/FLASHING.md, "DDR blob + usbplug").
    pub usbplug: Option<UsbplugPair>,
}

/// A DDR init blob and a usbplug, by path (rkbin's `rk3588_ddr_….bin`,
/// `rk3588_usbplug_v….bin`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsbplugPair {
    pub ddr: PathBuf,
    pub usbplug: PathBuf,
}

/// `boards[].on_release`: the state a board is returned to when a lease on it ends
/// (unlock, expiry, the session's end, an operator's release).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnRelease {
    /// Left as the last holder left it.
    #[default]
    Keep,
    /// Switched off (`power.off`).
    Off,
    /// Put into MaskROM (`power.maskrom`).
    Maskrom,
}

impl OnRelease {
    /// `keep`, `off`, `maskrom`: the configuration's and the audit log's word.
    pub fn as_str(self) -> &'static str {
        match self {
            OnRelease::Keep => "keep",
            OnRelease::Off => "off",
            OnRelease::Maskrom => "maskrom",
        }
    }
}

impl BoardConfig {
    /// The loader files (or directories) that may be sent to this board, by flash_board or
    /// a command's `loader_args`: its own `loaders`, else `flash.loaders`; `None`: any
    /// file in the file roots.
    pub fn loaders<'a>(&'a self, flash: &'a super::FlashSettings) -> Option<&'a [PathBuf]> {
        self.loaders.as_deref().or(flash.loaders.as_deref())
    }

    /// How to send the board to recovery: `power.recovery`, or `power.maskrom` as the
    /// Rockchip's (rockusb in MaskROM mode must then enumerate).
    pub fn recovery(&self) -> Option<super::power::Recovery> {
        self.recovery_action.clone().or_else(|| {
            self.maskrom.clone().map(|action| super::power::Recovery {
                action,
                family: gatecmd_devices::families::ROCKUSB,
                mode: Some(gatecmd_devices::families::MASKROM),
            })
        })
    }
}

/// A board's serial console: a USB serial adapter by port path, or a tty path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleConfig {
    /// Port path of the adapter (`1-3`); exactly one of `port` and `path` is set.
    pub port: Option<String>,
    /// A tty path (`/dev/serial/by-path/...`).
    pub path: Option<PathBuf>,
    /// One of [`STANDARD_BAUDS`].
    pub baud: u32,
    /// Size of the board's capture ring in bytes ([`MIN_CONSOLE_BUFFER_BYTES`] to
    /// [`MAX_CONSOLE_BUFFER_BYTES`], default [`DEFAULT_CONSOLE_BUFFER_BYTES`]); older output
    /// is dropped and counted. A reload that changes it starts the board's capture over.
    pub buffer_bytes: usize,
}

/// The boards whose power action runs `command` (issue 22): such a command belongs to its
/// boards and runs only through `power_board`, under the board's lease; `execute_command`
/// refuses it, so no client can cut a board's power around the board's holder.
pub fn power_boards_of<'a>(boards: &'a [BoardConfig], command: &str) -> Vec<&'a str> {
    boards
        .iter()
        .filter(|b| {
            b.power
                .as_ref()
                .is_some_and(|p| p.commands().contains(&command))
        })
        .map(|b| b.name.as_str())
        .collect()
}
