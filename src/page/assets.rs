//! The page's files, embedded in the binary (no build step, no CDN, no external fonts),
//! and the headers every page answer carries: a Content-Security-Policy that allows only
//! this origin's script and style (no inline script), no framing, no caching.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

const PAGE_HTML: &str = include_str!("page.html");
const SIGNIN_HTML: &str = include_str!("signin.html");
const PAGE_CSS: &str = include_str!("page.css");
const PAGE_JS: &str = include_str!("page.js");

/// Script and style from this origin only; the event stream and `fetch` to it; no frames.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
     connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/// `body` as `content_type` with the page's security headers.
pub(super) fn secured(status: StatusCode, content_type: &'static str, body: String) -> Response {
    let mut r = (status, body).into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

pub(super) async fn css() -> Response {
    secured(StatusCode::OK, "text/css; charset=utf-8", PAGE_CSS.into())
}

pub(super) async fn js() -> Response {
    secured(
        StatusCode::OK,
        "text/javascript; charset=utf-8",
        PAGE_JS.into(),
    )
}

/// The bench page for a signed-in viewer: its name and CSRF token filled in.
pub(super) fn page(client: &str, csrf: &str, signed_in: bool) -> String {
    PAGE_HTML
        .replace("{{CLIENT}}", &escape(client))
        .replace("{{CSRF}}", &escape(csrf))
        .replace("{{SIGNOUT_HIDDEN}}", if signed_in { "" } else { " hidden" })
        .replace("{{VERSION}}", env!("CARGO_PKG_VERSION"))
}

/// The sign-in form, with a message (already plain text) when the last try failed.
pub(super) fn sign_in(message: Option<&str>) -> String {
    let msg = message.map_or(String::new(), |m| {
        format!("<p class=\"error\" role=\"alert\">{}</p>", escape(m))
    });
    SIGNIN_HTML.replace("{{MESSAGE}}", &msg)
}

/// The sign-in form for the link to approval request `id` (`apr-N`, checked by the
/// caller): signing in leads to the page with that request picked out (the redirect to `/`
/// keeps the form's `#apr-N`).
pub(super) fn sign_in_to(id: &str) -> String {
    let message = format!(
        "<p>Approval request {} waits for you. Sign in with your own token to see it and \
         approve or deny it.</p>",
        escape(id)
    );
    SIGNIN_HTML.replace("{{MESSAGE}}", &message).replace(
        "action=\"/signin\"",
        &format!("action=\"/signin#{}\"", escape(id)),
    )
}

/// HTML-escapes text for an element or a double-quoted attribute.
pub(super) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_files_load_nothing_from_elsewhere() {
        for f in [PAGE_HTML, SIGNIN_HTML, PAGE_CSS, PAGE_JS] {
            assert!(!f.contains("http://") && !f.contains("https://"));
            assert!(
                !f.contains("<script>"),
                "no inline script: the CSP forbids it"
            );
        }
    }

    #[test]
    fn filled_values_are_escaped() {
        let p = page("<b>\"x\"", "abc", true);
        assert!(p.contains("&lt;b&gt;&quot;x&quot;"));
        assert!(!p.contains("{{"));
        assert!(sign_in(Some("<x>")).contains("&lt;x&gt;"));
        let to = sign_in_to("apr-7");
        assert!(to.contains("action=\"/signin#apr-7\""), "{to}");
        assert!(!to.contains("{{"));
    }
}
