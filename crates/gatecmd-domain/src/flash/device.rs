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

/// The board's port path in the engine's words (`gatecmd-flash` has its own types so it
/// stands alone; this is the edge where the device layer's become the engine's).
pub fn engine_port(port: &DeviceId) -> gatecmd_flash::DeviceId {
    // Both are the sysfs port path with the same syntax; the device layer's parse
    // guarantees it, so a failure here is a bug in one of the two parsers.
    port.as_str()
        .parse()
        .expect("a device layer port path is an engine port path")
}

/// A rockusb mode in the engine's words.
pub fn engine_mode(mode: RockchipMode) -> gatecmd_flash::Mode {
    match mode {
        RockchipMode::MaskRom => gatecmd_flash::Mode::MaskRom,
        RockchipMode::Loader => gatecmd_flash::Mode::Loader,
    }
}

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

/// Resolves once a device in MaskROM mode is at `port`. Awaited beside the console after
/// the reset to boot from flash: a board that comes back in MaskROM there did not boot
/// (its boot ROM found nothing it could start in the flash), so no prompt will come.
/// Never resolves while the port shows anything else, nor when the registry stops.
pub async fn maskrom_arrives(state: &AppState, port: &DeviceId) {
    // Subscribed before the first look: an arrival in between wakes the wait.
    let mut events = state.registry.subscribe();
    loop {
        if mode_at(state, port) == Some(RockchipMode::MaskRom) {
            return;
        }
        if let Err(tokio::sync::broadcast::error::RecvError::Closed) = events.recv().await {
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod edge_tests {
    use super::*;

    /// Every port path the device layer accepts, the engine accepts as the same text (so
    /// `engine_port` cannot fail), and the modes map one to one.
    #[test]
    fn device_port_paths_are_engine_port_paths() {
        for text in ["1-1", "3-2.4", "12-1.2.3.4.5.6.7", "0-0", "001-02"] {
            let port: DeviceId = text.parse().expect("a device layer port path");
            assert_eq!(engine_port(&port).as_str(), text);
        }
        for bad in ["usb1", "1-2:1.0", "1-", "-1", "1-2.", "a-1", "1-2..3"] {
            assert!(bad.parse::<DeviceId>().is_err(), "{bad}");
            assert!(bad.parse::<gatecmd_flash::DeviceId>().is_err(), "{bad}");
        }
        assert_eq!(
            engine_mode(RockchipMode::MaskRom),
            gatecmd_flash::Mode::MaskRom
        );
        assert_eq!(
            engine_mode(RockchipMode::Loader),
            gatecmd_flash::Mode::Loader
        );
    }
}
