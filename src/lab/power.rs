//! labgrid's `rest` power model (`labgrid/driver/power/rest.py`: GET a URL for `0`/`1`,
//! PUT `0`/`1` to switch) served on `labgrid.console_bind`, one URL per board by index,
//! through the board's configured power backend (`gatecmd_domain::config::power`), by the
//! power use case `power_board` calls (`gatecmd_domain::usecases::power::switch`: the
//! board's key taken under that place's lease, the power runner, the boot it starts).
//! Every request, reading included, is admitted on its own (`admission.rs`): the board
//! held by a labgrid place acquired by a listed person and the connection owned by one of
//! that person's accounts, checked once more under the board's key. This file holds the
//! wire format (`0`/`1`, HTTP statuses), the port's wording and its `labgrid_power` audit
//! line. The port is
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
use gatecmd_domain::usecases::power::switch::{self, Switch, SwitchError};
use gatecmd_domain::usecases::take::Caller;

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
    let conflict = |m: String| (StatusCode::CONFLICT, format!("gatecmd: {m}\n"));
    let hold = &admitted.hold;
    let config = lab.state.config();
    let to = if on { Switch::On } else { Switch::Off };
    let plan = switch::plan(&config, &admitted.board, to, None).map_err(|e| conflict(worded(e)))?;
    let holder = holder_of(&hold.place);
    let caller = Caller {
        client: &holder.0,
        session: None,
        lease: Some(&hold.lease.0),
        tool: "labgrid",
    };
    let held = switch::take(&lab.state, &config, &plan, caller)
        .await
        .map_err(|e| conflict(worded(e)))?;
    // Under the board's key: the hold is checked once more where nothing can change it.
    lab.still_admitted(admitted)
        .map_err(|why| (StatusCode::FORBIDDEN, format!("{why}\n")))?;
    let done = switch::switch_held(&lab.state, &plan, held, CancellationToken::new()).await;
    if done.ok {
        return Ok(());
    }
    Err((
        StatusCode::BAD_GATEWAY,
        format!(
            "gatecmd: the power command failed (exit {:?}): {}\n",
            done.exit_code,
            done.output.trim()
        ),
    ))
}

/// A switch refused, in the port's words (labgrid logs the text).
fn worded(e: SwitchError) -> String {
    match e {
        SwitchError::UnknownBoard(u) => format!("board {} is no longer configured", u.name),
        SwitchError::OffTooLong { off_secs, max } => {
            format!("off {off_secs} s is more than {max} s")
        }
        SwitchError::Spec(e) => e.to_string(),
        SwitchError::Lease(e) => e.to_string(),
        SwitchError::Lock(e) => e.to_string(),
        SwitchError::Changed { board } => format!("board {board}'s power switch changed"),
    }
}
