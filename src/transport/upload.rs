//! Uploads at disk speed (issue 32): `PUT /upload?path=P` streams the request body into a
//! client's write root, no base64, no MCP call per chunk. The same token, write roots,
//! quotas, hidden temporary file and audit as `write_file` (`gatecmd_domain::staging`).
//! A request is admitted from its request line and headers before any of its body is read
//! (issue 37): one request per file at a time, `staging.max_uploads_per_client` per client,
//! and the file size, upload state, new directories and quotas checked with the declared
//! `Content-Length`; a window of it is then promised (`staging.upload_promise_bytes`),
//! renewed as the bytes arrive, so a declared length costs nothing it has not sent.
//! The body is then cut into pieces of 1 MiB, each one staging write (its quota and size
//! checks included, which bound a body of undeclared length), so nothing a chunked
//! `write_file` refuses gets in this way, and a request holds at most three pieces. A body
//! that brings fewer than `staging.upload_min_bytes` in a span of `staging.upload_stall_secs`
//! ends as a broken one. `final=true` (or `sha256=…`)
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
use axum::body::BodyDataStream;
use gatecmd_core::identity::ClientIdentity;
use gatecmd_core::refusal::{Refusal, RefusalReason};
use gatecmd_domain::config::StagingLimits;
use gatecmd_domain::staging::upload::{self, Chunk, Finish, Plan};
use gatecmd_domain::staging::{
    self, AuditRecord, Claim, ClaimRefused, StagingError, StreamRules, Target,
};
use gatecmd_domain::state::AppState;
use gatecmd_mcp::calls::reasons::staging_reason;
use std::sync::mpsc::{Receiver, SyncSender};

/// The path both methods serve.
pub const PATH: &str = "/upload";

/// Bytes of a body written to the upload at once. A request holds at most three pieces
/// (one filling, one queued for the writer, one being written): 3 MiB.
pub const PIECE: usize = 1 << 20;

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
    /// Stale entries removed in passing (audited as `expire`).
    expired: Vec<String>,
}

/// How much a body must bring, and in what span (`staging.upload_min_bytes` per
/// `staging.upload_stall_secs`).
#[derive(Clone, Copy)]
struct Progress {
    span: Duration,
    min_bytes: u64,
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

/// The body's length as the headers declare it (`None`: chunked, or not said).
fn declared_length(req: &Request) -> Option<u64> {
    req.headers()
        .get(axum::http::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

fn refusal(e: &StagingError) -> Response {
    let r = Refusal::from_error(staging_reason(e), e);
    let status = match r.reason {
        _ if matches!(e, StagingError::TooManyUploads { .. }) => StatusCode::TOO_MANY_REQUESTS,
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

/// `PUT /upload?path=P[&offset=N][&restart=true][&final=true][&sha256=HEX]`: admitted from
/// its request line and headers, then its body streamed into the upload of P in pieces.
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
    let limits = policy.limits;
    let stale = Duration::from_secs(config.staging.stale_upload_secs);
    let progress = Progress {
        span: Duration::from_secs(config.staging.upload_stall_secs),
        min_bytes: config.staging.upload_min_bytes,
    };
    // Nothing of the body is read before the request is admitted: one request per file, a
    // bounded number per client, and the file size, upload state, directories and quotas
    // checked with the length the headers declare.
    let claim = match state.staging.streams.claim(
        &target.root.join(target.rel.to_path()),
        &target.root,
        &who.name,
        StreamRules {
            max_per_client: config.staging.max_uploads_per_client,
            promise_bytes: config.staging.upload_promise_bytes,
        },
    ) {
        Ok(c) => c,
        Err(refused) => return fail(claim_refused(refused, &who.name, &shown), 0),
    };
    let plan = Plan {
        offset: q.offset,
        restart: q.restart,
        length: declared_length(&req),
    };
    let claim = match admit_claim(&state, &target, limits, plan, claim).await {
        Ok((claim, cleared)) => {
            for p in &cleared {
                audit(&state, &who, "expire", p, None, None, None);
            }
            claim
        }
        Err(e) => return fail(e, 0),
    };
    // The writer (see `Writer`), beside the reading of the body.
    let (tx, rx) = std::sync::mpsc::sync_channel::<Piece>(1);
    let writer = Writer {
        state: state.clone(),
        target: target.clone(),
        limits,
        stale,
        claim,
        offset: q.offset,
        truncate: q.restart,
    };
    let writer = tokio::task::spawn_blocking(move || writer.run(rx));
    let Received {
        buf,
        broken,
        stalled,
    } = receive(req.into_body().into_data_stream(), progress, &tx).await;
    // The rest, finishing the upload when asked and the body arrived whole.
    let finish = if broken.is_some() { None } else { finish };
    if !buf.is_empty() || finish.is_some() {
        hand(&tx, Piece { data: buf, finish }).await;
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
    for p in &wrote.expired {
        audit(&state, &who, "expire", p, None, None, None);
    }
    if let Some(why) = broken {
        let e = StagingError::Io {
            op: "receiving the body of",
            path: shown.clone(),
            reason: format!(
                "{why}; {} bytes kept: continue at the offset GET {PATH}?path=… reports",
                wrote.stored
            ),
        };
        if stalled {
            // The client is still there: it hears why, with 408 (a stall, not a fault).
            let mut r = fail(e, wrote.stored);
            *r.status_mut() = StatusCode::REQUEST_TIMEOUT;
            return r;
        }
        return fail(e, wrote.stored);
    }
    let Some(done) = wrote.last else {
        // An empty body that finishes nothing: answer with what the upload holds.
        return holding(target, shown).await;
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

/// The upload admitted on its claim (on a blocking thread): the file size, upload state,
/// directories and quotas checked with the declared length. Returns the claim and the
/// stale entries removed in passing.
async fn admit_claim(
    state: &Arc<AppState>,
    target: &Target,
    limits: StagingLimits,
    plan: Plan,
    claim: Claim,
) -> Result<(Claim, Vec<String>), StagingError> {
    let (st, t) = (state.clone(), target.clone());
    let checked = tokio::task::spawn_blocking(move || {
        let r = upload::admit(&st.staging, &limits, &t, plan, &claim);
        r.map(|cleared| (claim, cleared))
    })
    .await;
    checked.unwrap_or_else(|e| {
        Err(StagingError::Io {
            op: "admitting an upload to",
            path: target.display(),
            reason: e.to_string(),
        })
    })
}

/// A claim refused, as the staging error the request is answered with.
fn claim_refused(refused: ClaimRefused, who: &str, shown: &str) -> StagingError {
    match refused {
        ClaimRefused::Busy { client } => {
            let by = if client == who {
                " (another request of this client)"
            } else {
                " (another client)"
            };
            StagingError::UploadReceiving {
                path: shown.to_string(),
                by: by.into(),
            }
        }
        ClaimRefused::TooMany { max } => StagingError::TooManyUploads {
            client: who.to_string(),
            max,
        },
    }
}

/// The writer: a blocking thread taking pieces in order, so that the disk write of one
/// piece overlaps the receiving of the next. It holds the claim: the file stays this
/// request's until its last piece is written, even if the connection went first.
/// Memory per request: three pieces at most (one filling, one queued, one written).
struct Writer {
    state: Arc<AppState>,
    target: Target,
    limits: StagingLimits,
    stale: Duration,
    claim: Claim,
    /// Where the next piece goes.
    offset: u64,
    /// Whether the next piece restarts the upload.
    truncate: bool,
}

impl Writer {
    /// Writes every piece `rx` brings; on a refusal, the error and the bytes stored.
    fn run(mut self, rx: Receiver<Piece>) -> Result<Wrote, (StagingError, u64)> {
        let mut wrote = Wrote::default();
        while let Ok(piece) = rx.recv() {
            let len = piece.data.len() as u64;
            let chunk = Chunk {
                offset: self.offset,
                data: piece.data,
                truncate: self.truncate,
                finish: piece.finish,
            };
            let w = upload::write_piece(
                &self.state.staging,
                &self.limits,
                self.stale,
                &self.target,
                chunk,
                &self.claim,
            )
            .map_err(|e| (e, wrote.stored))?;
            self.offset += len;
            wrote.stored += len;
            self.truncate = false;
            wrote.expired.extend(w.expired.iter().cloned());
            wrote.last = Some(w);
        }
        drop(self.claim);
        Ok(wrote)
    }
}

/// Hands a piece to the writer; false when the writer stopped (its error is the answer).
async fn hand(tx: &SyncSender<Piece>, piece: Piece) -> bool {
    let tx = tx.clone();
    matches!(
        tokio::task::spawn_blocking(move || tx.send(piece)).await,
        Ok(Ok(()))
    )
}

/// What reading a body left: the last, partial piece, and why it ended early if it did.
struct Received {
    buf: Vec<u8>,
    broken: Option<String>,
    /// Whether it ended for bringing too little in a span (answered 408).
    stalled: bool,
}

/// Reads the body in pieces of [`PIECE`] handed to the writer, until it ends, breaks,
/// stalls, or the writer stops.
async fn receive(mut body: BodyDataStream, progress: Progress, tx: &SyncSender<Piece>) -> Received {
    let mut buf: Vec<u8> = Vec::new();
    let mut broken: Option<String> = None;
    let mut stalled = false;
    // Progress, not silence, keeps a request alive: each span of `upload_stall_secs` must
    // bring `upload_min_bytes`, so a byte every few seconds cannot hold the request's
    // place, file and promise (issue 46).
    let mut span_end = tokio::time::Instant::now() + progress.span;
    let mut span_bytes = 0u64;
    'body: loop {
        let next = tokio::time::timeout_at(span_end, body.next()).await;
        if next.is_err() || tokio::time::Instant::now() >= span_end {
            if span_bytes < progress.min_bytes {
                stalled = true;
                broken = Some(format!(
                    "the body brought {span_bytes} bytes in {} s, fewer than the {} required \
                     (staging.upload_min_bytes per staging.upload_stall_secs)",
                    progress.span.as_secs(),
                    progress.min_bytes
                ));
                break;
            }
            span_end = tokio::time::Instant::now() + progress.span;
            span_bytes = 0;
        }
        let Ok(next) = next else { continue };
        match next {
            Some(Ok(mut bytes)) => {
                span_bytes = span_bytes.saturating_add(bytes.len() as u64);
                while !bytes.is_empty() {
                    if buf.capacity() == 0 {
                        buf.reserve_exact(PIECE);
                    }
                    let take = (PIECE - buf.len()).min(bytes.len());
                    buf.extend_from_slice(&bytes.split_to(take));
                    if buf.len() == PIECE {
                        let data = std::mem::take(&mut buf);
                        if !hand(tx, Piece { data, finish: None }).await {
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
    Received {
        buf,
        broken,
        stalled,
    }
}

/// The answer to an empty body that finishes nothing: what the upload holds.
async fn holding(target: Target, shown: String) -> Response {
    let t = target.clone();
    match tokio::task::spawn_blocking(move || upload::progress(&t)).await {
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
    }
}
