//! The bench page (docs/OPERATING.md): `GET /` serves one self-contained page (HTML, CSS
//! and JS embedded in the binary) that shows devices, boards, locks and their queues,
//! running commands and recent decisions, kept live by a server-sent event stream.
//!
//! - `assets`: the embedded files and the security headers every page answer carries;
//! - `sessions`: signed-in sessions (random id in an `HttpOnly; SameSite=Strict` cookie);
//! - `signin`: `GET /`, `POST /signin`, `POST /signout`; the same-origin and CSRF checks;
//! - `snapshot`: the JSON view of the bench (`GET /state`, and each event);
//! - `stream`: `GET /events`, the SSE stream (a snapshot on connect, then on each change);
//! - `release`: `POST /release`, an admin ending a stuck lease;
//! - `approval`: `POST /approval`, a signed-in approver deciding an approval request, and
//!   `GET /approval/apr-N`, the link to one (a `by: requester` request's elicitation);
//! - `console`: `GET /console`, a board's console text from a cursor (the read-only view).
//!
//! Nothing of the bench reaches a visitor without a session (or `--no-auth` on loopback).
//! Host and Origin answer to the same policy as `/mcp`; on top of it, every POST must come
//! from the page's own origin, and a state-changing one must carry the session's CSRF token.

mod approval;
mod assets;
mod console;
mod release;
mod sessions;
mod signin;
mod snapshot;
mod stream;

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use chrono::{DateTime, Utc};

use crate::transport::conn_limits::ConnTicket;
use crate::transport::http::{Access, Gate};
use gatecmd_domain::state::AppState;

pub use sessions::{COOKIE, FILE_NAME as SESSIONS_FILE, Session, Sessions};

/// Sign-in attempts checked at once (more wait their turn).
pub const SIGNINS_AT_ONCE: usize = 4;

/// What the page handlers share.
pub struct Page {
    state: Arc<AppState>,
    gate: Arc<Gate>,
    sessions: Sessions,
    started: Instant,
    started_at: DateTime<Utc>,
    /// Open event streams, against `page.max_streams`.
    streams: Arc<AtomicUsize>,
    /// The CSRF token of the no-auth viewer (no session exists to hold one).
    open_csrf: String,
    /// Sign-ins checked at once; with each taking at least 200 ms, guessing runs at a
    /// few tries a second, however many connections try.
    signins: tokio::sync::Semaphore,
}

/// The routes of the page. Merge them beside, not under, `/mcp`'s bearer-token guard:
/// they do their own checks (`Page::viewer`).
pub fn routes(state: Arc<AppState>, gate: Arc<Gate>) -> Router {
    let config = state.config();
    let idle = Duration::from_secs(config.page.session_idle_secs);
    let page = Arc::new(Page {
        sessions: Sessions::open(Some(&config.state_dir), idle),
        state,
        gate,
        started: Instant::now(),
        started_at: Utc::now(),
        streams: Arc::new(AtomicUsize::new(0)),
        open_csrf: {
            let mut b = [0u8; 16];
            // Without randomness the no-auth page simply has no working admin form.
            let _ = getrandom::fill(&mut b);
            hex::encode(b)
        },
        signins: tokio::sync::Semaphore::new(SIGNINS_AT_ONCE),
    });
    use axum::routing::{get, post};
    let checked = page.clone();
    Router::new()
        .route("/", get(signin::index))
        .route("/page.css", get(assets::css))
        .route("/page.js", get(assets::js))
        .route("/signin", post(signin::sign_in))
        .route("/signout", post(signin::sign_out))
        .route("/state", get(snapshot::state))
        .route("/events", get(stream::events))
        .route("/console", get(console::console))
        .route("/release", post(release::release))
        .route("/approval", post(approval::decide))
        .route("/approval/{id}", get(approval::show))
        .layer(axum::middleware::from_fn_with_state(checked, target_host))
        .with_state(page)
}

/// An absolute-form request target (`GET http://evil.example/ HTTP/1.1`) names the host the
/// client meant: it answers to the same Host policy as `/mcp` (`http::guard` does the same).
async fn target_host(
    axum::extract::State(p): axum::extract::State<Arc<Page>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if let Some(t) = req.uri().authority().map(|a| a.as_str().to_string()) {
        let current = p.gate.current();
        if let Err(e) = current.1.check_host(&t) {
            return denied(Denied::Forbidden(e.to_string()));
        }
    }
    next.run(req).await
}

/// Who is looking at the page.
#[derive(Debug, Clone)]
pub struct Viewer {
    pub client: String,
    pub admin: bool,
    pub csrf: String,
    /// The cookie value, when signed in (none with `--no-auth`).
    pub session_id: Option<String>,
}

/// Why a page request gets no bench data.
#[derive(Debug)]
pub enum Denied {
    /// Host or Origin outside the policy (403).
    Forbidden(String),
    /// No live session (the sign-in form, or 401).
    SignIn,
    /// `page.enabled: false` (404).
    Disabled,
}

impl Page {
    /// The viewer of a request: Host/Origin policy first, then the session cookie (or
    /// `--no-auth`). A request with a live session marks its connection authenticated,
    /// so the connection caps treat an open page like any signed-in client.
    fn viewer(&self, headers: &HeaderMap, ticket: Option<&ConnTicket>) -> Result<Viewer, Denied> {
        let config = self.state.config();
        if !config.page.enabled {
            return Err(Denied::Disabled);
        }
        let current = self.gate.current();
        let (access, policy) = &*current;
        origin_allowed(policy, headers).map_err(|e| Denied::Forbidden(e.to_string()))?;
        let viewer = match access {
            Access::Open => Viewer {
                client: "anonymous".into(),
                admin: false,
                csrf: self.open_csrf.clone(),
                session_id: None,
            },
            Access::Tokens(creds) => {
                let id = cookie(headers).ok_or(Denied::SignIn)?;
                let idle = Duration::from_secs(config.page.session_idle_secs);
                let s = self.sessions.get(id, idle).ok_or(Denied::SignIn)?;
                // A session follows the token it was made with: a reload that changed or
                // removed that token ends it (issue 22).
                let same_token = creds.fingerprint(&s.client).as_deref() == Some(&s.credential);
                let still = may_still_view(&config, &s.client).filter(|_| same_token);
                let Some(admin) = still else {
                    tracing::info!(client = %s.client, "page session ended: its token or its viewer right is gone");
                    self.sessions.remove(id);
                    return Err(Denied::SignIn);
                };
                Viewer {
                    admin,
                    client: s.client,
                    csrf: s.csrf,
                    session_id: Some(id.to_string()),
                }
            }
        };
        if let Some(t) = ticket {
            t.authenticated();
        }
        Ok(viewer)
    }
}

/// Whether `client` (signed in earlier) may view the page under the configuration in
/// force, and if so whether it is an admin: a client removed from `clients` or `viewers`
/// since it signed in sees nothing more.
fn may_still_view(config: &gatecmd_domain::config::Config, client: &str) -> Option<bool> {
    let found = config.clients.iter().find(|c| c.name == client);
    let generated = config.clients.is_empty() && client == "default";
    ((found.is_some() || generated) && config.page.may_view(client))
        .then(|| found.is_some_and(|c| c.admin))
}

/// The `/mcp` Host policy, and for `Origin`: the page's own origin (whatever address it
/// was reached by: a NAT guest's `10.0.2.2`, a LAN address), else `/mcp`'s origin policy.
fn origin_allowed(
    policy: &crate::transport::auth::OriginPolicy,
    headers: &HeaderMap,
) -> Result<(), crate::transport::auth::AuthError> {
    let text = |h| {
        headers
            .get(h)
            .map(|v: &header::HeaderValue| v.to_str().unwrap_or("<non-ascii>"))
    };
    let (origin, host) = (text(header::ORIGIN), text(header::HOST));
    policy.check(None, host)?;
    match origin {
        Some(o) if signin::same_origin(Some(o), None, host).is_err() => policy.check(Some(o), host),
        _ => Ok(()),
    }
}

/// The session cookie's value in the request, if any.
fn cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(sessions::cookie_value)
}

/// A refusal as plain text with the page's headers.
fn plain(status: StatusCode, message: &str) -> Response {
    assets::secured(status, "text/plain; charset=utf-8", message.to_string())
}

/// The answer to a [`Denied`] for a data request (`/state`, `/events`, POSTs).
fn denied(d: Denied) -> Response {
    match d {
        Denied::Forbidden(why) => {
            tracing::warn!(error = %why, "page request refused");
            plain(StatusCode::FORBIDDEN, &why)
        }
        Denied::SignIn => plain(
            StatusCode::UNAUTHORIZED,
            "sign in first: GET / shows the form",
        ),
        Denied::Disabled => plain(
            StatusCode::NOT_FOUND,
            "the bench page is off (page.enabled)",
        ),
    }
}
