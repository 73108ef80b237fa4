//! labgrid's `rest` power model (`labgrid/driver/power/rest.py`: GET a URL for `0`/`1`,
//! PUT `0`/`1` to switch) served on `labgrid.console_bind`, one URL per board by index,
//! through the board's configured power backend (uhubctl or its on/off commands, via the
//! executor like `power_board`). Switching needs the board held by a labgrid place and
//! runs under that place's lease; anything else is refused with the reason.

use super::error::LabError;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::Lab;
use super::holds::holder_of;
use crate::boards::PowerState;
use crate::config::LabSettings;
use crate::locks::{CommandLockRequest, LockKey};
use crate::tools::power::spec_for;

/// The bound power port.
pub struct Listener {
    pub port: u16,
    listener: TcpListener,
}

/// Binds the power port.
pub async fn bind(lab: &LabSettings) -> Result<Listener, LabError> {
    let (listener, port) = super::bind_port(lab).await?;
    Ok(Listener { port, listener })
}

/// Serves until `shutdown`.
pub async fn serve(lab: Arc<Lab>, l: Listener, shutdown: CancellationToken) {
    let app = Router::new()
        .route("/power/{index}/value", get(read).put(switch))
        .with_state(lab);
    let _ = axum::serve(l.listener, app)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await;
}

type Answer = (StatusCode, String);

fn board_of(lab: &Lab, index: u64) -> Result<String, Answer> {
    lab.ports
        .power_index
        .iter()
        .find(|(_, i)| **i == index)
        .map(|(b, _)| b.clone())
        .ok_or((
            StatusCode::NOT_FOUND,
            format!("gatecmd: no board has power index {index}\n"),
        ))
}

async fn read(State(lab): State<Arc<Lab>>, Path(index): Path<u64>) -> Result<String, Answer> {
    let board = board_of(&lab, index)?;
    Ok(match lab.state.boards.power_state(&board) {
        PowerState::On => "1".into(),
        // labgrid reads anything but "1" as off; unknown is shown as off.
        PowerState::Off | PowerState::Unknown => "0".into(),
    })
}

async fn switch(
    State(lab): State<Arc<Lab>>,
    Path(index): Path<u64>,
    body: String,
) -> Result<String, Answer> {
    let board = board_of(&lab, index)?;
    let on = match body.trim() {
        "1" => true,
        "0" => false,
        other => {
            return Err((
                StatusCode::BAD_REQUEST,
                format!("gatecmd: send 1 (on) or 0 (off), not {other:?}\n"),
            ));
        }
    };
    let result = switch_board(&lab, &board, on).await;
    lab.audit(
        "labgrid_power",
        serde_json::json!({
            "board": board,
            "on": on,
            "place": lab.holds.get(&board).map(|h| h.place),
            "ok": result.is_ok(),
            "reason": result.as_ref().err().map(|e| e.1.trim().to_string()),
        }),
    );
    result.map(|()| String::new())
}

async fn switch_board(lab: &Lab, board: &str, on: bool) -> Result<(), Answer> {
    let conflict = |m: String| (StatusCode::CONFLICT, format!("{m}\n"));
    let Some(hold) = lab.holds.get(board) else {
        return Err(conflict(format!(
            "gatecmd: board {board} is not acquired through labgrid: acquire its place first"
        )));
    };
    let config = lab.state.config();
    let Some(cfg) = config.board(board) else {
        return Err(conflict(format!(
            "gatecmd: board {board} is no longer configured"
        )));
    };
    let spec = spec_for(&config, cfg, on).map_err(|r| conflict(format!("gatecmd: {r}")))?;
    let lock = CommandLockRequest {
        keys: vec![LockKey::Board(board.to_string())],
        shared: vec![],
        client: holder_of(&hold.place),
        session: None,
        lease: Some(hold.lease.clone()),
        command: format!("labgrid power {}", if on { "on" } else { "off" }),
    };
    let _guard = lab
        .state
        .locks
        .acquire_for_command_wait(lock, std::time::Duration::ZERO)
        .await
        .map_err(|e| conflict(format!("gatecmd: {e}")))?;
    let outcome = lab
        .state
        .executor
        .run_with(&spec, CancellationToken::new(), None)
        .await;
    match outcome {
        Ok(o) if o.exit_code == Some(0) && o.stopped.is_none() => {
            let s = if on { PowerState::On } else { PowerState::Off };
            lab.state.boards.set_power_state(board, s);
            Ok(())
        }
        Ok(o) => {
            lab.state.boards.set_power_state(board, PowerState::Unknown);
            Err((
                StatusCode::BAD_GATEWAY,
                format!(
                    "gatecmd: the power command failed (exit {:?}): {}\n",
                    o.exit_code,
                    crate::output::clean(&o.stderr)
                ),
            ))
        }
        Err(e) => {
            lab.state.boards.set_power_state(board, PowerState::Unknown);
            Err((StatusCode::BAD_GATEWAY, format!("gatecmd: {e}\n")))
        }
    }
}
