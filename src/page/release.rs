//! `POST /release` (`key=…`): an `admin` client ends the lease on a key from the page, for
//! a lease left by a VM that went away. Same-origin, CSRF token, confirmation asked by the
//! page; the lease is ended by the use case `unlock_device` and `gatecmd leases end` call
//! (`gatecmd_domain::usecases::unlock::end_lease`), which records another client's lease
//! as `force_released` by the operator, reaching the audit log and the page's decisions
//! like any lock event.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::Response;

use super::signin::{form_field, signed_in_post};
use super::{Page, plain};
use gatecmd_core::identity::ClientIdentity;
use gatecmd_domain::locks::LockKey;
use gatecmd_domain::usecases::unlock::end_lease;

pub(super) async fn release(State(p): State<Arc<Page>>, req: Request) -> Response {
    let (viewer, form) = match signed_in_post(&p, req).await {
        Ok(v) => v,
        Err(refused) => return refused,
    };
    if !viewer.admin {
        tracing::warn!(client = %viewer.client, "page release refused: not an admin client");
        return plain(
            StatusCode::FORBIDDEN,
            "only an admin client may release another client's lease",
        );
    }
    let Some(key) = form_field(&form, "key").and_then(|k| k.parse::<LockKey>().ok()) else {
        return plain(
            StatusCode::BAD_REQUEST,
            "name the key: key=board:NAME or usb:VVVV:PPPP",
        );
    };
    // The page never holds lease ids: the lease is found by its key, here.
    let Some(lease) = p.state.locks.key_state(&key).and_then(|s| s.lease) else {
        return plain(StatusCode::NOT_FOUND, &format!("no lease on {key} now"));
    };
    let who = ClientIdentity {
        name: viewer.client.clone(),
        commands: None,
        admin: viewer.admin,
    };
    match end_lease(&p.state, &who, &lease.lease_id, Some("bench page")) {
        Ok(info) => plain(
            StatusCode::OK,
            &format!("released {key}, leased by {}", info.holder),
        ),
        Err(e) => plain(StatusCode::CONFLICT, &e.to_string()),
    }
}
