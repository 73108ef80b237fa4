//! Tells a board that went away during a command from one that was unplugged while idle,
//! for `gatecmd_devices_lost_during_command_total` (the "board gone during a command"
//! alert). The registry reports a removal only after the re-enumeration grace, by when
//! the command that lost its board has often failed and ended: so a removal counts when a
//! command runs on one of the device's keys, or ended on one within the grace (plus a
//! second) before the removal was reported.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::broadcast::error::RecvError;

use crate::locks::{LockEventKind, LockKey};
use crate::state::AppState;
use gatecmd_devices::{Device, DeviceEvent};

/// Beyond this many remembered keys, entries older than [`SLACK`] + the grace are dropped.
const MAX_REMEMBERED: usize = 256;
/// Added to the removal grace: the time between the command's end and the unplug event.
const SLACK: Duration = Duration::from_secs(1);

/// Runs until the registry or the lock manager is gone (spawn it once per server).
pub async fn watch_lost_devices(state: Arc<AppState>) {
    let mut devices = state.registry.subscribe();
    let mut locks = state.locks.subscribe();
    // When a command last ended on each key.
    let mut ended: HashMap<LockKey, Instant> = HashMap::new();
    loop {
        tokio::select! {
            ev = locks.recv() => match ev {
                Ok(ev) if ev.kind == LockEventKind::CommandFinished => {
                    if ended.len() >= MAX_REMEMBERED {
                        let keep = window(&state);
                        ended.retain(|_, at| at.elapsed() <= keep);
                    }
                    ended.insert(ev.key, Instant::now());
                }
                Ok(_) | Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return,
            },
            ev = devices.recv() => match ev {
                Ok(DeviceEvent::Removed(d)) => {
                    if in_use(&state, &d, &ended) {
                        tracing::warn!(device = %d.id, "a device went away during a command on it");
                        gatecmd_core::metrics::device_lost_during_command(d.kind.label());
                    }
                }
                Ok(_) | Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return,
            },
        }
    }
}

/// How recently a command must have ended on a key for a removal to count.
fn window(state: &AppState) -> Duration {
    Duration::from_millis(state.config().monitor.removal_grace_ms) + SLACK
}

/// Whether a command runs on one of `d`'s keys, or ended on one within the window.
fn in_use(state: &AppState, d: &Device, ended: &HashMap<LockKey, Instant>) -> bool {
    let config = state.config();
    let mut keys = vec![
        LockKey::Port(d.id.to_string()),
        crate::locks::lock_key_of(&config, d),
    ];
    if let Some(b) = config.board_at(d.id.as_str()) {
        keys.push(LockKey::Board(b.name.clone()));
    }
    let recent = window(state);
    keys.iter().any(|k| {
        let running = state
            .locks
            .key_state(k)
            .is_some_and(|s| s.running.is_some() || s.shared.iter().any(|h| h.command.is_some()));
        running || ended.get(k).is_some_and(|at| at.elapsed() <= recent)
    })
}
