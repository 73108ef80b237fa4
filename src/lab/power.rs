//! labgrid's `rest` power model (`labgrid/driver/power/rest.py`: GET a URL for `0`/`1`,
//! PUT `0`/`1` to switch) served on `labgrid.console_bind`, one URL per board by index,
//! through the board's configured power backend (`gatecmd_domain::config::power`, run by
//! the domain's power runner like `power_board`). Every request, reading included, is
//! admitted on its own (`admission.rs`): the board held by a labgrid place acquired by a
//! listed person and the connection owned by one of that person's accounts; the switch
//! runs under that place's lease. The port is
//! served by the same accept loop as `/mcp` (`transport::conn_limits`), with small caps
//! of its own: a connection that no request of the holder has authenticated is closed
//! after the header timeout, and the oldest such goes first when they pile up.

use super::admission::{NotServed, PortRefusal};
use super::error::LabError;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, Extension, Path, State};
use axum::http::StatusCode;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::Lab;
use super::admission::Admitted;
use super::holds::holder_of;
use crate::transport::conn_limits::{ConnLimits, ConnTicket, LocalAddr};
use gatecmd_domain::audit::LabgridEvent;
use gatecmd_domain::boards::PowerState;
use gatecmd_domain::config::LabSettings;
use gatecmd_domain::config::power::switch_spec;
use gatecmd_domain::locks::{CommandLockRequest, LockKey};
use gatecmd_domain::power_run::{Audited, run_power};

/// The power port's own connection caps: labgrid's power driver opens one connection per
/// request, and only holders' requests authenticate one.
const LIMITS: ConnLimits = ConnLimits {
    max_connections: 64,
    max_unauthenticated: 16,
    max_unauthenticated_per_peer: 16,
    header_read_timeout: Duration::from_secs(5),
    idle_timeout: Duration::from_secs(30),
};

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
    if let Err(e) = crate::transport::conn_limits::serve(l.listener, app, LIMITS, shutdown).await {
        tracing::warn!(error = %e, "labgrid power port stopped");
    }
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

/// The connection as the accept loop describes it: who is at the other end, through
/// which local address, and its ticket (marked authenticated once the holder asked).
type Conn = (
    ConnectInfo<SocketAddr>,
    Option<Extension<LocalAddr>>,
    Extension<ConnTicket>,
);

/// A request refused at admission: the answer the peer gets (naming no account) and the
/// reason the operator's audit line records.
struct Refused {
    status: StatusCode,
    peer_text: String,
    operator: String,
}

impl From<Refused> for Answer {
    fn from(r: Refused) -> Answer {
        (r.status, r.peer_text)
    }
}

/// Admits one request to `board` (see `admission.rs`), or says why not.
fn admit(lab: &Lab, board: &str, conn: &Conn) -> Result<Admitted, Refused> {
    let (ConnectInfo(peer), local, Extension(ticket)) = conn;
    let refused = |why: PortRefusal| {
        let status = match why {
            PortRefusal::NotAcquired(_) | PortRefusal::HolderUnknown { .. } => StatusCode::CONFLICT,
            PortRefusal::Lookup(_) => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::FORBIDDEN,
        };
        Refused {
            status,
            operator: why.for_operator(),
            peer_text: format!("{why}\n"),
        }
    };
    let Some(Extension(LocalAddr(local))) = local else {
        return Err(refused(PortRefusal::NotServed {
            board: board.to_string(),
            why: NotServed::NoLocalOwner,
        }));
    };
    let admitted = lab.admit(board, *peer, *local).map_err(refused)?;
    ticket.authenticated();
    Ok(admitted)
}

async fn read(
    State(lab): State<Arc<Lab>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    local: Option<Extension<LocalAddr>>,
    ticket: Extension<ConnTicket>,
    Path(index): Path<u64>,
) -> Result<String, Answer> {
    let board = board_of(&lab, index)?;
    let conn = (ConnectInfo(peer), local, ticket);
    admit(&lab, &board, &conn).map_err(Answer::from)?;
    Ok(match lab.state.boards.power_state(&board) {
        PowerState::On => "1".into(),
        // labgrid reads anything but "1" as off; unknown is shown as off.
        PowerState::Off | PowerState::Unknown => "0".into(),
    })
}

async fn switch(
    State(lab): State<Arc<Lab>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    local: Option<Extension<LocalAddr>>,
    ticket: Extension<ConnTicket>,
    Path(index): Path<u64>,
    body: String,
) -> Result<String, Answer> {
    let board = board_of(&lab, index)?;
    let conn = (ConnectInfo(peer), local, ticket);
    let admitted = match admit(&lab, &board, &conn) {
        Ok(a) => a,
        Err(refusal) => {
            lab.audit(LabgridEvent::PowerRefused {
                board: &board,
                peer: peer.to_string(),
                reason: &refusal.operator,
            });
            return Err(refusal.into());
        }
    };
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
    let result = switch_board(&lab, &admitted, on).await;
    lab.audit(LabgridEvent::Power {
        board: &board,
        on,
        place: &admitted.hold.place,
        user: &admitted.peer.name,
        ok: result.is_ok(),
        reason: result.as_ref().err().map(|e| e.1.trim().to_string()),
    });
    result.map(|()| String::new())
}

async fn switch_board(lab: &Lab, admitted: &Admitted, on: bool) -> Result<(), Answer> {
    let conflict = |m: String| (StatusCode::CONFLICT, format!("{m}\n"));
    let board = admitted.board.as_str();
    let hold = &admitted.hold;
    let config = lab.state.config();
    let Some(cfg) = config.board(board) else {
        return Err(conflict(format!(
            "gatecmd: board {board} is no longer configured"
        )));
    };
    let spec = switch_spec(&config, cfg, on).map_err(|r| conflict(format!("gatecmd: {r}")))?;
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
    // Under the command lock: the hold is checked once more where nothing can change it.
    lab.still_admitted(admitted)
        .map_err(|why| (StatusCode::FORBIDDEN, format!("{why}\n")))?;
    let after = if on { PowerState::On } else { PowerState::Off };
    if on {
        // The bytes from here on are the boot this switch starts (docs/BOARDS.md).
        let by = holder_of(&hold.place).0;
        let trigger = gatecmd_domain::boots::Trigger::action("labgrid", &by, "power on");
        lab.state.boots.power_on(board, trigger);
    }
    let run = run_power(
        &lab.state,
        board,
        &spec,
        after,
        CancellationToken::new(),
        Audited::ByCaller,
    )
    .await;
    let ok = run.ok();
    match run.outcome {
        Ok(_) if ok => Ok(()),
        Ok(o) => Err((
            StatusCode::BAD_GATEWAY,
            format!(
                "gatecmd: the power command failed (exit {:?}): {}\n",
                o.exit_code,
                gatecmd_core::output::clean(&o.stderr)
            ),
        )),
        Err(e) => Err((StatusCode::BAD_GATEWAY, format!("gatecmd: {e}\n"))),
    }
}
