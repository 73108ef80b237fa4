//! `GET /metrics`: on the main bind behind the request guard (a configured client's bearer
//! token, optionally only the clients listed in `metrics.clients`; open under `--no-auth`),
//! and on the optional `metrics.bind` listener behind the same token check with its own
//! Host policy (a NAT guest reaches every port of the host's loopback, so the address is
//! never the credential). Also the layer that counts every HTTP answer by status.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::census;
use super::encode::Format;
use crate::transport::auth::OriginPolicy;
use crate::transport::gate::{Access, Gate, Unrestricted, admit};
use gatecmd_core::identity::ClientIdentity;
use gatecmd_core::metrics::{counters, http_answer, route_of};
use gatecmd_domain::state::AppState;

/// The path both binds serve.
pub const PATH: &str = "/metrics";

/// The main bind's `/metrics` handler; mount it inside the request guard.
pub async fn scrape(State(state): State<Arc<AppState>>, req: Request) -> Response {
    if !state.config().metrics.enabled {
        return error(
            StatusCode::NOT_FOUND,
            "not_found",
            "metrics are off on this bind (metrics.enabled: false)",
        );
    }
    scrape_allowed(&state, req)
}

/// The scrape for a request the guard let through, if its client is one `metrics.clients`
/// allows (every client when the list is empty; everyone under `--no-auth`).
fn scrape_allowed(state: &AppState, req: Request) -> Response {
    let config = state.config();
    let open = req.extensions().get::<Unrestricted>().is_some();
    let who = req
        .extensions()
        .get::<ClientIdentity>()
        .map(|c| c.name.as_str());
    if !open && !who.is_some_and(|w| config.metrics.may_scrape(w)) {
        tracing::warn!(
            client = who.unwrap_or("-"),
            "metrics refused: client not in metrics.clients"
        );
        return error(
            StatusCode::FORBIDDEN,
            "forbidden",
            "this client may not read /metrics: it is not listed in metrics.clients",
        );
    }
    answer(state, req.headers())
}

/// The scrape itself: the process's counters and the state's gauges, in the format the
/// `Accept` header asks for.
pub fn answer(state: &AppState, headers: &HeaderMap) -> Response {
    let accept: Vec<&str> = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    let format = Format::negotiate(Some(&accept.join(",")));
    let gauges = census::registry(state);
    match format.render(&[counters(), &gauges]) {
        Ok(body) => ([(header::CONTENT_TYPE, format.content_type())], body).into_response(),
        Err(_) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the metrics could not be written",
        ),
    }
}

/// The router of `metrics.bind`: `/metrics` alone, behind the same check as the main bind
/// (`http::admit`: the tokens in force from `gate`, a Host policy for this address), for
/// the clients `metrics.clients` allows. `metrics.enabled` concerns the main bind only.
pub fn bind_router(state: Arc<AppState>, gate: Arc<Gate>, bind: SocketAddr) -> Router {
    Router::new()
        .route(
            PATH,
            axum::routing::get(
                |State(state): State<Arc<AppState>>, req: Request| async move {
                    scrape_allowed(&state, req)
                },
            ),
        )
        .layer(axum::middleware::from_fn_with_state(
            (state.clone(), gate, bind),
            bind_guard,
        ))
        .with_state(state)
}

async fn bind_guard(
    State((state, gate, bind)): State<(Arc<AppState>, Arc<Gate>, SocketAddr)>,
    mut req: Request,
    next: Next,
) -> Response {
    let current = gate.current();
    let access = &current.0;
    let policy = OriginPolicy::new(&state.config(), bind, matches!(access, Access::Tokens(_)));
    if let Err(refused) = admit(access, &policy, &mut req) {
        return *refused;
    }
    next.run(req).await
}

/// The outermost layer of the main router: counts every answer by route and status, so
/// that 401/403 from the guard and 413 from the body limit are seen too.
pub async fn count_status(req: Request, next: Next) -> Response {
    // Only the known routes are labels: anything else is `other`.
    let route = route_of(req.uri().path());
    let resp = next.run(req).await;
    http_answer(route, resp.status().as_u16());
    resp
}

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    let body = axum::Json(serde_json::json!({ "error": code, "message": message }));
    (status, body).into_response()
}
