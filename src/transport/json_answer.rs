//! Quick answers as one JSON body; slow ones as the SSE stream rmcp made.
//!
//! rmcp answers every legacy (session) POST with an SSE stream, and offers JSON for
//! stateless requests only by waiting however long the tool takes for its first message.
//! Neither suits gatecmd's callers: parsing SSE costs the official Python SDK about 1 ms of
//! CPU per call (docs/PERFORMANCE.md), and an answer that comes only after a ten-minute
//! flash would sit silent past a client's read timeout (300 s in the Python SDK), where
//! the stream's keep-alive comments would have kept it open.
//!
//! Three paths, one [`JSON_WINDOW`] (2 s) measured from the request:
//!
//! - A 2026-07-28 call to a quick method ([`is_quick`]) goes to an rmcp service in its own
//!   JSON mode (`McpService` in `src/transport/http.rs`): the cheapest path.
//! - Any other POST: [`prefer_json`] waits for the first message of rmcp's stream. If it is
//!   the request's answer, it becomes the whole JSON body (the stream ends after the answer
//!   anyway). If it is anything else (a progress notification, a `subscriptions/listen`
//!   stream), or the window passes, the client gets the stream as it is.
//! - rmcp holds a 2026-07-28 call's headers until the call's first message. If the window
//!   passes before rmcp has answered at all, `still_working` answers with an SSE stream of
//!   keep-alive comments, then the call's messages.
//!
//! The Streamable HTTP transport lets the server pick either form for any request; every
//! client must accept both.

use std::borrow::Cow;
use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::OnceLock;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use futures::StreamExt;
use serde::Deserializer as _;
use serde::de::{IgnoredAny, MapAccess, Visitor};

/// How long an answer may take and still be sent as JSON. Well under any client's read
/// timeout; well over what listing, locking or a short command takes.
pub const JSON_WINDOW: Duration = Duration::from_secs(2);

/// The tools that answer at once. The MCP handler's tool list says which (the router in
/// `src/transport/http.rs` hands over the function that reads it); this module only asks.
///
/// Read from the tool list on the first request, not at start-up: the tool list is every
/// tool's JSON Schema, and a bench that no agent has called yet should not hold them (or
/// the allocator's pages their construction spread over; docs/PERFORMANCE.md, idle RSS).
#[derive(Debug, Clone)]
pub struct QuickTools {
    names: Arc<OnceLock<Names>>,
    list: fn() -> Vec<String>,
}

/// Tool names as the `Mcp-Name` header carries them.
type Names = Box<[Box<[u8]>]>;

impl QuickTools {
    /// The tools `list` names, asked once, when a request first needs them.
    pub fn from_tool_list(list: fn() -> Vec<String>) -> Self {
        QuickTools {
            names: Arc::new(OnceLock::new()),
            list,
        }
    }

    /// A fixed list (tests).
    pub fn new<S: AsRef<str>>(names: impl IntoIterator<Item = S>) -> Self {
        let fixed: Names = names
            .into_iter()
            .map(|n| n.as_ref().as_bytes().into())
            .collect();
        let q = Self::from_tool_list(Vec::new);
        let _ = q.names.set(fixed);
        q
    }

    /// Whether the tool named `name` (an `Mcp-Name` header's bytes) answers at once.
    pub fn contains(&self, name: &[u8]) -> bool {
        self.names
            .get_or_init(|| {
                (self.list)()
                    .into_iter()
                    .map(|n| n.into_bytes().into_boxed_slice())
                    .collect()
            })
            .iter()
            .any(|quick| **quick == *name)
    }
}

/// Whether rmcp may answer `req` as JSON by itself (its `json_response` mode, the cheapest
/// path: no stream, no second pass here): a 2026-07-28 request for a method that answers
/// at once, by its `Mcp-Method` and `Mcp-Name` headers (`quick` for tool calls). rmcp
/// checks those headers against the body, so they cannot say "quick" for a slow call.
/// Anything else, including a request without them, goes the streamed way through
/// [`prefer_json`].
pub fn is_quick<B>(req: &axum::http::Request<B>, quick: &QuickTools) -> bool {
    let header = |name: &str| req.headers().get(name).map(HeaderValue::as_bytes);
    if req.method() != Method::POST || header("mcp-protocol-version") != Some(b"2026-07-28") {
        return false;
    }
    match header("mcp-method") {
        Some(b"tools/call") => header("mcp-name").is_some_and(|name| quick.contains(name)),
        Some(b"subscriptions/listen") | None => false,
        Some(_) => true,
    }
}

/// The layer: see the module documentation.
pub async fn prefer_json(req: Request, next: Next) -> Response {
    let listen = req
        .headers()
        .get("mcp-method")
        .is_some_and(|m| m.as_bytes() == b"subscriptions/listen");
    let (eligible, may_stream) = {
        let accepts = |kind: &str| {
            req.headers()
                .get_all(header::ACCEPT)
                .iter()
                .any(|v| v.to_str().is_ok_and(|v| v.contains(kind)))
        };
        let post = req.method() == Method::POST;
        (
            post && accepts("application/json") && !listen,
            post && accepts("text/event-stream"),
        )
    };
    let deadline = tokio::time::Instant::now() + JSON_WINDOW;
    let mut pending = Box::pin(next.run(req));
    let resp = if may_stream {
        tokio::select! {
            resp = &mut pending => resp,
            // rmcp holds a 2026-07-28 call's headers until its first message.
            _ = tokio::time::sleep_until(deadline) => return still_working(pending),
        }
    } else {
        pending.await
    };
    if !eligible || !is_sse(resp.headers()) || resp.status() != StatusCode::OK {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let mut stream = body.into_data_stream();
    let mut seen: Vec<u8> = Vec::new();
    let window = tokio::time::sleep_until(deadline);
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

fn is_sse(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|ct| ct.as_bytes().starts_with(b"text/event-stream"))
}

/// How often a call that is still working sends an SSE comment (as rmcp's own streams do).
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// A call whose response rmcp has not begun after the window: an SSE stream now, keep-alive
/// comments while it works, then its messages. Dropping the stream (the client went away)
/// drops rmcp's future, which cancels the call as a disconnect always does.
fn still_working(pending: Pin<Box<impl Future<Output = Response> + Send + 'static>>) -> Response {
    enum Phase<F> {
        Waiting(Pin<Box<F>>, tokio::time::Interval),
        Streaming(axum::body::BodyDataStream),
        Done,
    }
    let tick = tokio::time::interval(KEEP_ALIVE);
    let body = futures::stream::unfold(Phase::Waiting(pending, tick), |phase| async move {
        match phase {
            Phase::Waiting(mut pending, mut tick) => tokio::select! {
                resp = &mut pending => {
                    let (parts, body) = resp.into_parts();
                    if is_sse(&parts.headers) {
                        let mut stream = body.into_data_stream();
                        let first = stream.next().await?;
                        Some((first, Phase::Streaming(stream)))
                    } else {
                        // A JSON answer (or error) becomes the stream's one event.
                        let json = axum::body::to_bytes(body, usize::MAX).await.ok()?;
                        let mut event = Vec::with_capacity(json.len() + 16);
                        for line in json.split(|&b| b == b'\n') {
                            event.extend_from_slice(b"data: ");
                            event.extend_from_slice(line);
                            event.push(b'\n');
                        }
                        event.push(b'\n');
                        Some((Ok(Bytes::from(event)), Phase::Done))
                    }
                }
                _ = tick.tick() => Some((Ok(Bytes::from_static(b":\n\n")), Phase::Waiting(pending, tick))),
            },
            Phase::Streaming(mut stream) => {
                let item = stream.next().await?;
                Some((item, Phase::Streaming(stream)))
            }
            Phase::Done => None,
        }
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(body))
        .unwrap_or_else(|_| Response::new(Body::empty()))
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

/// Whether a JSON-RPC message is an answer (it has `result` or `error`) or not (it has
/// `method`), decided at the first of those keys: the rest of a large answer is not read.
fn is_answer(json: &[u8]) -> bool {
    struct Probe<'a>(&'a Cell<Option<bool>>);
    impl<'de> Visitor<'de> for Probe<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON-RPC message")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                match key.as_ref() {
                    "result" | "error" => {
                        self.0.set(Some(true));
                        return Ok(());
                    }
                    "method" => {
                        self.0.set(Some(false));
                        return Ok(());
                    }
                    _ => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(())
        }
    }
    let verdict = Cell::new(None);
    // Stopping inside the object makes the deserializer report unread input; the verdict
    // was taken by then.
    let _ = serde_json::Deserializer::from_slice(json).deserialize_map(Probe(&verdict));
    verdict.get() == Some(true)
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
            [(from, to)] if is_answer(&buf[*from..*to]) => return First::Answer(*from..*to),
            [_] => return First::Other,
            // A message split over several data lines: leave it to the stream.
            _ => return First::Other,
        }
    }
    First::NotYet
}

/// The length of the first event in `buf`, blank line included. (memchr: answers run to
/// hundreds of KiB, and this is on every call's path.)
fn find_blank_line(buf: &[u8]) -> Option<usize> {
    memchr::memmem::find(buf, b"\n\n").map(|at| at + 2)
}

/// The lines of one event, each with its offset in the event.
fn lines(event: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    let ends = memchr::memchr_iter(b'\n', event).chain(std::iter::once(event.len()));
    let mut at = 0;
    ends.map(move |end| {
        let this = at;
        let line = &event[this..end];
        at = end + 1;
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
        for not_json in ["data: [1,2]\n\n", "data: {\"id\":1\n\n", "data: hello\n\n"] {
            assert_eq!(
                first_message(not_json.as_bytes()),
                First::Other,
                "{not_json}"
            );
        }
    }

    #[test]
    fn the_tool_list_is_read_on_first_use_and_once() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static READS: AtomicUsize = AtomicUsize::new(0);
        fn list() -> Vec<String> {
            READS.fetch_add(1, Ordering::SeqCst);
            vec!["list_devices".into()]
        }
        let quick = QuickTools::from_tool_list(list);
        let copy = quick.clone();
        assert_eq!(READS.load(Ordering::SeqCst), 0, "read before any request");
        assert!(quick.contains(b"list_devices"));
        assert!(!copy.contains(b"execute_command"));
        assert!(copy.contains(b"list_devices"));
        assert_eq!(READS.load(Ordering::SeqCst), 1, "clones share one reading");
    }

    #[test]
    fn only_quick_2026_calls_skip_the_stream() {
        let quick = QuickTools::new(["list_devices", "list_commands", "unlock_device"]);
        let is_quick = |r: &axum::http::Request<()>| is_quick(r, &quick);
        let req = |method: &str, headers: &[(&str, &str)]| {
            let mut b = axum::http::Request::builder().method(method).uri("/mcp");
            for (k, v) in headers {
                b = b.header(*k, *v);
            }
            b.body(()).expect("request")
        };
        let modern = |m: &'static str, name: Option<&'static str>| {
            let mut h = vec![("mcp-protocol-version", "2026-07-28"), ("mcp-method", m)];
            h.extend(name.map(|n| ("mcp-name", n)));
            h
        };
        for quick in ["list_devices", "list_commands", "unlock_device"] {
            assert!(
                is_quick(&req("POST", &modern("tools/call", Some(quick)))),
                "{quick}"
            );
        }
        assert!(is_quick(&req("POST", &modern("resources/read", None))));
        assert!(is_quick(&req("POST", &modern("tools/list", None))));
        for slow in [
            "execute_command",
            "wait_for_device",
            "lock_device",
            "stat_file",
            "write_file",
            "nope",
            "list_device",
        ] {
            assert!(
                !is_quick(&req("POST", &modern("tools/call", Some(slow)))),
                "{slow}"
            );
        }
        assert!(!is_quick(&req("POST", &modern("tools/call", None))));
        assert!(!is_quick(&req(
            "POST",
            &modern("subscriptions/listen", None)
        )));
        assert!(!is_quick(&req("GET", &modern("tools/list", None))));
        assert!(!is_quick(&req(
            "POST",
            &[
                ("mcp-protocol-version", "2025-11-25"),
                ("mcp-method", "tools/list")
            ]
        )));
        assert!(!is_quick(&req(
            "POST",
            &[("mcp-protocol-version", "2026-07-28")]
        )));
    }

    #[test]
    fn the_kind_is_read_from_the_first_telling_key() {
        assert!(is_answer(
            br#"{"jsonrpc":"2.0","id":"x\"}","result":{"a":[1,{"method":2}]}}"#
        ));
        assert!(is_answer(
            br#"{"error":{"code":1},"id":null,"jsonrpc":"2.0"}"#
        ));
        assert!(!is_answer(br#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#));
        assert!(!is_answer(br#"{"jsonrpc":"2.0","id":3}"#));
        // Unread input after the key is fine: a large answer is not parsed to its end.
        assert!(is_answer(
            br#"{"jsonrpc":"2.0","id":1,"result":{"devices":[ truncated"#
        ));
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
