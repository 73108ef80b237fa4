//! `execute_command`'s words for a refusal of the command use case ([`Refused`]: what is
//! in the way and the next step, naming the tools to call) and its stable class.

use crate::calls::reasons::{args_reason, isolation_reason, lock_reason};
use gatecmd_core::refusal::common::{UnknownBoard, WaitTooLong};
use gatecmd_core::refusal::{Refusal, RefusalReason};
use gatecmd_domain::exec::ExecError;
use gatecmd_domain::usecases::command::Refused;

/// The refusal `why` becomes: its class and its message.
pub fn refusal(why: Refused) -> Refusal {
    Refusal::new(reason(&why), message(&why))
}

fn message(why: &Refused) -> String {
    use Refused as R;
    match why {
        R::UnknownCommand { name, visible, .. } => format!(
            "unknown command {name:?}. Commands you may run: {}. Call list_commands for their argument patterns.",
            or_none(visible)
        ),
        R::Unavailable { name, why } => format!(
            "command {name:?} is configured but unavailable on this host: {why}. Ask the bench operator to install it."
        ),
        R::Args(e) => e.to_string(),
        R::PowerCommand { name, boards } => format!(
            "command {name:?} switches the power of board(s) {boards}: only power_board runs it, under the board's lease (lock_board, then power_board)"
        ),
        R::ZeroTimeout => "timeout_secs must be at least 1".to_string(),
        R::TimeoutTooLong { asked, limit } => format!(
            "timeout_secs {asked} exceeds this command's limit of {limit} s; pass at most {limit} or omit it"
        ),
        R::NoDeviceClass { command } => {
            format!("command {command:?} does not touch a device; omit `device`")
        }
        R::ClassNotConfigured { class } => format!("device class {class:?} is not configured"),
        R::IsolatedWithoutClass { command } => format!(
            "command {command:?} is isolated but names no device class; ask the bench operator to fix the config"
        ),
        R::BadDeviceId(e) => e.to_string(),
        R::NotAttached { device, attached } => format!(
            "device {device} is not attached. Attached now: {attached}. Call list_devices, or wait_for_device for a board that is re-enumerating."
        ),
        R::NotOfClass {
            device,
            vid,
            pid,
            class,
            matching,
            command,
        } => format!(
            "device {device} ({vid:04x}:{pid:04x}) is not a {class} device ({matching}); {command:?} runs only on those"
        ),
        R::NoneAttached {
            class,
            matching,
            command,
            attached,
        } => format!(
            "no {class} device ({matching}) is attached, so {command:?} has nothing to run on. Attached now: {attached}. \
             Plug the board in, in the mode the class names (boot_board can send a board there), or call wait_for_device."
        ),
        R::Ambiguous {
            class,
            command,
            ids,
        } => format!(
            "{} {class} boards are attached ({}); {command:?} runs on one board at a time and sees only that one: \
             pass `device` (one of {}). list_devices shows which is which.",
            ids.len(),
            ids.join(", "),
            ids.join(", ")
        ),
        R::BoardAndDevice => "give either board or device, not both".to_string(),
        R::UnknownBoard { name, known } => UnknownBoard::text(name, known),
        R::BoardEmpty { board, usb } => format!(
            "board {board:?} has nothing attached at its usb port {usb}; power it on or put it in MaskROM, \
             then wait_for_device {{id: \"{usb}\"}}"
        ),
        R::WaitTooLong { wait, max } => WaitTooLong::text(*wait, *max),
        R::TooManyRunning { client, max } => format!(
            "client {client:?} already runs {max} commands at once (limits.max_concurrent_per_client); \
             wait for one to finish, then retry"
        ),
        R::LoaderNotAllowed { path, allowed } => format!(
            "loader {path} is not one the bench operator allows for this board (boards[].loaders, else flash.loaders); nothing was run. \
             Allowed loaders: {allowed}. Pass one of them (list_boards shows them per board)."
        ),
        R::CancelledWaiting => {
            "cancelled while waiting for the device lock; nothing was run".to_string()
        }
        R::Lock(e) => e.to_string(),
        R::Isolation(e) => e.to_string(),
        R::Start(e) => e.to_string(),
        R::Task(e) => format!("the command's task failed: {e}"),
    }
}

fn or_none(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

/// The stable class of a refusal.
fn reason(why: &Refused) -> RefusalReason {
    use RefusalReason as R;
    match why {
        Refused::UnknownCommand { .. } => R::UnknownCommand,
        Refused::Unavailable { .. } => R::CommandUnavailable,
        Refused::PowerCommand { .. } => R::PowerCommand,
        Refused::Args(e) => args_reason(e),
        Refused::ZeroTimeout
        | Refused::NoDeviceClass { .. }
        | Refused::BadDeviceId(_)
        | Refused::BoardAndDevice => R::InvalidRequest,
        Refused::UnknownBoard { .. } => R::NotFound,
        Refused::TimeoutTooLong { .. } => R::TimeoutTooLong,
        Refused::ClassNotConfigured { .. } | Refused::IsolatedWithoutClass { .. } => {
            R::NotConfigured
        }
        Refused::NotAttached { .. } | Refused::NoneAttached { .. } | Refused::BoardEmpty { .. } => {
            R::DeviceAbsent
        }
        Refused::NotOfClass { .. } => R::DeviceMismatch,
        Refused::Ambiguous { .. } => R::DeviceAmbiguous,
        Refused::WaitTooLong { .. } | Refused::TooManyRunning { .. } => R::Limit,
        Refused::CancelledWaiting => R::Cancelled,
        Refused::LoaderNotAllowed { .. } => R::NotPermitted,
        Refused::Lock(e) => lock_reason(e),
        Refused::Isolation(e) => isolation_reason(e),
        Refused::Start(ExecError::ShuttingDown) => R::ShuttingDown,
        Refused::Start(ExecError::Isolation(e)) => isolation_reason(e),
        Refused::Start(_) | Refused::Task(_) => R::StartFailed,
    }
}
