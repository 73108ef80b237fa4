//! The board's `power.maskrom` action, run through the executor as `boot_board` runs it:
//! by the rockusb phase, by a recovery after a stalled transfer, and before the usbplug
//! re-entry.

use super::context::Run;
use crate::audit::PowerVia;
use crate::boards::PowerState;
use crate::config::power::action_spec;
use crate::flash::failure::FlashFailure;
use crate::power_run::{Audited, PowerFailure, run_power};

/// Runs the board's `power.maskrom`.
pub(super) async fn maskrom_action(run: &Run<'_>) -> Result<(), FlashFailure> {
    let board = run.board;
    let Some(action) = &board.maskrom else {
        // `plan` refused this already; kept for the type.
        return Err(FlashFailure::NoRockusb {
            board: board.name.clone(),
            port: board.usb.to_string(),
            secs: 0,
            shows: "nothing".into(),
        });
    };
    let spec = action_spec(run.config, action).map_err(|e| FlashFailure::PowerStart {
        argv: action.command.clone(),
        error: e.to_string(),
    })?;
    let ran = run_power(
        run.state,
        &board.name,
        &spec,
        PowerState::On,
        run.waits.clone(),
        Audited::Step(PowerVia::FlashBoard),
    )
    .await;
    ran.into_result().map_err(|f| match f {
        PowerFailure::Failed {
            argv,
            exit_code,
            output,
        } => FlashFailure::PowerFailed {
            argv,
            exit_code,
            output,
        },
        PowerFailure::NotStarted { argv, error } => FlashFailure::PowerStart {
            argv,
            error: error.to_string(),
        },
    })
}
