//! Why `boot_board` said no ([`BootRefusal`]), and each failure of the domain's boot
//! (`gatecmd_domain::usecases::boot::BootError`) worded as the refusal it becomes: the
//! console's and the power switch's as every tool words them, the rest as boot_board's own.

use crate::calls::power_refusal::PowerError;
use crate::console::board_talk::{TalkRefusal, talk_refusal};
use gatecmd_core::refusal::{Classified, Refusal, RefusalReason};
use gatecmd_domain::boards::boot::Unreachable;
use gatecmd_domain::boards::boot_reports::{BootSummary, FaultKind};
use gatecmd_domain::exec::ExecError;
use gatecmd_domain::power_run::PowerFailure;
use gatecmd_domain::usecases::boot::BootError;

/// Why `boot_board` said no, beyond what every console conversation tool may answer
/// ([`TalkRefusal`]): the steps that switch power and wait for MaskROM.
#[derive(Debug, thiserror::Error)]
pub enum BootRefusal {
    #[error(transparent)]
    Talk(#[from] TalkRefusal),
    /// What `boot_board` would need is not configured (`plan` names it).
    #[error("{0}")]
    CannotReach(#[from] Unreachable),
    #[error("board {board:?} has no power.maskrom")]
    NoMaskrom { board: String },
    #[error("{0}")]
    Power(#[from] PowerError),
    /// A power or MaskROM command ran and failed.
    #[error("{argv} exited with {exit_code:?}: {output}")]
    PowerFailed {
        argv: String,
        exit_code: Option<i32>,
        output: String,
    },
    #[error("{argv}: {error}")]
    PowerStart { argv: String, error: ExecError },
    #[error("cancelled while waiting for MaskROM")]
    CancelledWaitingMaskrom,
    #[error("cancelled while waiting for the board's recovery mode")]
    CancelledWaitingRecovery,
    #[error(
        "board {board}: waited for {want} at usb port {usb}; the port shows {shows}. Check that the \
         board's power.recovery action does what it says (a button held, a strap), and that the \
         family and mode it names are what this board's ROM or bootloader presents (list_devices)"
    )]
    NoRecoveryInTime {
        board: String,
        usb: String,
        want: String,
        shows: String,
    },
    /// The boot this call started went wrong (docs/BOARDS.md "Boot reports").
    #[error(
        "board {board}: boot {boot} ended {outcome}: {fault}; boot_report {{board: {board:?}, boot: {boot}}} \
         has its stages and transcript"
    )]
    BootFailed {
        board: String,
        boot: u64,
        outcome: &'static str,
        fault: String,
    },
    #[error(
        "board {board}: waited for the rockusb device in MaskROM mode at usb port {usb}; the port shows {shows}"
    )]
    NoMaskromInTime {
        board: String,
        usb: String,
        shows: String,
    },
}

impl Classified for BootRefusal {
    fn reason(&self) -> RefusalReason {
        use RefusalReason as R;
        match self {
            BootRefusal::Talk(e) => e.reason(),
            BootRefusal::CannotReach(_) | BootRefusal::NoMaskrom { .. } => R::NotConfigured,
            BootRefusal::Power(e) => e.reason(),
            BootRefusal::PowerFailed { .. } | BootRefusal::PowerStart { .. } => R::StartFailed,
            BootRefusal::CancelledWaitingMaskrom | BootRefusal::CancelledWaitingRecovery => {
                R::Cancelled
            }
            BootRefusal::NoMaskromInTime { .. } | BootRefusal::NoRecoveryInTime { .. } => {
                R::Timeout
            }
            BootRefusal::BootFailed { .. } => R::WrongState,
        }
    }
}

/// A step's failure as the refusal it becomes.
pub(super) fn refusal_of(board: &str, e: BootError) -> Refusal {
    let board = board.to_string();
    match e {
        BootError::CannotReach(u) => BootRefusal::CannotReach(u).into(),
        BootError::NoMaskrom => BootRefusal::NoMaskrom { board }.into(),
        BootError::Spec(e) => BootRefusal::Power(e.into()).into(),
        BootError::Power(PowerFailure::Failed {
            argv,
            exit_code,
            output,
        }) => BootRefusal::PowerFailed {
            argv,
            exit_code,
            output,
        }
        .into(),
        BootError::Power(PowerFailure::NotStarted { argv, error }) => {
            BootRefusal::PowerStart { argv, error }.into()
        }
        BootError::CancelledWaitingMaskrom => BootRefusal::CancelledWaitingMaskrom.into(),
        BootError::CancelledWaitingRecovery => BootRefusal::CancelledWaitingRecovery.into(),
        BootError::NoMaskromInTime { usb, shows } => {
            BootRefusal::NoMaskromInTime { board, usb, shows }.into()
        }
        BootError::NoRecoveryInTime {
            usb,
            family,
            mode,
            shows,
        } => {
            let want = match mode {
                Some(m) => format!("a {family} device in mode {m}"),
                None => format!("a {family} device"),
            };
            BootRefusal::NoRecoveryInTime {
                board,
                usb,
                want,
                shows,
            }
            .into()
        }
        BootError::NoConsole => TalkRefusal::NoConsole { board }.into(),
        BootError::Talk(e) => talk_refusal(&board, e),
        BootError::BootFailed(s) => boot_failed(*s),
    }
}

/// The refusal of a boot that panicked or reset, naming its first such fault and line.
fn boot_failed(s: BootSummary) -> Refusal {
    let fault = s
        .faults
        .iter()
        .find(|f| matches!(f.kind, FaultKind::KernelPanic | FaultKind::Reset))
        .or(s.faults.first())
        .map(|f| format!("{} at {} ms: {:?}", f.kind.as_str(), f.at_ms, f.line))
        .unwrap_or_else(|| {
            format!(
                "the {} boots before it reset before login",
                s.resets_in_a_row
            )
        });
    BootRefusal::BootFailed {
        board: s.board.clone(),
        boot: s.boot,
        outcome: s.outcome.as_str(),
        fault,
    }
    .into()
}
