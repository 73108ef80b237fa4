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
use gatecmd_domain::state::AppState;

/// The route.
pub const PATH: &str = "/lab/waits/{id}";
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
