//! The board's USB port as the device registry sees it: the rockusb mode there, a
//! description of whatever is there (for a failure's `seen`), where the board was left,
//! and the wait for a rockusb device after the MaskROM action.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::failure::FlashFailure;
use crate::boards::PowerState;
use crate::config::BoardConfig;
use crate::state::AppState;
use gatecmd_devices::{DeviceId, RockchipMode};

/// The rockusb mode of the device at `port`, if one is there.
pub fn mode_at(state: &AppState, port: &DeviceId) -> Option<RockchipMode> {
    state.registry.get(port).and_then(|d| d.rockusb_mode())
}

/// What is at `port`: `2207:350b in MaskROM mode`, `1d6b:0104`, `nothing`.
pub fn at_port(state: &AppState, port: &DeviceId) -> String {
    match state.registry.get(port) {
        None => "nothing".into(),
        Some(d) => match d.rockusb_mode() {
            Some(m) => format!("{:04x}:{:04x} in {m} mode", d.vid, d.pid),
            None => format!("{:04x}:{:04x} (not a rockusb device)", d.vid, d.pid),
        },
    }
}

/// Where the board is now, in one word: `maskrom`, `loader`, `off`, or `not_on_usb`
/// (powered, or unknown, with nothing in a rockusb mode at its port: running or off).
pub fn board_state(state: &AppState, board: &BoardConfig) -> String {
    match mode_at(state, &board.usb) {
        Some(RockchipMode::MaskRom) => "maskrom".into(),
        Some(RockchipMode::Loader) => "loader".into(),
        None if state.boards.power_state(&board.name) == PowerState::Off => "off".into(),
        None => "not_on_usb".into(),
    }
}

/// Why the wait for a rockusb device ended without one.
pub enum AwaitError {
    /// The call was cancelled or ran out of time.
    Stopped,
    Failed(FlashFailure),
}

/// Waits up to `wait` for a device in MaskROM or Loader mode at the board's port.
pub async fn await_rockusb(
    state: &AppState,
    board: &BoardConfig,
    wait: Duration,
    cancel: &CancellationToken,
) -> Result<RockchipMode, AwaitError> {
    let deadline = tokio::time::Instant::now() + wait;
    // Subscribed before the first look: an arrival in between wakes the wait.
    let mut events = state.registry.subscribe();
    loop {
        if let Some(m) = mode_at(state, &board.usb) {
            return Ok(m);
        }
        tokio::select! {
            _ = cancel.cancelled() => return Err(AwaitError::Stopped),
            r = events.recv() => {
                if let Err(tokio::sync::broadcast::error::RecvError::Closed) = r {
                    // The monitor stopped: look again at the deadline only.
                    tokio::time::sleep_until(deadline).await;
                }
            }
            _ = tokio::time::sleep_until(deadline) => {
                if let Some(m) = mode_at(state, &board.usb) {
                    return Ok(m);
                }
                return Err(AwaitError::Failed(FlashFailure::NoRockusb {
                    board: board.name.clone(),
                    port: board.usb.to_string(),
                    secs: wait.as_secs(),
                    shows: at_port(state, &board.usb),
                }));
            }
        }
    }
}
