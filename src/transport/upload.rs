//! Uploads at disk speed (issue 32): `PUT /upload?path=P` streams the request body into a
//! client's write root, no base64, no MCP call per chunk. The same token, write roots,
//! quotas, hidden temporary file and audit as `write_file` (`gatecmd_domain::staging`): the
//! body is cut into pieces of 8 MiB and each piece is one staging write (its quota and
//! size checks included), so nothing a chunked `write_file` refuses gets in this way. `final=true` (or `sha256=…`)
//! makes the request's last piece finish the upload: the file is hashed, checked against
//! the given SHA-256 if there is one, and renamed into place; the answer carries the hash.
//! A connection that breaks leaves the temporary file: `GET /upload?path=P` says how many
//! bytes it holds, and `PUT …&offset=N` goes on from there (docs/TOOLS.md, "Uploads").

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Query, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde::{Deserialize, Serialize};

use crate::transport::gate::{Gate, admit};
use gatecmd_core::identity::ClientIdentity;
use gatecmd_core::refusal::{Refusal, RefusalReason};
use gatecmd_domain::staging::upload::{self, Chunk, Finish};
use gatecmd_domain::staging::{self, AuditRecord, StagingError, Target};
use gatecmd_domain::state::AppState;
use gatecmd_mcp::reasons::staging_reason;

/// The path both methods serve.
pub const PATH: &str = "/upload";

/// Bytes of a body written to the upload at once.
const PIECE: usize = 8 << 20;

/// One piece of a body, for the writer.
struct Piece {
    data: Vec<u8>,
    finish: Option<Finish>,
}

/// What the writer did.
#[derive(Default)]
struct Wrote {
    /// Bytes of this request stored.
    stored: u64,
    /// The last piece's result: the upload's size now, and whether it finished.
    last: Option<upload::Written>,
}

/// What a `PUT` or `GET` names.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UploadQuery {
    /// As `write_file`'s: relative to the first root, or absolute inside a root.
    path: String,
    /// Where the body goes: 0 (the default) starts an upload, N continues one that holds
    /// N bytes.
    #[serde(default)]
    offset: u64,
    /// With offset 0: discard an unfinished upload of this path and start over.
    #[serde(default)]
    restart: bool,
    /// The body ends the file: hash it and put it in place.
    #[serde(default, rename = "final")]
    last: bool,
    /// The whole file's SHA-256: ends the file too, and it must match.
    #[serde(default)]
    sha256: Option<String>,
}

/// The answer of both methods.
#[derive(Debug, Serialize)]
pub struct UploadAnswer {
    /// Absolute final path.
    pub path: String,
    pub root: String,
    /// Bytes this request stored.
    pub bytes: u64,
    /// Bytes the upload holds now: the offset to continue at, or the final size.
    pub received: u64,
    /// Hashed (and checked) and in place under `path`.
    pub complete: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// The routes, behind the same admission as `/mcp` (tokens in force, Host and Origin).
pub fn routes(state: Arc<AppState>, gate: Arc<Gate>) -> Router {
    Router::new()
        .route(PATH, axum::routing::put(put).get(get))
        .with_state((state, gate))
}

type Shared = (Arc<AppState>, Arc<Gate>);

fn refusal(e: &StagingError) -> Response {
    let r = Refusal::from_error(staging_reason(e), e);
    let status = match r.reason {
        RefusalReason::NotPermitted => StatusCode::FORBIDDEN,
        RefusalReason::NotFound => StatusCode::NOT_FOUND,
        RefusalReason::Limit => StatusCode::PAYLOAD_TOO_LARGE,
        RefusalReason::UploadState => StatusCode::CONFLICT,
        RefusalReason::HashMismatch => StatusCode::UNPROCESSABLE_ENTITY,
        RefusalReason::NotConfigured | RefusalReason::IoError => StatusCode::INTERNAL_SERVER_ERROR,
        _ => StatusCode::BAD_REQUEST,
    };
    let body = axum::Json(serde_json::json!({"error": r.reason.as_str(), "message": r.message}));
    (status, body).into_response()
}

/// The admitted caller and the target it may write, or the answer that refuses.
fn admitted(
    shared: &Shared,
    req: &mut Request,
    path: &str,
) -> Result<(ClientIdentity, Target), Box<Response>> {
    let (state, gate) = shared;
    let current = gate.current();
    admit(&current.0, &current.1, req)?;
    let who = req
        .extensions()
        .get::<ClientIdentity>()
        .cloned()
        .ok_or_else(|| Box::new(StatusCode::UNAUTHORIZED.into_response()))?;
    let config = state.config();
    let refuse = |e: StagingError| {
        audit(state, &who, "upload", path, None, None, Some(&e));
        Box::new(refusal(&e))
    };
    let target = staging::resolve(&config.file_roots, None, path).map_err(refuse)?;
    let policy = config.staging.policy(&who.name);
    staging::check_writable(&who.name, &policy, &config.file_roots, &target).map_err(refuse)?;
    Ok((who, target))
}

fn audit(
    state: &AppState,
    who: &ClientIdentity,
    action: &'static str,
    path: &str,
    bytes: Option<u64>,
    sha256: Option<&str>,
    refused: Option<&StagingError>,
) {
    let refused = refused.map(|e| e.to_string());
    staging::audit(
        &state.audit,
        &AuditRecord {
            client: &who.name,
            action,
            path,
            bytes,
            sha256,
            refused: refused.as_deref(),
        },
    );
}

/// `GET /upload?path=P`: how far the upload of P got.
async fn get(
    State(shared): State<Shared>,
    Query(q): Query<UploadQuery>,
    mut req: Request,
) -> Response {
    let (_who, target) = match admitted(&shared, &mut req, &q.path) {
        Ok(a) => a,
        Err(r) => return *r,
    };
    let t = target.clone();
    match tokio::task::spawn_blocking(move || upload::progress(&t)).await {
        Ok(Ok(p)) => axum::Json(UploadAnswer {
            path: target.display(),
            root: target.root.display().to_string(),
            bytes: 0,
            received: p
                .complete_size
                .filter(|_| p.received == 0)
                .unwrap_or(p.received),
            complete: p.received == 0 && p.complete_size.is_some(),
            sha256: None,
        })
        .into_response(),
        Ok(Err(e)) => refusal(&e),
        Err(e) => refusal(&StagingError::Io {
            op: "inspecting",
            path: target.display(),
            reason: e.to_string(),
        }),
    }
}

/// `PUT /upload?path=P[&offset=N][&restart=true][&final=true][&sha256=HEX]`: the body,
/// streamed into the upload of P in pieces.
async fn put(
    State(shared): State<Shared>,
    Query(q): Query<UploadQuery>,
    mut req: Request,
) -> Response {
    let (who, target) = match admitted(&shared, &mut req, &q.path) {
        Ok(a) => a,
        Err(r) => return *r,
    };
    let state = shared.0.clone();
    let shown = target.display();
    let fail = |e: StagingError, stored: u64| {
        audit(&state, &who, "upload", &shown, Some(stored), None, Some(&e));
        refusal(&e)
    };
    let finish = match q.sha256.as_deref().map(upload::parse_sha256).transpose() {
        Ok(Some(h)) => Some(Finish::Expect(h)),
        Ok(None) if q.last => Some(Finish::AsReceived),
        Ok(None) => None,
        Err(e) => return fail(e, 0),
    };
    let config = state.config();
    let policy = config.staging.policy(&who.name);
    let stale = Duration::from_secs(config.staging.stale_upload_secs);
    // `max_chunk_bytes` bounds a write_file request; a streamed piece is the server's own.
    let mut limits = policy.limits;
    limits.max_chunk_bytes = limits.max_chunk_bytes.max(PIECE as u64);
    // The writer: a blocking thread taking pieces in order, so that the disk write of one
    // piece overlaps the receiving of the next (memory per upload: three pieces at most).
    let (tx, rx) = std::sync::mpsc::sync_channel::<Piece>(1);
    let writer = {
        let (state, target) = (state.clone(), target.clone());
        let (mut offset, mut truncate) = (q.offset, q.restart);
        tokio::task::spawn_blocking(move || -> Result<Wrote, (StagingError, u64)> {
            let mut wrote = Wrote::default();
            while let Ok(piece) = rx.recv() {
                let len = piece.data.len() as u64;
                let chunk = Chunk {
                    offset,
                    data: piece.data,
                    truncate,
                    finish: piece.finish,
                };
                let w = upload::write(&state.staging, &limits, stale, &target, chunk)
                    .map_err(|e| (e, wrote.stored))?;
                offset += len;
                wrote.stored += len;
                truncate = false;
                wrote.last = Some(w);
            }
            Ok(wrote)
        })
    };
    // Hands a piece to the writer; false when the writer stopped (its error is the answer).
    let send = |piece: Piece| {
        let tx = tx.clone();
        async move {
            matches!(
                tokio::task::spawn_blocking(move || tx.send(piece)).await,
                Ok(Ok(()))
            )
        }
    };
    let mut body = req.into_body().into_data_stream();
    let mut buf: Vec<u8> = Vec::with_capacity(PIECE);
    let mut broken: Option<String> = None;
    'body: loop {
        match body.next().await {
            Some(Ok(mut bytes)) => {
                while !bytes.is_empty() {
                    let take = (PIECE - buf.len()).min(bytes.len());
                    buf.extend_from_slice(&bytes.split_to(take));
                    if buf.len() == PIECE {
                        let data = std::mem::replace(&mut buf, Vec::with_capacity(PIECE));
                        if !send(Piece { data, finish: None }).await {
                            break 'body;
                        }
                    }
                }
            }
            Some(Err(e)) => {
                // The client went away or sent a broken body: what arrived is kept in the
                // temporary file for a later PUT at the offset GET reports.
                broken = Some(e.to_string());
                break;
            }
            None => break,
        }
    }
    // The rest, finishing the upload when asked and the body arrived whole.
    let finish = if broken.is_some() { None } else { finish };
    if !buf.is_empty() || finish.is_some() {
        send(Piece { data: buf, finish }).await;
    }
    drop(tx);
    let wrote = match writer.await {
        Ok(Ok(w)) => w,
        Ok(Err((e, stored))) => return fail(e, stored),
        Err(e) => {
            let e = StagingError::Io {
                op: "writing",
                path: shown.clone(),
                reason: e.to_string(),
            };
            return fail(e, 0);
        }
    };
    if let Some(why) = broken {
        let e = StagingError::Io {
            op: "receiving the body of",
            path: shown.clone(),
            reason: format!(
                "{why}; {} bytes kept: continue at the offset GET {PATH}?path=… reports",
                wrote.stored
            ),
        };
        return fail(e, wrote.stored);
    }
    let Some(done) = wrote.last else {
        // An empty body that finishes nothing: answer with what the upload holds.
        let t = target.clone();
        return match tokio::task::spawn_blocking(move || upload::progress(&t)).await {
            Ok(Ok(p)) => axum::Json(UploadAnswer {
                path: shown,
                root: target.root.display().to_string(),
                bytes: 0,
                received: p.received,
                complete: false,
                sha256: None,
            })
            .into_response(),
            Ok(Err(e)) => refusal(&e),
            Err(e) => refusal(&StagingError::Io {
                op: "inspecting",
                path: shown,
                reason: e.to_string(),
            }),
        };
    };
    audit(
        &state,
        &who,
        if done.complete { "finalize" } else { "upload" },
        &shown,
        Some(if done.complete {
            done.size
        } else {
            wrote.stored
        }),
        done.sha256.as_deref(),
        None,
    );
    axum::Json(UploadAnswer {
        path: shown,
        root: target.root.display().to_string(),
        bytes: wrote.stored,
        received: done.size,
        complete: done.complete,
        sha256: done.sha256,
    })
    .into_response()
}
