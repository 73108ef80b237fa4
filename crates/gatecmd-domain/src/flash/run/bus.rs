//! The board on the bus after a failed transfer: a stalled loader stays enumerated; a
//! board powered off, reset or unplugged leaves, and the registry hears of it within
//! [`USB_SETTLE`].

use std::time::Duration;

use crate::config::BoardConfig;
use crate::flash::device;
use crate::flash::failure::FlashFailure;
use crate::state::AppState;
use gatecmd_devices::RockchipMode;
use gatecmd_flash::FlashError;

/// How long the registry is given, at most, to hear of a board that left after a failed
/// transfer (looked at every [`USB_POLL`]; the wait ends as soon as the device is gone).
const USB_SETTLE: Duration = Duration::from_millis(1500);
const USB_POLL: Duration = Duration::from_millis(50);

/// Whether the board is still at its port in Loader mode a moment later.
pub(super) async fn stayed_on_the_bus(state: &AppState, board: &BoardConfig) -> bool {
    let until = tokio::time::Instant::now() + USB_SETTLE;
    while tokio::time::Instant::now() < until {
        if device::mode_at(state, &board.usb) != Some(RockchipMode::Loader) {
            return false;
        }
        tokio::time::sleep(USB_POLL).await;
    }
    device::mode_at(state, &board.usb) == Some(RockchipMode::Loader)
}

/// A transfer that failed because the board went away (power cut, reset) fails before the
/// registry has heard of the removal: this gives it a moment, so that the state a failed
/// flash names is where the board is.
pub(super) async fn settle_after(state: &AppState, board: &BoardConfig, failure: &FlashFailure) {
    if let FlashFailure::Engine(e) = failure
        && matches!(
            **e,
            FlashError::Write { .. } | FlashError::Read { .. } | FlashError::Usb { .. }
        )
    {
        let until = tokio::time::Instant::now() + USB_SETTLE;
        while device::mode_at(state, &board.usb).is_some() && tokio::time::Instant::now() < until {
            tokio::time::sleep(USB_POLL).await;
        }
    }
}
