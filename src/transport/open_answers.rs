//! Answers nobody reads are bounded per client (issue 22): each `/mcp` POST of a client
//! holds one of its `limits.max_open_answers_per_client` from the moment it is admitted
//! until its response body has been sent in full or dropped (the client read it, or went
//! away). A client that sends calls and never reads the answers holds at most that many,
//! each bounded by the answer caps (`max_output_bytes` per stream, the text content's
//! 16 KiB, `console_read`'s `max_bytes` measured after conversion); the next call is
//! answered 429 with a `limit` refusal, and other clients are not touched.
//!
//! `subscriptions/listen` streams are counted by their own cap
//! (`limits.max_listen_streams_per_client`, src/subscriptions.rs), not here; legacy GET
//! streams are one per session (`max_sessions_per_client`).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;

use gatecmd_core::identity::ClientIdentity;
use gatecmd_core::refusal::{Classified, Refusal, RefusalReason};
use gatecmd_domain::limits::quotas::{Full, Kind};
use gatecmd_domain::state::AppState;

/// Counts the request's answer in its client's share until the body is done.
pub async fn hold(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let listen = req
        .headers()
        .get("mcp-method")
        .is_some_and(|m| m.as_bytes() == b"subscriptions/listen");
    let who = req.extensions().get::<ClientIdentity>().cloned();
    let (Some(who), Method::POST, false) = (who, req.method().clone(), listen) else {
        return next.run(req).await;
    };
    let cap = state.config().limits.max_open_answers_per_client;
    let ticket = match state.quotas.take(&who.name, Kind::OpenAnswers, 1, cap) {
        Ok(t) => t,
        Err(full) => {
            tracing::warn!(client = %who.name, "request refused: {full}");
            let r = Refusal::of(&TooManyOpen(full));
            let body = serde_json::json!({ "error": "limit", "message": r.message, "refusal": r });
            return (StatusCode::TOO_MANY_REQUESTS, axum::Json(body)).into_response();
        }
    };
    let (parts, body) = next.run(req).await.into_parts();
    // The ticket lives in the body stream, given back when the stream is dropped. hyper
    // drops a body once it has pulled its last frame, which for a one-frame answer is
    // before a byte is sent; so the answer goes out in slices of [`SLICE`] that hyper
    // pulls only as the socket takes them, and the ticket is held until the client has
    // read (nearly) all of it, or the connection closed.
    let body = body.into_data_stream().flat_map(move |chunk| {
        let _held = &ticket;
        futures::stream::iter(slices(chunk))
    });
    Response::from_parts(parts, Body::from_stream(body))
}

/// What hyper is handed at a time.
const SLICE: usize = 16 * 1024;

fn slices(
    chunk: Result<axum::body::Bytes, axum::Error>,
) -> Vec<Result<axum::body::Bytes, axum::Error>> {
    match chunk {
        Ok(b) if b.len() > SLICE => (0..b.len())
            .step_by(SLICE)
            .map(|at| Ok(b.slice(at..(at + SLICE).min(b.len()))))
            .collect(),
        other => vec![other],
    }
}

/// The refusal of a POST while the client's unread answers are at their cap.
#[derive(Debug, thiserror::Error)]
#[error("too many answers not yet read: {0}; read (or cancel) your earlier calls' answers first")]
struct TooManyOpen(Full);

impl Classified for TooManyOpen {
    fn reason(&self) -> RefusalReason {
        RefusalReason::Limit
    }
}
