//! Quick answers as one JSON body; slow ones as the SSE stream rmcp made.
//!
//! rmcp answers every legacy (session) POST with an SSE stream, and offers JSON for
//! stateless requests only by waiting however long the tool takes for its first message.
//! Neither suits gatecmd's callers: parsing SSE costs the official Python SDK about 1 ms of
//! CPU per call (docs/PERFORMANCE.md), and an answer that comes only after a ten-minute
//! flash would sit silent past a client's read timeout (300 s in the Python SDK), where
//! the stream's keep-alive comments would have kept it open.
//!
//! So this layer waits up to [`JSON_WINDOW`] for the first message of a POST's stream. If
//! that message is the request's answer, it becomes the whole JSON body (the stream ends
//! after the answer anyway). If it is anything else (a progress notification, the opening
//! of a `subscriptions/listen` stream), or the window passes first, the client gets the
//! stream as it is, from its first byte. The Streamable HTTP transport lets the server
//! pick either form for any request; every client must accept both.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use futures::StreamExt;
use serde::Deserialize;
use serde::de::IgnoredAny;

/// How long an answer may take and still be sent as JSON. Well under any client's read
/// timeout; well over what listing, locking or a short command takes.
pub const JSON_WINDOW: Duration = Duration::from_secs(2);

/// The layer: see the module documentation.
pub async fn prefer_json(req: Request, next: Next) -> Response {
    let listen = req
        .headers()
        .get("mcp-method")
        .is_some_and(|m| m.as_bytes() == b"subscriptions/listen");
    let accepts_json = req
        .headers()
        .get_all(header::ACCEPT)
        .iter()
        .any(|v| v.to_str().is_ok_and(|v| v.contains("application/json")));
    let eligible = req.method() == Method::POST && accepts_json && !listen;
    let resp = next.run(req).await;
    let is_sse = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|ct| ct.as_bytes().starts_with(b"text/event-stream"));
    if !eligible || !is_sse || resp.status() != StatusCode::OK {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let mut stream = body.into_data_stream();
    let mut seen: Vec<u8> = Vec::new();
    let window = tokio::time::sleep(JSON_WINDOW);
    tokio::pin!(window);
    let mut failed = None;
    loop {
        tokio::select! {
            chunk = stream.next() => match chunk {
                Some(Ok(bytes)) => {
                    seen.extend_from_slice(&bytes);
                    match first_message(&seen) {
                        First::Answer(range) => {
                            let json = Bytes::copy_from_slice(&seen[range]);
                            parts.headers.remove(header::CACHE_CONTROL);
                            parts.headers.remove("x-accel-buffering");
                            parts.headers.insert(
                                header::CONTENT_TYPE,
                                HeaderValue::from_static("application/json"),
                            );
                            return Response::from_parts(parts, Body::from(json));
                        }
                        First::Other => break,
                        First::NotYet => {}
                    }
                }
                Some(Err(e)) => {
                    failed = Some(e);
                    break;
                }
                None => break,
            },
            _ = &mut window => break,
        }
    }
    // Not a quick answer: the stream as rmcp made it, starting with what was read.
    let head = futures::stream::iter([Ok::<Bytes, axum::Error>(Bytes::from(seen))]);
    let tail = futures::stream::iter(failed.map(Err));
    Response::from_parts(parts, Body::from_stream(head.chain(tail).chain(stream)))
}

/// What the stream's first message is, as far as it has been read.
#[derive(Debug, PartialEq, Eq)]
enum First {
    /// The answer to the request: these bytes of the buffer are its JSON.
    Answer(std::ops::Range<usize>),
    /// Something else comes first: a notification or a request to the client.
    Other,
    /// No complete message yet (only rmcp's priming event, keep-alives, or half an event).
    NotYet,
}

/// The parts of a JSON-RPC message that tell an answer from the rest.
#[derive(Deserialize)]
struct Shape {
    id: Option<IgnoredAny>,
    method: Option<IgnoredAny>,
    result: Option<IgnoredAny>,
    error: Option<IgnoredAny>,
}

/// Finds the first event with data in `buf` (SSE: events end with a blank line; rmcp
/// writes each message as one `data:` line).
fn first_message(buf: &[u8]) -> First {
    let mut start = 0;
    while let Some(len) = find_blank_line(&buf[start..]) {
        let event = &buf[start..start + len];
        let data: Vec<(usize, usize)> = lines(event)
            .filter_map(|(at, line)| {
                let value = line.strip_prefix(b"data:")?;
                let skip = line.len() - value.len() + usize::from(value.first() == Some(&b' '));
                Some((start + at + skip, start + at + line.len()))
            })
            .filter(|(from, to)| to > from)
            .collect();
        start += len;
        match data.as_slice() {
            [] => continue,
            [(from, to)] => {
                return match serde_json::from_slice::<Shape>(&buf[*from..*to]) {
                    Ok(s)
                        if s.id.is_some()
                            && s.method.is_none()
                            && (s.result.is_some() || s.error.is_some()) =>
                    {
                        First::Answer(*from..*to)
                    }
                    _ => First::Other,
                };
            }
            // A message split over several data lines: leave it to the stream.
            _ => return First::Other,
        }
    }
    First::NotYet
}

/// The length of the first event in `buf`, blank line included.
fn find_blank_line(buf: &[u8]) -> Option<usize> {
    buf.windows(2).position(|w| w == b"\n\n").map(|at| at + 2)
}

/// The lines of one event, each with its offset in the event.
fn lines(event: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    let mut at = 0;
    event.split(|&b| b == b'\n').map(move |line| {
        let this = at;
        at += line.len() + 1;
        (this, line.strip_suffix(b"\r").unwrap_or(line))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(buf: &str) -> Option<String> {
        match first_message(buf.as_bytes()) {
            First::Answer(r) => Some(buf[r].to_string()),
            _ => None,
        }
    }

    #[test]
    fn the_answer_after_the_priming_event_is_found() {
        let buf = "data: \nid: 0/0\nretry: 3000\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{}}\nid: 1/0\n\n";
        assert_eq!(
            answer(buf).as_deref(),
            Some("{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{}}")
        );
        let err = ":\n\ndata:{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"error\":{\"code\":-1,\"message\":\"x\"}}\n\n";
        assert!(answer(err).is_some_and(|a| a.starts_with("{\"jsonrpc\"")));
    }

    #[test]
    fn a_notification_or_request_first_keeps_the_stream() {
        let progress = "data: \nid: 0/0\n\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n";
        assert_eq!(first_message(progress.as_bytes()), First::Other);
        let request =
            "data: {\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"sampling/createMessage\"}\n\n";
        assert_eq!(first_message(request.as_bytes()), First::Other);
        let split = "data: {\"jsonrpc\":\"2.0\",\ndata: \"id\":1,\"result\":{}}\n\n";
        assert_eq!(first_message(split.as_bytes()), First::Other);
    }

    #[test]
    fn half_an_event_or_only_keep_alives_is_not_yet() {
        for buf in [
            "",
            "data: \nid: 0/0\nretry: 3000\n\n",
            ":\n\n:\n\n",
            "data: {\"jsonrpc\":\"2.0\",\"id\":2,\"res",
            "data: {\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{}}\n",
        ] {
            assert_eq!(first_message(buf.as_bytes()), First::NotYet, "{buf:?}");
        }
    }
}
