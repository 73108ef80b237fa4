//! `POST /approval` (`id=…&decision=approve|deny&note=…`): a signed-in approver decides a
//! pending approval request from the page (docs/APPROVALS.md). Same-origin and CSRF token
//! like every page POST; the signed-in client must be one of the request's approvers and
//! not its requester, checked by the decision use case the MCP `approve`/`deny` tools call
//! (`gatecmd_domain::usecases::approval::decide`). The waiting call audits the decision
//! (`via: page`); the page's "last decisions" shows it. This file holds the form, the
//! HTTP statuses and the page's wording.
//!
//! `GET /approval/apr-N`: the link a `by: requester` request's URL elicitation carries. A
//! signed-in viewer is sent to the page with that request picked out (`/#apr-N`); anyone
//! else gets the sign-in form, which leads there once signed in. The link carries nothing
//! secret: what decides is the person's own sign-in.

use std::sync::Arc;

use axum::extract::{Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;

use super::assets::{secured, sign_in_to};
use super::signin::{form_field, signed_in_post};
use super::{Denied, Page, denied, plain};
use crate::transport::conn_limits::ConnTicket;
use gatecmd_core::refusal::RefusalReason;
use gatecmd_domain::approvals::Via;
use gatecmd_domain::usecases::approval;

/// `GET /approval/apr-N`: the page with the request picked out, or the sign-in form
/// leading there.
pub(super) async fn show(
    State(p): State<Arc<Page>>,
    Path(id): Path<String>,
    req: Request,
) -> Response {
    let well_formed = id
        .strip_prefix("apr-")
        .is_some_and(|n| !n.is_empty() && n.len() <= 20 && n.bytes().all(|b| b.is_ascii_digit()));
    if !well_formed {
        return plain(
            StatusCode::NOT_FOUND,
            "no such approval request: the link names apr-N",
        );
    }
    let ticket = req.extensions().get::<ConnTicket>();
    match p.viewer(req.headers(), ticket) {
        Ok(_) => {
            let mut r = secured(
                StatusCode::SEE_OTHER,
                "text/html; charset=utf-8",
                String::new(),
            );
            if let Ok(to) = HeaderValue::from_str(&format!("/#{id}")) {
                r.headers_mut().insert(header::LOCATION, to);
            }
            r
        }
        Err(Denied::SignIn) => secured(StatusCode::OK, "text/html; charset=utf-8", sign_in_to(&id)),
        Err(d) => denied(d),
    }
}

pub(super) async fn decide(State(p): State<Arc<Page>>, req: Request) -> Response {
    let (viewer, form) = match signed_in_post(&p, req).await {
        Ok(v) => v,
        Err(refused) => return refused,
    };
    let Some(id) = form_field(&form, "id") else {
        return plain(StatusCode::BAD_REQUEST, "name the request: id=apr-N");
    };
    let approve = match form_field(&form, "decision").as_deref() {
        Some("approve") => true,
        Some("deny") => false,
        _ => {
            return plain(
                StatusCode::BAD_REQUEST,
                "say decision=approve or decision=deny",
            );
        }
    };
    let note = form_field(&form, "note").filter(|n| !n.trim().is_empty());
    match approval::decide(&p.state, &viewer.client, Via::Page, &id, approve, note) {
        Ok((v, d)) => plain(
            StatusCode::OK,
            &format!(
                "{} {} by {}: {}",
                v.id,
                d.outcome.as_str(),
                viewer.client,
                v.what
            ),
        ),
        Err(r) => {
            let code = match r.reason {
                RefusalReason::NotAnApprover => StatusCode::FORBIDDEN,
                RefusalReason::NotFound => StatusCode::NOT_FOUND,
                _ => StatusCode::BAD_REQUEST,
            };
            plain(code, &r.message)
        }
    }
}
