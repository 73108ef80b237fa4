//! `GET /` (the page, or the sign-in form), `POST /signin`, `POST /signout`, and the checks
//! every POST passes: the request comes from the page's own origin (its `Origin`, else its
//! `Referer`, names the `Host` it was sent to), and a state-changing one carries the
//! session's CSRF token (form field `csrf` or header `X-CSRF-Token`).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use subtle::ConstantTimeEq;

use super::assets::{page, secured, sign_in as sign_in_form};
use super::{Denied, Page, Viewer, denied, plain};
use crate::transport::conn_limits::ConnTicket;
use crate::transport::http::Access;

/// A form body larger than this is refused (a token and a CSRF token fit many times).
const MAX_FORM_BYTES: usize = 4096;
/// Every sign-in answer takes at least this long, right or wrong: no timing tells which,
/// and guessing is slow.
const SIGNIN_FLOOR: Duration = Duration::from_millis(200);
/// The sign-in form must have arrived this long after the headers, or the POST is refused
/// (a browser sends it at once).
const FORM_DEADLINE: Duration = Duration::from_secs(2);

const HTML: &str = "text/html; charset=utf-8";

/// `GET /`: the bench page for a viewer, the sign-in form for anyone else (no bench data).
pub(super) async fn index(State(page_state): State<Arc<Page>>, req: Request) -> Response {
    let ticket = req.extensions().get::<ConnTicket>();
    match page_state.viewer(req.headers(), ticket) {
        Ok(v) => secured(
            StatusCode::OK,
            HTML,
            page(&v.client, &v.csrf, v.session_id.is_some()),
        ),
        Err(Denied::SignIn) => secured(StatusCode::OK, HTML, sign_in_form(None)),
        Err(d) => denied(d),
    }
}

/// `POST /signin` with `token=…` (form-urlencoded): a session cookie and a redirect to
/// `/`, or the form again with 401. The token is compared as a digest in constant time by
/// the same [`crate::transport::auth::Credentials`] as `/mcp`, and never logged.
pub(super) async fn sign_in(State(p): State<Arc<Page>>, req: Request) -> Response {
    let config = p.state.config();
    if !config.page.enabled {
        return denied(Denied::Disabled);
    }
    let (parts, body) = req.into_parts();
    if let Err((code, why)) = checked_post(&p, &parts.headers) {
        return plain(code, &why);
    }
    // The body first, within a short deadline, and only then one of the few sign-in
    // slots: a slow or empty POST holds a connection, never a slot (issue 22).
    let form = match tokio::time::timeout(FORM_DEADLINE, read_form(body)).await {
        Ok(Some(form)) => form,
        Ok(None) => return plain(StatusCode::PAYLOAD_TOO_LARGE, "the form is too large"),
        Err(_) => {
            return plain(
                StatusCode::REQUEST_TIMEOUT,
                &format!(
                    "the sign-in form did not arrive within {} s",
                    FORM_DEADLINE.as_secs()
                ),
            );
        }
    };
    // Closed only if the page is dropped; then there is nothing to sign in to.
    let Ok(_turn) = p.signins.acquire().await else {
        return plain(StatusCode::SERVICE_UNAVAILABLE, "the server is stopping");
    };
    let started = tokio::time::Instant::now();
    let answer = sign_in_inner(&p, &parts, &form);
    tokio::time::sleep_until(started + SIGNIN_FLOOR).await;
    answer
}

fn sign_in_inner(p: &Page, parts: &axum::http::request::Parts, form: &[u8]) -> Response {
    let config = p.state.config();
    let current = p.gate.current();
    let Access::Tokens(creds) = &current.0 else {
        // `--no-auth`: nothing to sign in to.
        return redirect_home(None);
    };
    let token = form_field(form, "token").unwrap_or_default();
    let header = format!("Bearer {}", token.trim());
    let who = match creds.authenticate(Some(header.as_bytes())) {
        Ok(who) => who,
        Err(_) => {
            tracing::warn!("page sign-in refused: wrong token");
            return secured(
                StatusCode::UNAUTHORIZED,
                HTML,
                sign_in_form(Some(
                    "That token is not valid here. Use a client token from the server's configuration.",
                )),
            );
        }
    };
    if !config.page.may_view(&who.name) {
        tracing::warn!(client = %who.name, "page sign-in refused: not a viewer");
        return secured(
            StatusCode::FORBIDDEN,
            HTML,
            sign_in_form(Some(&format!(
                "Client {} may not view the page (page.viewers in the server's configuration).",
                who.name
            ))),
        );
    }
    let credential = creds.fingerprint(&who.name).unwrap_or_default();
    match p.sessions.create(
        &who.name,
        &credential,
        config.page.max_sessions,
        config.page.max_sessions_per_client,
    ) {
        Ok((id, _)) => {
            tracing::info!(client = %who.name, "page sign-in");
            if let Some(t) = parts.extensions.get::<ConnTicket>() {
                t.authenticated();
            }
            redirect_home(Some(&id))
        }
        Err(e) => plain(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!("no randomness for a session id: {e}"),
        ),
    }
}

/// `POST /signout` (with the CSRF token): the session ends, the cookie is cleared.
pub(super) async fn sign_out(State(p): State<Arc<Page>>, req: Request) -> Response {
    let (viewer, _) = match signed_in_post(&p, req).await {
        Ok(v) => v,
        Err(refused) => return refused,
    };
    if let Some(id) = &viewer.session_id {
        p.sessions.remove(id);
        tracing::info!(client = %viewer.client, "page sign-out");
    }
    let mut r = redirect_home(None);
    r.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static("gatecmd_page=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0"),
    );
    r
}

/// 303 to `/`, setting the session cookie when `id` is given.
fn redirect_home(id: Option<&str>) -> Response {
    let mut r = secured(StatusCode::SEE_OTHER, HTML, String::new());
    r.headers_mut()
        .insert(header::LOCATION, HeaderValue::from_static("/"));
    if let Some(id) = id {
        // `Secure` only over https, which gatecmd does not serve itself; the id is random
        // and says nothing of the token.
        let cookie = format!("{}={id}; HttpOnly; SameSite=Strict; Path=/", super::COOKIE);
        if let Ok(v) = HeaderValue::from_str(&cookie) {
            r.headers_mut().insert(header::SET_COOKIE, v);
        }
    }
    r
}

/// Why a page POST is refused: the status and the message (the caller answers with
/// `plain`).
pub(super) type Refused = (StatusCode, String);

/// The checks of a state-changing POST from a signed-in page: a viewer, the page's own
/// origin, a form of bounded size, the session's CSRF token. The viewer and the form, or
/// the answer that refuses it.
pub(super) async fn signed_in_post(p: &Page, req: Request) -> Result<(Viewer, Vec<u8>), Response> {
    let (parts, body) = req.into_parts();
    let viewer = p
        .viewer(&parts.headers, parts.extensions.get::<ConnTicket>())
        .map_err(denied)?;
    checked_post(p, &parts.headers).map_err(|(code, why)| plain(code, &why))?;
    let Some(form) = read_form(body).await else {
        return Err(plain(
            StatusCode::PAYLOAD_TOO_LARGE,
            "the form is too large",
        ));
    };
    check_csrf(&viewer, &parts.headers, &form).map_err(|(code, why)| plain(code, &why))?;
    Ok((viewer, form))
}

/// The checks every page POST passes: Host/Origin policy, and the same origin as the page.
pub(super) fn checked_post(p: &Page, headers: &HeaderMap) -> Result<(), Refused> {
    let current = p.gate.current();
    let text = |h| headers.get(h).and_then(|v: &HeaderValue| v.to_str().ok());
    if let Err(e) = super::origin_allowed(&current.1, headers) {
        tracing::warn!(error = %e, "page request refused");
        return Err((StatusCode::FORBIDDEN, e.to_string()));
    }
    same_origin(
        text(header::ORIGIN),
        text(header::REFERER),
        text(header::HOST),
    )
    .map_err(|why| {
        tracing::warn!(reason = %why, "page POST refused: not from the page's origin");
        (StatusCode::FORBIDDEN, why.to_string())
    })
}

/// Why a POST is not from the page's own origin.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum CrossOrigin {
    #[error("no Host header")]
    NoHost,
    #[error("a POST to the page must carry Origin or Referer (a browser sends them); refused")]
    NoOrigin,
    #[error("Origin {0:?} is not a URL")]
    NotUrl(String),
    #[error("Origin {0:?} carries user info; refused")]
    UserInfo(String),
    #[error("Origin {0:?} names no host")]
    NoOriginHost(String),
    #[error("cross-origin POST refused: it comes from {from:?}, the page is at {host}")]
    Elsewhere { from: String, host: String },
}

/// Whether a POST comes from the page itself: its `Origin` (or, without one, its
/// `Referer`) must be `http(s)://` + the `Host` it was sent to. Neither: refused, since
/// every browser sends `Origin` with a POST.
pub(super) fn same_origin(
    origin: Option<&str>,
    referer: Option<&str>,
    host: Option<&str>,
) -> Result<(), CrossOrigin> {
    let host = host.ok_or(CrossOrigin::NoHost)?.to_ascii_lowercase();
    let from = origin.or(referer).ok_or(CrossOrigin::NoOrigin)?;
    let url = url::Url::parse(from).map_err(|_| CrossOrigin::NotUrl(from.to_string()))?;
    // As on /mcp: a browser never sends user info in an Origin; one that has it is forged.
    if !url.username().is_empty() || url.password().is_some() {
        return Err(CrossOrigin::UserInfo(from.to_string()));
    }
    let authority = match (url.host_str(), url.port()) {
        (Some(h), Some(port)) => format!("{h}:{port}"),
        (Some(h), None) => h.to_string(),
        _ => return Err(CrossOrigin::NoOriginHost(from.to_string())),
    };
    let scheme_ok = matches!(url.scheme(), "http" | "https");
    if scheme_ok && authority.to_ascii_lowercase() == host {
        Ok(())
    } else {
        Err(CrossOrigin::Elsewhere {
            from: from.to_string(),
            host,
        })
    }
}

/// The session's CSRF token must come back in the form or the `X-CSRF-Token` header.
pub(super) fn check_csrf(v: &Viewer, headers: &HeaderMap, form: &[u8]) -> Result<(), Refused> {
    let sent = headers
        .get("x-csrf-token")
        .and_then(|h| h.to_str().ok())
        .map(str::to_string)
        .or_else(|| form_field(form, "csrf"));
    let ok = sent.is_some_and(|s| bool::from(s.as_bytes().ct_eq(v.csrf.as_bytes())));
    if ok {
        Ok(())
    } else {
        Err((
            StatusCode::FORBIDDEN,
            "missing or wrong CSRF token: reload the page and try again".into(),
        ))
    }
}

/// The body, up to [`MAX_FORM_BYTES`].
pub(super) async fn read_form(body: Body) -> Option<Vec<u8>> {
    axum::body::to_bytes(body, MAX_FORM_BYTES)
        .await
        .ok()
        .map(|b| b.to_vec())
}

/// One field of a form-urlencoded body.
pub(super) fn form_field(form: &[u8], name: &str) -> Option<String> {
    url::form_urlencoded::parse(form)
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_origin_means_the_host_the_request_went_to() {
        let host = Some("127.0.0.1:9222");
        assert!(same_origin(Some("http://127.0.0.1:9222"), None, host).is_ok());
        assert!(same_origin(None, Some("http://127.0.0.1:9222/x"), host).is_ok());
        // Another port on loopback is another origin (OriginPolicy alone allows it).
        assert!(same_origin(Some("http://127.0.0.1:8000"), None, host).is_err());
        assert!(same_origin(Some("http://localhost:9222"), None, host).is_err());
        assert!(same_origin(Some("null"), None, host).is_err());
        assert!(same_origin(None, None, host).is_err());
        assert!(same_origin(Some("file:///x"), None, Some("x")).is_err());
        // User info, as /mcp's policy refuses it (issue 22).
        assert!(same_origin(Some("http://x@127.0.0.1:9222"), None, host).is_err());
        assert!(same_origin(Some("http://x:y@127.0.0.1:9222"), None, host).is_err());
    }

    #[test]
    fn form_fields_are_decoded() {
        assert_eq!(
            form_field(b"a=1&token=ab%2Bc+d", "token").as_deref(),
            Some("ab+c d")
        );
        assert_eq!(form_field(b"a=1", "token"), None);
    }
}
