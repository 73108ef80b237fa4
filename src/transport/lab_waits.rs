//! `POST /lab/waits/ID/claim`: another host of the lab, about to give a board it freed to
//! a lab waiter of this host, asks whether the waiter still wants it
//! (`gatecmd_domain::lab::claims`: the first host to ask is told yes, 200; any other no,
//! 409; an ended wait 404). Only a `peer: true` client asks (any other gets 403).
//!
//! `DELETE /lab/waits/ID`: another host of the lab withdraws its agent's wait queued here
//! (`gatecmd_domain::lab::waits`) because the agent was served elsewhere. Behind the same
//! guard as `/mcp`: only the `peer: true` client acting for that agent (`HOST/CLIENT`, the
//! identity the wait was registered under) reaches its own waits; any other caller's
//! withdrawal finds nothing (404), whatever the id.
//!
//! The wait's headers (`Gatecmd-Lab-Wait`, `Gatecmd-Lab-Arrival`) are read here too, into
//! the request's extensions, for a request acting through a peer only.

use std::sync::Arc;

use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use gatecmd_core::identity::ClientIdentity;
use gatecmd_domain::lab::LabWait;
use gatecmd_domain::lab::claims::ClaimAnswer;
use gatecmd_domain::state::AppState;

/// The routes.
pub const PATH: &str = "/lab/waits/{id}";
pub const CLAIM_PATH: &str = "/lab/waits/{id}/claim";
/// The header naming a lab wait, and the one giving its arrival (Unix ms).
pub const WAIT: &str = "gatecmd-lab-wait";
pub const ARRIVAL: &str = "gatecmd-lab-arrival";

/// The lab wait a request acting through a peer names (both headers, well-formed); none
/// for any other request, whose headers are ignored.
pub fn lab_wait(req: &Request, acting: &ClientIdentity) -> Option<LabWait> {
    if !acting.name.contains('/') {
        return None;
    }
    let h = |n: &str| req.headers().get(n).and_then(|v| v.to_str().ok());
    LabWait::parse(h(WAIT)?, h(ARRIVAL)?)
}

/// Withdraws the caller's wait `id`: 204 when it was queued, 404 when not (served,
/// ended, or never this caller's).
pub async fn withdraw(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    req: Request,
) -> Response {
    let Some(who) = req.extensions().get::<ClientIdentity>() else {
        return StatusCode::UNAUTHORIZED.into_response();
    };
    if state.lab.waits.withdraw(&who.name, &id) {
        tracing::debug!(client = %who.name, "lab wait withdrawn");
        StatusCode::NO_CONTENT.into_response()
    } else {
        (
            StatusCode::NOT_FOUND,
            axum::Json(serde_json::json!({
                "error": "not_found",
                "message": "no lab wait of yours by that id is queued here (served, ended, or never queued)",
            })),
        )
            .into_response()
    }
}

/// Answers another host's claim of this host's lab waiter `id`.
pub async fn claim(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    req: Request,
) -> Response {
    let Some(who) = req.extensions().get::<ClientIdentity>() else {
        return StatusCode::UNAUTHORIZED.into_response();
    };
    // The asking host is its peer client (acting for nobody, or for an agent: the host part).
    let host = who.name.split('/').next().unwrap_or_default();
    let peer = state
        .config()
        .clients
        .iter()
        .any(|c| c.name == host && c.peer);
    let json = |status: StatusCode, v: serde_json::Value| (status, axum::Json(v)).into_response();
    if !peer {
        return json(
            StatusCode::FORBIDDEN,
            serde_json::json!({"error": "forbidden", "message": "only a peer: true client (another host of the lab) claims a lab waiter"}),
        );
    }
    match state.lab.claims.claim(&id, host) {
        ClaimAnswer::Yours => json(StatusCode::OK, serde_json::json!({"claim": "yours"})),
        ClaimAnswer::Taken(by) => json(
            StatusCode::CONFLICT,
            serde_json::json!({"claim": "taken", "by": by}),
        ),
        ClaimAnswer::Unknown => json(
            StatusCode::NOT_FOUND,
            serde_json::json!({"claim": "unknown", "message": "no lab wait by that id is open here"}),
        ),
    }
}
