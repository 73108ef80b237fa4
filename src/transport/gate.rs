//! Who gets in: the tokens and Origin/Host policy in force (`Gate`, swapped whole on
//! reload), and the one decision every HTTP listener makes with them (`admit`): `/mcp`
//! and the page's bind, and `metrics.bind`. A NAT guest reaches every port of the host's
//! loopback, so this, not an address, is what keeps a listener closed.

use std::sync::{Arc, RwLock};

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::transport::auth::{AuthError, Credentials, OriginPolicy};
use crate::transport::conn_limits::ConnTicket;
use gatecmd_core::identity::ClientIdentity;

/// Put in a request's extensions by [`admit`] under `--no-auth`: nobody has a name, so
/// `metrics.clients` cannot restrict anyone (the bind is loopback-only then).
#[derive(Clone, Copy, Debug)]
pub struct Unrestricted;

/// Who may call `/mcp`.
#[derive(Clone)]
pub enum Access {
    /// Bearer tokens of the configured clients.
    Tokens(Credentials),
    /// `--no-auth` on a loopback bind: every caller is the client `anonymous`.
    Open,
}

/// The request guard's state; swapped as a whole on reload.
pub struct Gate {
    inner: RwLock<Arc<(Access, OriginPolicy)>>,
}

impl Gate {
    pub fn new(access: Access, policy: OriginPolicy) -> Arc<Self> {
        Arc::new(Gate {
            inner: RwLock::new(Arc::new((access, policy))),
        })
    }

    /// Replaces tokens and policy (config reload).
    pub fn replace(&self, access: Access, policy: OriginPolicy) {
        let new = Arc::new((access, policy));
        match self.inner.write() {
            Ok(mut g) => *g = new,
            Err(p) => *p.into_inner() = new,
        }
    }

    /// The tokens and policy in force (the bench page checks its sign-ins against them).
    pub fn current(&self) -> Arc<(Access, OriginPolicy)> {
        match self.inner.read() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }
}

/// The request guard's decision, for every listener that serves HTTP (`/mcp` and the page's
/// bind, `metrics.bind`): Host/Origin by `policy` (403), then a client's bearer token by
/// `access` (401). On success the caller's identity is in the request's extensions and its
/// connection counts as authenticated (`ConnTicket`).
pub fn admit(
    access: &Access,
    policy: &OriginPolicy,
    req: &mut Request,
) -> Result<(), Box<Response>> {
    let headers = req.headers();
    let origin = headers
        .get(header::ORIGIN)
        .map(|v| v.to_str().unwrap_or("<non-ascii>"));
    let host = headers
        .get(header::HOST)
        .map(|v| v.to_str().unwrap_or("<non-ascii>"));
    // An absolute-form target (`POST http://evil.example/mcp`) names the host the client
    // meant; it answers to the same policy as the Host header.
    let target = req.uri().authority().map(|a| a.as_str());
    let checked = policy
        .check(origin, host)
        .and_then(|()| target.map_or(Ok(()), |t| policy.check_host(t)));
    if let Err(e) = checked {
        tracing::warn!(error = %e, "request refused");
        return Err(Box::new(error_response(
            StatusCode::FORBIDDEN,
            "forbidden",
            &e,
        )));
    }
    let identity = match access {
        Access::Open => {
            req.extensions_mut().insert(Unrestricted);
            ClientIdentity::local("anonymous")
        }
        Access::Tokens(creds) => {
            let auth = req
                .headers()
                .get(header::AUTHORIZATION)
                .map(HeaderValue::as_bytes);
            let acting = creds.authenticate(auth).and_then(|id| {
                let header = req.headers().get(crate::transport::on_behalf::ON_BEHALF_OF);
                crate::transport::on_behalf::acting_identity(creds, id, header)
            });
            match acting {
                Ok(id) => id,
                Err(
                    e @ (AuthError::NotPeer(_)
                    | AuthError::OnBehalf
                    | AuthError::TooManyAgents { .. }),
                ) => {
                    tracing::warn!(error = %e, "request refused");
                    return Err(Box::new(error_response(
                        StatusCode::FORBIDDEN,
                        "forbidden",
                        &e,
                    )));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "request refused");
                    return Err(Box::new(error_response(
                        StatusCode::UNAUTHORIZED,
                        "unauthorized",
                        &e,
                    )));
                }
            }
        }
    };
    if let Some(ticket) = req.extensions().get::<ConnTicket>() {
        ticket.authenticated();
    }
    if let Some(w) = crate::transport::lab_waits::lab_wait(req, &identity) {
        req.extensions_mut().insert(w);
    }
    req.extensions_mut().insert(identity);
    Ok(())
}

fn error_response(status: StatusCode, code: &str, e: &AuthError) -> Response {
    let body = axum::Json(serde_json::json!({ "error": code, "message": e.to_string() }));
    let mut resp = (status, body).into_response();
    if status == StatusCode::UNAUTHORIZED {
        let value = match e {
            AuthError::Missing => "Bearer",
            _ => "Bearer error=\"invalid_token\"",
        };
        resp.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(value));
    }
    resp
}
