//! gatecmd: a device-aware, allowlisted command gateway for USB development boards,
//! spoken over the Model Context Protocol (Streamable HTTP and stdio).
//!
//! # Layout
//!
//! The layers are crates (docs/ARCHITECTURE.md, "Crates"); data flows one way down, and an
//! upward import does not compile:
//!
//! - `gatecmd` (this crate, `src/`): the binary's parts, below.
//! - `gatecmd-mcp` (`crates/gatecmd-mcp`): the MCP surface: tools (one file each),
//!   resources, notifications, views.
//! - `gatecmd-domain` (`crates/gatecmd-domain`): boards, locks and leases, consoles,
//!   power, exec, jobs, staging, audit, the configuration and the shared state.
//! - `gatecmd-devices` (`crates/gatecmd-devices`): the USB device model, the families
//!   table, the registry and its udev/libusb/sysfs monitors.
//! - `gatecmd-core` (`crates/gatecmd-core`): the sanitizer, refusals, identity, metrics,
//!   output cleaning, `beneath`, throttling.
//! - `gatecmd-flash` (`crates/gatecmd-flash`): the native rockusb flashing engine.
//!
//! This crate holds what only the binary needs:
//!
//! - [`allocator`]: the global allocator: glibc's malloc while starting, mimalloc once
//!   serving.
//! - [`cli`]: the command line (`serve`, `stdio`, `check`, `devices`), start-up wiring,
//!   signals and SIGHUP reload.
//! - [`transport`]: between a TCP connection and the MCP handler: the axum router
//!   (`/mcp` behind the request guard, `/health`, `/upload`, `/metrics`), the accept loop
//!   and connection caps, bearer tokens and Origin/Host checks, a TCP peer's local user,
//!   the body limit, quick answers as one JSON body, the session manager.
//! - [`page`]: the bench page (`GET /`) and its live event stream (`GET /events`): sign-in
//!   with a client token into a cookie session, a JSON snapshot of the bench, SSE updates.
//! - [`lab`]: gatecmd as a labgrid exporter (docs/LAB.md): boards as labgrid resources,
//!   places bridged to board leases (`labgrid:<place>`), console and power ports that serve
//!   only the place holder's local account.

pub mod allocator;
pub mod cli;
pub mod lab;
pub mod page;
pub mod transport;
