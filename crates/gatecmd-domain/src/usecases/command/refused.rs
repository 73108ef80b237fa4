//! Why a command call was refused, as data: what `prepare` (and the lock and spawn steps
//! after it) answers instead of running. The surface words each variant for its reader and
//! gives it its stable class (`execute_command`'s `rejected.rs`); here is what each one
//! knows.

use gatecmd_core::sanitizer;
use gatecmd_devices::DeviceError;

use crate::config::{Config, power_boards_of};
use crate::exec::ExecError;
use crate::exec::isolation::IsolationError;
use crate::locks::LockError;

/// Why a command call was refused; nothing ran.
#[derive(Debug)]
pub enum Refused {
    /// No command of that name that this client may run.
    UnknownCommand {
        name: String,
        /// The commands it may run.
        visible: Vec<String>,
        /// The name is configured, but not for this client (the message does not tell).
        configured: bool,
    },
    /// Configured, but its binary is missing or not executable now.
    Unavailable {
        name: String,
        why: String,
    },
    /// The arguments match no pattern (or a file argument was refused).
    Args(sanitizer::Refusal),
    /// The command is some board's `power.on` or `power.off` (issue 22): only the board's
    /// power action runs it, under the board's lease.
    PowerCommand {
        name: String,
        /// The boards it switches, comma-separated.
        boards: String,
    },
    ZeroTimeout,
    TimeoutTooLong {
        asked: u64,
        limit: u64,
    },
    /// A device was named for a command that touches none.
    NoDeviceClass {
        command: String,
    },
    ClassNotConfigured {
        class: String,
    },
    IsolatedWithoutClass {
        command: String,
    },
    BadDeviceId(DeviceError),
    NotAttached {
        device: String,
        attached: String,
    },
    NotOfClass {
        device: String,
        vid: u16,
        pid: u16,
        class: String,
        matching: String,
        command: String,
    },
    NoneAttached {
        class: String,
        matching: String,
        command: String,
        attached: String,
    },
    /// An isolated command, several boards of its class, none named.
    Ambiguous {
        class: String,
        command: String,
        ids: Vec<String>,
    },
    BoardAndDevice,
    UnknownBoard {
        name: String,
        known: Vec<String>,
    },
    BoardEmpty {
        board: String,
        usb: String,
    },
    WaitTooLong {
        wait: u64,
        max: u64,
    },
    /// The client runs `limits.max_concurrent_per_client` commands already.
    TooManyRunning {
        client: String,
        max: usize,
    },
    /// A loader argument (`loader_args:`) that `flash.loaders` does not allow.
    LoaderNotAllowed {
        path: String,
        /// The allowed loader files, in words.
        allowed: String,
    },
    /// Cancelled while queued for a lock; nothing ran.
    CancelledWaiting,
    Lock(LockError),
    Isolation(IsolationError),
    /// Allowed, but the executor could not start it.
    Start(ExecError),
    /// Allowed, but the task running it (a `cancel: never` command) failed.
    Task(String),
}

impl Refused {
    /// Whether the call named a configured command: every refusal after the command was
    /// found, and an unknown name that is configured for other clients. (The metrics label
    /// a refusal by its command only then, so that the label set stays the configured one.)
    pub fn names_configured_command(&self) -> bool {
        match self {
            Refused::UnknownCommand { configured, .. } => *configured,
            _ => true,
        }
    }
}

impl From<sanitizer::Refusal> for Refused {
    fn from(e: sanitizer::Refusal) -> Self {
        Refused::Args(e)
    }
}

impl From<DeviceError> for Refused {
    fn from(e: DeviceError) -> Self {
        Refused::BadDeviceId(e)
    }
}

impl From<LockError> for Refused {
    fn from(e: LockError) -> Self {
        Refused::Lock(e)
    }
}

impl From<IsolationError> for Refused {
    fn from(e: IsolationError) -> Self {
        Refused::Isolation(e)
    }
}

impl From<ExecError> for Refused {
    fn from(e: ExecError) -> Self {
        Refused::Start(e)
    }
}

/// A board's power command belongs to the board (issue 22): refused before anything else,
/// dry runs included, so no client (the board's holder neither) cuts a board's power
/// around its lease or around the power action's bookkeeping.
pub fn power_command(config: &Config, command: &str) -> Result<(), Refused> {
    let owners = power_boards_of(&config.boards, command);
    if owners.is_empty() {
        return Ok(());
    }
    Err(Refused::PowerCommand {
        name: command.to_string(),
        boards: owners.join(", "),
    })
}
