//! `limits.max_request_body_bytes` with the value in force: rmcp takes its own limit once,
//! when the router is built, so a reload could not change it there. This layer, in front
//! of rmcp, reads the limit from the configuration for every request.
//!
//! `list_files` advertises a chunk size that fits this limit: the configuration is refused
//! when `staging` chunks (base64 plus the call's envelope) would not fit, and both read
//! the same configuration.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;

use gatecmd_domain::state::AppState;

/// The layer: 413 with a JSON body that names the limit. A declared length is checked
/// before anything is read; a body without one is read up to the limit and refused past it.
pub async fn enforce(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let limit = state.config().limits.max_request_body_bytes;
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    match declared {
        // hyper ends a body at its declared length, so the header is the whole check.
        Some(len) if len > limit as u64 => too_large(&format!("{len} bytes"), limit),
        Some(_) => next.run(req).await,
        None => {
            let (parts, body) = req.into_parts();
            match read_up_to(body, limit).await {
                Read::Whole(bytes) => next.run(Request::from_parts(parts, bytes.into())).await,
                Read::TooLarge => too_large("more bytes", limit),
                Read::Failed(e) => {
                    let body = axum::Json(serde_json::json!({
                        "error": "bad_request",
                        "message": format!("the request body could not be read: {e}"),
                    }));
                    (StatusCode::BAD_REQUEST, body).into_response()
                }
            }
        }
    }
}

enum Read {
    Whole(Bytes),
    TooLarge,
    Failed(axum::Error),
}

async fn read_up_to(body: Body, limit: usize) -> Read {
    let mut stream = body.into_data_stream();
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut len = 0usize;
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(c) => {
                len = len.saturating_add(c.len());
                if len > limit {
                    return Read::TooLarge;
                }
                chunks.push(c);
            }
            Err(e) => return Read::Failed(e),
        }
    }
    match chunks.len() {
        // The common case costs no copy.
        1 => Read::Whole(chunks.swap_remove(0)),
        _ => Read::Whole(chunks.concat().into()),
    }
}

fn too_large(size: &str, limit: usize) -> Response {
    let body = axum::Json(serde_json::json!({
        "error": "payload_too_large",
        "message": format!(
            "the request body ({size}) is larger than limits.max_request_body_bytes \
             ({limit} bytes); send less per request (write_file: smaller chunks, see \
             list_files for the chunk size that fits)"
        ),
        "limit_bytes": limit,
    }));
    (StatusCode::PAYLOAD_TOO_LARGE, body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunked(parts: &[&'static [u8]]) -> Body {
        let chunks: Vec<Result<Bytes, std::io::Error>> =
            parts.iter().map(|p| Ok(Bytes::from_static(p))).collect();
        Body::from_stream(futures::stream::iter(chunks))
    }

    #[tokio::test]
    async fn a_body_without_a_length_is_read_up_to_the_limit() {
        match read_up_to(chunked(&[b"abc", b"def"]), 6).await {
            Read::Whole(b) => assert_eq!(&b[..], b"abcdef"),
            _ => panic!("six bytes fit a limit of six"),
        }
        assert!(matches!(
            read_up_to(chunked(&[b"abc", b"defg"]), 6).await,
            Read::TooLarge
        ));
        match read_up_to(chunked(&[b"one chunk"]), 100).await {
            Read::Whole(b) => assert_eq!(&b[..], b"one chunk"),
            _ => panic!("fits"),
        }
    }
}
