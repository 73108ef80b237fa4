//! The transport layer: everything between a TCP connection and the MCP handler. Nothing
//! below it (the MCP surface, the domain, the core) imports it.
//!
//! - `http`: the axum router: `/mcp` behind the request guard, `/health`, `/metrics`.
//! - `conn_limits`: the accept loop: header/idle timeouts, connection caps, eviction of the
//!   oldest unauthenticated connection.
//! - `gate`: the tokens and policy in force, and the one admission decision of every HTTP
//!   listener (`/mcp` and the page's bind, `metrics.bind`).
//! - `auth`: bearer tokens of named clients (constant-time), Origin and Host checks.
//! - `body_limit`: `limits.max_request_body_bytes` enforced with the value in force.
//! - `metrics`: the `/metrics` scrape: gauges read from the state, the exposition formats.
//! - `json_answer`: a POST answered within two seconds goes out as one JSON body, not SSE.
//! - `lab_waits`: `DELETE /lab/waits/ID`, another host withdrawing its agent's lab wait
//!   queued here, and the wait's headers read into the request.
//! - `on_behalf`: a `peer: true` client acting for its host's agent (`Gatecmd-On-Behalf-Of`),
//!   as `HOST/CLIENT`.
//! - `open_answers`: answers not yet read, bounded per client.
//! - `peer_user`: the local user that owns a TCP peer's socket (`sock_diag`), for the raw
//!   protocols that carry no credential of their own (the labgrid ports).
//! - `upload`: `PUT /upload`, a file streamed into a client's write root (the same rules as
//!   `write_file`, without base64), and `GET /upload`, how far one got.
//! - `sessions`: the session manager: each legacy session belongs to the client that
//!   opened it, a per-client cap, and its leases end with it.

pub mod auth;
pub mod body_limit;
pub mod conn_limits;
pub mod gate;
pub mod http;
pub mod json_answer;
pub mod lab_waits;
pub mod metrics;
pub mod on_behalf;
pub mod open_answers;
pub mod peer_user;
pub mod sessions;
pub mod upload;
