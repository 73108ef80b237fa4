//! The HTTP front: `/mcp` (rmcp's Streamable HTTP service behind the auth and Origin/Host
//! checks) and `/health` (no auth, no secrets).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

pub use crate::transport::conn_limits::ConnLimits;
pub use crate::transport::gate::{Access, Gate, admit};
use crate::transport::json_answer::QuickTools;
use crate::transport::sessions::LeaseReleasingSessions;
use gatecmd_core::identity::ClientIdentity;
use gatecmd_domain::state::AppState;
use gatecmd_mcp::server::GatecmdServer;

type Rmcp = StreamableHttpService<GatecmdServer, LeaseReleasingSessions>;

/// `/mcp`: two rmcp services over one session store. `quick` answers the calls that
/// `json_answer::is_quick` picks with rmcp's own JSON (the cheapest path); `streamed`
/// answers the rest, including every legacy session request, with SSE, which
/// `json_answer::prefer_json` turns into JSON when the answer comes within its window.
#[derive(Clone)]
struct McpService {
    quick: Rmcp,
    streamed: Rmcp,
    /// Which tool calls `quick` answers: from the tool list's marks.
    quick_tools: QuickTools,
}

impl tower_service::Service<Request> for McpService {
    type Response = <Rmcp as tower_service::Service<Request>>::Response;
    type Error = <Rmcp as tower_service::Service<Request>>::Error;
    type Future = <Rmcp as tower_service::Service<Request>>::Future;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        // rmcp's service is always ready (it clones itself per call).
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request) -> Self::Future {
        if crate::transport::json_answer::is_quick(&req, &self.quick_tools) {
            self.quick.call(req)
        } else {
            self.streamed.call(req)
        }
    }
}

/// rmcp's own body limit, fixed when the router is built. `body_limit::enforce` applies the
/// configured `limits.max_request_body_bytes` in front of it with the value in force, so
/// rmcp's is only a backstop: above any sensible configured value.
const RMCP_BODY_CEILING: usize = 1 << 30;

/// Builds the router. `shutdown` ends every MCP session when cancelled.
pub fn router(state: Arc<AppState>, gate: Arc<Gate>, shutdown: CancellationToken) -> Router {
    let config = state.config();
    let mut sessions = LocalSessionManager::default();
    // Restart-only (`RESTART_ONLY` in crates/gatecmd-domain/src/state/reload.rs): rmcp takes it here, once.
    sessions.session_config.keep_alive = Some(Duration::from_secs(config.limits.session_idle_secs));
    let mcp_config = StreamableHttpServerConfig::default()
        // Host and Origin are checked by `guard` (one policy, with errors that say what to do).
        .disable_allowed_hosts()
        .disable_allowed_origins()
        .with_max_request_body_bytes(RMCP_BODY_CEILING.max(config.limits.max_request_body_bytes))
        .with_sse_keep_alive(Some(Duration::from_secs(15)))
        .with_cancellation_token(shutdown);
    let sessions = Arc::new(LeaseReleasingSessions::new(sessions, state.clone()));
    // The scrape counts open sessions through the state (a weak link: the router owns them).
    let census: Arc<dyn gatecmd_core::metrics::SessionCensus> = sessions.clone();
    state.metrics.set_sessions(Arc::downgrade(&census));
    // One cache of list_devices answers for every handler of this transport.
    let lists = Arc::new(gatecmd_mcp::views::list_cache::ListCache::default());
    let service = |config: StreamableHttpServerConfig| {
        let state = state.clone();
        let lists = lists.clone();
        StreamableHttpService::new(
            move || Ok(GatecmdServer::new(state.clone(), lists.clone())),
            sessions.clone(),
            config,
        )
    };
    let mcp = McpService {
        quick: service(mcp_config.clone().with_json_response(true)),
        streamed: service(mcp_config),
        quick_tools: QuickTools::from_tool_list(GatecmdServer::quick_tools),
    };
    Router::new()
        .nest_service("/mcp", mcp)
        // Behind the same guard as /mcp (Host/Origin, then a client's token).
        .route(
            crate::transport::metrics::PATH,
            axum::routing::get(crate::transport::metrics::scrape).with_state(state.clone()),
        )
        .route(
            crate::transport::lab_waits::PATH,
            axum::routing::delete(crate::transport::lab_waits::withdraw).with_state(state.clone()),
        )
        .route(
            crate::transport::lab_waits::CLAIM_PATH,
            axum::routing::post(crate::transport::lab_waits::claim).with_state(state.clone()),
        )
        // Inside the guard: a refused request never reaches rmcp or these layers.
        .layer(axum::middleware::from_fn(
            crate::transport::json_answer::prefer_json,
        ))
        .layer(axum::middleware::from_fn(session_end_status))
        .layer(axum::middleware::from_fn_with_state(
            sessions,
            session_owner,
        ))
        // Answers not yet read, per client (src/transport/open_answers.rs).
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::transport::open_answers::hold,
        ))
        // The body limit in force, before the session layer reads anything.
        .layer(axum::middleware::from_fn_with_state(
            state,
            crate::transport::body_limit::enforce,
        ))
        .layer(axum::middleware::from_fn_with_state(gate, guard))
        .route("/health", axum::routing::get(health))
}

async fn health() -> impl IntoResponse {
    axum::Json(
        serde_json::json!({ "status": "ok", "name": "gatecmd", "version": env!("CARGO_PKG_VERSION") }),
    )
}

/// Origin/Host first (403), then the bearer token (401); the identity rides in the request's
/// extensions, where rmcp hands it to the tools.
async fn guard(State(gate): State<Arc<Gate>>, mut req: Request, next: Next) -> Response {
    let current = gate.current();
    let (access, policy) = &*current;
    if let Err(refused) = admit(access, policy, &mut req) {
        return *refused;
    }
    next.run(req).await
}

/// A request naming a session (`Mcp-Session-Id`) must name a live one its caller opened;
/// another client's session is answered exactly like an unknown one (404), so it can be
/// neither used, read, nor ended, and its leases stay.
async fn session_owner(
    State(sessions): State<Arc<LeaseReleasingSessions>>,
    req: Request,
    next: Next,
) -> Response {
    let Some(id) = req.headers().get(SESSION_HEADER) else {
        return next.run(req).await;
    };
    let client = req
        .extensions()
        .get::<ClientIdentity>()
        .map(|c| c.name.as_str());
    let owned = match (id.to_str(), client) {
        (Ok(id), Some(client)) => sessions.owned_by(id, client),
        _ => false,
    };
    if owned {
        return next.run(req).await;
    }
    tracing::warn!(
        client = client.unwrap_or("-"),
        "request names a session that is not the caller's: 404"
    );
    let body = axum::Json(serde_json::json!({
        "error": "session_not_found",
        "message": "no such session for this client: it ended, timed out, or was never yours; \
                    initialize a new one (2026-07-28 requests send no Mcp-Session-Id)",
    }));
    (StatusCode::NOT_FOUND, body).into_response()
}

const SESSION_HEADER: &str = "mcp-session-id";

/// A session ended by DELETE: 204 instead of rmcp's 202. The transport names no success
/// code, and the official Python SDK logs "Session termination failed: 202" on every
/// close otherwise.
async fn session_end_status(req: Request, next: Next) -> Response {
    let delete = req.method() == axum::http::Method::DELETE;
    let mut resp = next.run(req).await;
    if delete && resp.status() == StatusCode::ACCEPTED {
        *resp.status_mut() = StatusCode::NO_CONTENT;
    }
    resp
}

/// Serves `router` on `listener` under the connection `limits` until `shutdown` is
/// cancelled (the accept loop and its caps: `conn_limits`).
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    limits: ConnLimits,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    crate::transport::conn_limits::serve(listener, router, limits, shutdown).await
}
