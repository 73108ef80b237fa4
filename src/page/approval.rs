//! `POST /approval` (`id=…&decision=approve|deny&note=…`): a signed-in approver decides a
//! pending approval request from the page (docs/APPROVALS.md). Same-origin and CSRF token
//! like every page POST; the signed-in client must be one of the request's approvers and
//! not its requester, checked by the same code as the MCP `approve`/`deny` tools. The
//! waiting call audits the decision; the page's "last decisions" shows it.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::Response;

use super::signin::{form_field, signed_in_post};
use super::{Page, plain};
use gatecmd_core::refusal::RefusalReason;

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
    match gatecmd_mcp::approvals::decide(&p.state, &viewer.client, &id, approve, note) {
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
