//! `GET /metrics`: on the main bind behind the request guard (a configured client's bearer
//! token, optionally only the clients listed in `metrics.clients`; open under `--no-auth`),
//! and on the optional loopback-only `metrics.bind` without a token. Host and Origin are
//! checked on both. Also the layer that counts every HTTP answer by status.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::census;
use super::encode::Format;
use crate::identity::ClientIdentity;
use crate::metrics::{counters, http_answer, route_of};
use crate::state::AppState;
use crate::transport::auth::OriginPolicy;

/// The path both binds serve.
pub const PATH: &str = "/metrics";

/// Put in a request's extensions by the guard under `--no-auth`: nobody has a name, so
/// `metrics.clients` cannot restrict anyone (the bind is loopback-only then).
#[derive(Clone, Copy, Debug)]
pub struct Unrestricted;

/// The main bind's `/metrics` handler; mount it inside the request guard.
pub async fn scrape(State(state): State<Arc<AppState>>, req: Request) -> Response {
    let config = state.config();
    if !config.metrics.enabled {
        return error(
            StatusCode::NOT_FOUND,
            "not_found",
            "metrics are off on this bind (metrics.enabled: false)",
        );
    }
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
    answer(&state, req.headers())
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

/// The router of the loopback-only `metrics.bind`: `/metrics` without a token, behind the
/// Host/Origin check (loopback names and `allowed_hosts`, as in force).
pub fn loopback_router(state: Arc<AppState>, bind: SocketAddr) -> Router {
    Router::new()
        .route(
            PATH,
            axum::routing::get(
                |State(state): State<Arc<AppState>>, headers: HeaderMap| async move {
                    answer(&state, &headers)
                },
            ),
        )
        .layer(axum::middleware::from_fn_with_state(
            (state.clone(), bind),
            check_host,
        ))
        .with_state(state)
}

async fn check_host(
    State((state, bind)): State<(Arc<AppState>, SocketAddr)>,
    req: Request,
    next: Next,
) -> Response {
    let checked = {
        let policy = OriginPolicy::new(&state.config(), bind, false);
        let headers = req.headers();
        let value = |name| {
            headers
                .get(name)
                .map(|v: &axum::http::HeaderValue| v.to_str().unwrap_or("<non-ascii>"))
        };
        policy.check(value(header::ORIGIN), value(header::HOST))
    };
    if let Err(e) = checked {
        tracing::warn!(error = %e, "metrics request refused");
        return error(StatusCode::FORBIDDEN, "forbidden", &e.to_string());
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
