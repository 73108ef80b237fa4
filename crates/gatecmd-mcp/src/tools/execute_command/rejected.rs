//! The typed refusals of a whole `execute_command` call, each with its stable class:
//! what `prepare` (and the lock and spawn steps after it) answers instead of running.

use crate::calls::reasons::{args_reason, isolation_reason, lock_reason};
use gatecmd_core::refusal::common::{UnknownBoard, WaitTooLong};
use gatecmd_core::refusal::{Classified, RefusalReason};
use gatecmd_core::sanitizer;
use gatecmd_devices::DeviceError;
use gatecmd_domain::exec::ExecError;
use gatecmd_domain::isolation::IsolationError;
use gatecmd_domain::locks::LockError;

/// Why `execute_command` said no. Each message names what is in the way and the next
/// step; [`Rejected::reason`] is its stable class.
#[derive(Debug, thiserror::Error)]
pub enum Rejected {
    #[error(
        "unknown command {name:?}. Commands you may run: {}. Call list_commands for their argument patterns.",
        or_none(visible)
    )]
    UnknownCommand {
        name: String,
        visible: Vec<String>,
        /// The name is configured, but not for this client (the message does not tell).
        configured: bool,
    },
    #[error(
        "command {name:?} is configured but unavailable on this host: {why}. Ask the bench operator to install it."
    )]
    Unavailable { name: String, why: String },
    #[error("{0}")]
    Args(#[from] sanitizer::Refusal),
    #[error("{0}")]
    PowerCommand(#[from] super::power_guard::PowerCommand),
    #[error("timeout_secs must be at least 1")]
    ZeroTimeout,
    #[error(
        "timeout_secs {asked} exceeds this command's limit of {limit} s; pass at most {limit} or omit it"
    )]
    TimeoutTooLong { asked: u64, limit: u64 },
    #[error("command {command:?} does not touch a device; omit `device`")]
    NoDeviceClass { command: String },
    #[error("device class {class:?} is not configured")]
    ClassNotConfigured { class: String },
    #[error(
        "command {command:?} is isolated but names no device class; ask the bench operator to fix the config"
    )]
    IsolatedWithoutClass { command: String },
    #[error("{0}")]
    BadDeviceId(#[from] DeviceError),
    #[error(
        "device {device} is not attached. Attached now: {attached}. Call list_devices, or wait_for_device for a board that is re-enumerating."
    )]
    NotAttached { device: String, attached: String },
    #[error(
        "device {device} ({vid:04x}:{pid:04x}) is not a {class} device ({matching}); {command:?} runs only on those"
    )]
    NotOfClass {
        device: String,
        vid: u16,
        pid: u16,
        class: String,
        matching: String,
        command: String,
    },
    #[error(
        "no {class} device ({matching}) is attached, so {command:?} has nothing to run on. Attached now: {attached}. \
         Plug the board in, in the mode the class names (boot_board can send a board there), or call wait_for_device."
    )]
    NoneAttached {
        class: String,
        matching: String,
        command: String,
        attached: String,
    },
    #[error(
        "{} {class} boards are attached ({}); {command:?} runs on one board at a time and sees only that one: \
         pass `device` (one of {}). list_devices shows which is which.",
        ids.len(), ids.join(", "), ids.join(", ")
    )]
    Ambiguous {
        class: String,
        command: String,
        ids: Vec<String>,
    },
    #[error("give either board or device, not both")]
    BoardAndDevice,
    #[error("{}", UnknownBoard::text(name, known))]
    UnknownBoard { name: String, known: Vec<String> },
    #[error(
        "board {board:?} has nothing attached at its usb port {usb}; power it on or put it in MaskROM, \
         then wait_for_device {{id: \"{usb}\"}}"
    )]
    BoardEmpty { board: String, usb: String },
    #[error("{}", WaitTooLong::text(*wait, *max))]
    WaitTooLong { wait: u64, max: u64 },
    #[error(
        "client {client:?} already runs {max} commands at once (limits.max_concurrent_per_client); \
         wait for one to finish, then retry"
    )]
    TooManyRunning { client: String, max: usize },
    #[error("cancelled while waiting for the device lock; nothing was run")]
    CancelledWaiting,
    #[error("{0}")]
    Lock(#[from] LockError),
    #[error("{0}")]
    Isolation(#[from] IsolationError),
    /// Allowed, but the executor could not start it.
    #[error("{0}")]
    Start(#[from] ExecError),
    /// Allowed, but the task running it (a `cancel: never` command) failed.
    #[error("the command's task failed: {0}")]
    Task(String),
}

fn or_none(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

impl Rejected {
    /// The stable class of this refusal.
    pub fn reason(&self) -> RefusalReason {
        use RefusalReason as R;
        match self {
            Rejected::UnknownCommand { .. } => R::UnknownCommand,
            Rejected::Unavailable { .. } => R::CommandUnavailable,
            Rejected::PowerCommand(_) => R::PowerCommand,
            Rejected::Args(e) => args_reason(e),
            Rejected::ZeroTimeout
            | Rejected::NoDeviceClass { .. }
            | Rejected::BadDeviceId(_)
            | Rejected::BoardAndDevice => R::InvalidRequest,
            Rejected::UnknownBoard { .. } => R::NotFound,
            Rejected::TimeoutTooLong { .. } => R::TimeoutTooLong,
            Rejected::ClassNotConfigured { .. } | Rejected::IsolatedWithoutClass { .. } => {
                R::NotConfigured
            }
            Rejected::NotAttached { .. }
            | Rejected::NoneAttached { .. }
            | Rejected::BoardEmpty { .. } => R::DeviceAbsent,
            Rejected::NotOfClass { .. } => R::DeviceMismatch,
            Rejected::Ambiguous { .. } => R::DeviceAmbiguous,
            Rejected::WaitTooLong { .. } | Rejected::TooManyRunning { .. } => R::Limit,
            Rejected::CancelledWaiting => R::Cancelled,
            Rejected::Lock(e) => lock_reason(e),
            Rejected::Isolation(e) => isolation_reason(e),
            Rejected::Start(ExecError::ShuttingDown) => R::ShuttingDown,
            Rejected::Start(ExecError::Isolation(e)) => isolation_reason(e),
            Rejected::Start(_) | Rejected::Task(_) => R::StartFailed,
        }
    }
}

impl Rejected {
    /// Whether the call named a configured command: every refusal after the command was
    /// found, and an unknown name that is configured for other clients. (The metrics label
    /// a refusal by its command only then, so that the label set stays the configured one.)
    pub fn names_configured_command(&self) -> bool {
        match self {
            Rejected::UnknownCommand { configured, .. } => *configured,
            _ => true,
        }
    }
}

impl Classified for Rejected {
    fn reason(&self) -> RefusalReason {
        Rejected::reason(self)
    }
}
