//! A board returned to a known state when a lease on it ends (`boards[].on_release: off |
//! maskrom | keep`): whatever ended it (`unlock_device`, expiry, the legacy session's end,
//! an operator's release, `gatecmd leases end`), the lock manager's event is the one
//! signal. The board's key is taken like a command's for the action (no lease can be
//! granted in between), the switch runs through the one power runner
//! (`crate::power_run`), and one `on_release` audit line says what was done. A board that
//! a queued client was handed at once is left to it (skipped, audited): its new holder
//! decides.

use std::sync::Arc;
use std::time::Duration;

use gatecmd_core::events::RecvError;
use tokio_util::sync::CancellationToken;

use crate::audit::{OnReleaseRecord, PowerVia};
use crate::boards::PowerState;
use crate::config::OnRelease;
use crate::config::power::{action_spec, switch_spec};
use crate::locks::{ClientName, CommandLockRequest, LockEvent, LockEventKind, LockKey};
use crate::power_run::{Audited, run_power};
use crate::state::AppState;

/// Follows the lock events for the server's life and acts on every lease end of a board
/// whose `on_release` is not `keep` (the configuration in force at that moment).
pub async fn watch(state: Arc<AppState>) {
    let mut events = state.locks.subscribe();
    loop {
        match events.recv().await {
            Ok(e) => {
                if let Some((board, ended)) = lease_end(&e) {
                    let state = state.clone();
                    tokio::spawn(async move { release(&state, &board, ended, &e).await });
                }
            }
            Err(RecvError::Lagged(missed)) => {
                tracing::warn!(missed, "on_release fell behind the lock events");
            }
            Err(RecvError::Closed) => return,
        }
    }
}

/// The board and how its lease ended, for an event that ends a board lease.
fn lease_end(e: &LockEvent) -> Option<(String, &'static str)> {
    let LockKey::Board(board) = &e.key else {
        return None;
    };
    e.lease_id.as_ref()?;
    let ended = match e.kind {
        LockEventKind::Released => "released",
        LockEventKind::Expired => "expired",
        LockEventKind::SessionEnded => "session_ended",
        LockEventKind::ForceReleased => "force_released",
        _ => return None,
    };
    Some((board.clone(), ended))
}

/// Runs `board`'s `on_release` action after its lease ended, holding the board's key.
async fn release(state: &AppState, board: &str, ended: &str, e: &LockEvent) {
    let config = state.config();
    let Some(b) = config.board(board) else {
        return;
    };
    let action = b.on_release;
    let (spec, after) = match action {
        OnRelease::Keep => return,
        OnRelease::Off => (switch_spec(&config, b, false), PowerState::Off),
        OnRelease::Maskrom => match &b.maskrom {
            Some(a) => (action_spec(&config, a), PowerState::On),
            None => return, // refused at load; a reload may have changed it since
        },
    };
    let client = e.client.0.as_str();
    let lease_id = e.lease_id.as_ref().map_or("", |l| l.0.as_str());
    let record = |outcome: &str, exit_code: Option<i32>, detail: Option<String>| {
        state.audit.record(&OnReleaseRecord {
            board,
            client,
            lease_id,
            ended,
            action: action.as_str(),
            outcome,
            exit_code,
            detail,
        });
    };
    let spec = match spec {
        Ok(s) => s,
        Err(why) => return record("skipped", None, Some(why.to_string())),
    };
    let hold = CommandLockRequest {
        keys: vec![LockKey::Board(board.to_string())],
        shared: vec![],
        client: ClientName(client.to_string()),
        session: None,
        lease: None,
        command: format!("on_release {}", action.as_str()),
    };
    let _held = match state
        .locks
        .acquire_for_command_wait(hold, Duration::ZERO)
        .await
    {
        Ok(g) => g,
        Err(why) => return record("skipped", None, Some(why.to_string())),
    };
    let run = run_power(
        state,
        board,
        &spec,
        after,
        CancellationToken::new(),
        Audited::Step(PowerVia::OnRelease),
    )
    .await;
    let exit_code = run.outcome.as_ref().ok().and_then(|o| o.exit_code);
    if run.ok() {
        record("ran", exit_code, None);
    } else {
        let why = match &run.outcome {
            Ok(_) => run.output(),
            Err(e) => e.to_string(),
        };
        record("failed", exit_code, Some(why));
    }
}
