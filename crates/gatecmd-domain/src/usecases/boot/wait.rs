//! A boot's waits: for a USB device at the board's port (the rockusb device in MaskROM
//! mode, or a recovery's family and mode), woken by the device registry's events, and for
//! a login or shell prompt on the console.

use gatecmd_devices::{Device, DeviceId, RockchipMode};

use super::BootError;
use crate::console::Console;
use crate::console::session::{TalkError, Wait, last_line_since, watch};
use crate::console::shell::{Prompts, Seen};
use crate::state::AppState;

/// Waits for the rockusb device in MaskROM mode at `id`.
pub(super) async fn maskrom(
    state: &AppState,
    id: &DeviceId,
    wait: &Wait<'_>,
) -> Result<(), BootError> {
    let is_it = |d: &Device| d.rockusb_mode() == Some(RockchipMode::MaskRom);
    if device(state, id, is_it, wait, BootError::CancelledWaitingMaskrom).await? {
        return Ok(());
    }
    let shows = state.registry.get(id).map(|d| {
        d.rockusb_mode()
            .map(|m| m.to_string())
            .unwrap_or_else(|| "a non-rockusb device".into())
    });
    Err(BootError::NoMaskromInTime {
        usb: id.to_string(),
        shows: shows.unwrap_or_else(|| "nothing".into()),
    })
}

/// Waits for a device of `family` (and `mode`, when given) at `id`.
pub(super) async fn recovery(
    state: &AppState,
    id: &DeviceId,
    family: &'static str,
    mode: Option<&'static str>,
    wait: &Wait<'_>,
) -> Result<(), BootError> {
    let is_it = |d: &Device| d.family == Some(family) && mode.is_none_or(|m| d.mode == Some(m));
    if device(state, id, is_it, wait, BootError::CancelledWaitingRecovery).await? {
        return Ok(());
    }
    let shows = match state.registry.get(id) {
        None => "nothing".to_string(),
        Some(d) => format!(
            "{:04x}:{:04x}, family {}, mode {}",
            d.vid,
            d.pid,
            d.family.unwrap_or("none"),
            d.mode.unwrap_or("none")
        ),
    };
    Err(BootError::NoRecoveryInTime {
        usb: id.to_string(),
        family,
        mode,
        shows,
    })
}

/// Waits until the device at `id` is what `is_it` wants: `true` when it is, `false` at
/// the deadline; `cancelled` when cancelled.
async fn device(
    state: &AppState,
    id: &DeviceId,
    is_it: impl Fn(&Device) -> bool,
    wait: &Wait<'_>,
    cancelled: BootError,
) -> Result<bool, BootError> {
    let mut events = state.registry.subscribe();
    loop {
        if state.registry.get(id).is_some_and(|d| is_it(&d)) {
            return Ok(true);
        }
        tokio::select! {
            _ = wait.cancel.cancelled() => return Err(cancelled),
            r = events.recv() => {
                if let Err(tokio::sync::broadcast::error::RecvError::Closed) = r {
                    // The monitor stopped: look again at the deadline only.
                    tokio::time::sleep_until(wait.deadline).await;
                }
            }
            _ = tokio::time::sleep_until(wait.deadline) => return Ok(false),
        }
    }
}

/// Waits for a login or shell prompt in the output from `from` on.
pub(super) async fn shell(
    console: &Console,
    prompts: &Prompts,
    from: u64,
    wait: &Wait<'_>,
) -> Result<(), TalkError> {
    let awaited = format!(
        "a login prompt /{}/ or shell prompt /{}/ after power-on",
        prompts.login.as_str(),
        prompts.shell.as_str()
    );
    watch(console, wait, &awaited, || {
        matches!(
            prompts.classify(&last_line_since(console, from)),
            Some(Seen::Login | Seen::Shell(_))
        )
        .then_some(())
    })
    .await
}
