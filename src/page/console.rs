//! `GET /console?board=NAME&cursor=N`: a board's console as read-only text for the page's
//! console view (ANSI removed, `\r` applied, like `console_read`), from a cursor on, so the
//! page follows new output. The same viewer check as `/state`; read-only, so like every
//! GET it needs no CSRF token. It never writes to the board.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Serialize;

use super::assets::secured;
use super::{Page, denied, plain};
use crate::transport::conn_limits::ConnTicket;
use gatecmd_domain::console::ConsoleState;

/// Most raw bytes one answer carries; the page asks again from `next_cursor`.
pub const MAX_BYTES: usize = 64 * 1024;
/// What a first look (no cursor) shows: the recent past.
pub const TAIL_BYTES: u64 = 16 * 1024;

#[derive(Debug, Serialize)]
struct ConsoleText {
    board: String,
    state: ConsoleState,
    text: String,
    cursor: u64,
    next_cursor: u64,
    dropped_bytes: u64,
}

pub(super) async fn console(State(p): State<Arc<Page>>, req: Request) -> Response {
    let q: HashMap<String, String> =
        url::form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes())
            .into_owned()
            .collect();
    let ticket = req.extensions().get::<ConnTicket>();
    if let Err(d) = p.viewer(req.headers(), ticket) {
        return denied(d);
    }
    let Some(board) = q.get("board") else {
        return plain(StatusCode::BAD_REQUEST, "give ?board=NAME");
    };
    let Some(console) = p.state.consoles.get(board) else {
        return plain(
            StatusCode::NOT_FOUND,
            "no console is configured for that board",
        );
    };
    let (start, end) = console.bounds();
    let cursor = match q.get("cursor").map(|c| c.parse::<u64>()) {
        None => end.saturating_sub(TAIL_BYTES).max(start),
        // A cursor from before a restart or a reload: start over from the tail.
        Some(Ok(c)) if c > end => end.saturating_sub(TAIL_BYTES).max(start),
        Some(Ok(c)) => c,
        Some(Err(_)) => return plain(StatusCode::BAD_REQUEST, "cursor must be a number"),
    };
    let s = console.slice(cursor, MAX_BYTES);
    let body = ConsoleText {
        board: board.clone(),
        state: console.view().state,
        text: gatecmd_core::output::clean(&s.bytes),
        cursor: s.from,
        next_cursor: s.to,
        dropped_bytes: s.dropped,
    };
    match serde_json::to_string(&body) {
        Ok(json) => secured(StatusCode::OK, "application/json", json),
        Err(e) => plain(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}
