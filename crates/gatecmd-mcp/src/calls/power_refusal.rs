//! Why a power switch was refused: `power_board`'s refusals, which `boot_board`'s power
//! steps carry too (so it lives beside the tools, not in either).

use crate::calls::reasons::{args_reason, lock_reason};
use gatecmd_core::refusal::common::{LeaseMissing, UnknownBoard};
use gatecmd_core::refusal::{Classified, RefusalReason};
use gatecmd_domain::config::power::SpecError;
use gatecmd_domain::locks::LockError;

/// Why `power_board` (or a power step of `boot_board`) said no.
#[derive(Debug, thiserror::Error)]
pub enum PowerError {
    #[error(transparent)]
    UnknownBoard(#[from] UnknownBoard),
    #[error("off_secs {off_secs} is more than the maximum of {max}")]
    OffTooLong { off_secs: u64, max: u64 },
    /// The board's switch cannot be run now (none, or its command changed since load).
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error(transparent)]
    Lease(#[from] LeaseMissing),
    #[error("{0}")]
    Lock(#[from] LockError),
}

impl Classified for PowerError {
    fn reason(&self) -> RefusalReason {
        match self {
            PowerError::UnknownBoard(e) => e.reason(),
            PowerError::OffTooLong { .. } => RefusalReason::Limit,
            PowerError::Spec(SpecError::NoSwitch { .. } | SpecError::CommandGone { .. }) => {
                RefusalReason::NotConfigured
            }
            PowerError::Spec(SpecError::CommandUnavailable { .. }) => {
                RefusalReason::CommandUnavailable
            }
            PowerError::Spec(SpecError::Args(e)) => args_reason(e),
            PowerError::Lease(e) => e.reason(),
            PowerError::Lock(e) => lock_reason(e),
        }
    }
}
