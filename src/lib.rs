//! gatecmd: a device-aware, allowlisted command gateway for USB development boards,
//! spoken over the Model Context Protocol (Streamable HTTP and stdio).
//!
//! # Layout
//!
//! Data flows one way: transport → auth → MCP handler → policy (sanitizer, locks) → executor.
//! The top-level modules stand in six layers, each importing only its own or lower ones
//! (docs/ARCHITECTURE.md, "Layers"; `tests/structure.rs` holds it): entry (`cli`) →
//! transport (`transport`, `page`) → mcp (`server`, `tools`, `resources`, `notify`,
//! `subscriptions`, `pace`) → views (`views`) → domain (`state`, `boards`, `locks`,
//! `console`, `staging`, `exec`, `jobs`, `running`, `progress`, `capture`, `quotas`,
//! `permits`) → core (`config`, `devices`, `isolation`, `sanitizer`, `beneath`, `audit`,
//! `metrics`, `refusal`, `output`, `identity`, `throttle`).
//!
//! - [`cli`]: the command line (`serve`, `stdio`, `check`, `devices`), start-up wiring,
//!   signals and SIGHUP reload.
//! - [`config`]: the YAML schema and defaults, loading (search order, owner-only check) and
//!   validation with file/line/field errors, one file per part; it imports the sanitizer.
//! - [`transport`]: between a TCP connection and the MCP handler: the axum router
//!   (`/mcp` behind the request guard, `/health`), the accept loop and connection caps,
//!   bearer tokens and Origin/Host checks, the body limit, quick answers as one JSON body,
//!   unread answers per client, the session manager.
//! - [`page`]: the bench page (`GET /`) and its live event stream (`GET /events`): sign-in
//!   with a client token into a cookie session, a JSON snapshot of the bench, SSE updates.
//! - [`console`]: board serial consoles: a capture task per board keeps its tty open (raw,
//!   configured baud) into a ring with absolute cursors, reopened when the adapter returns;
//!   a shell or U-Boot conversation over it with framed exit statuses.
//! - [`identity`]: who is calling, once authenticated (the name leases and the audit log show).
//! - [`state`]: the shared [`state::AppState`] every tool and session reads; a reload
//!   applies to it, except the restart-only keys listed in one place.
//! - [`server`]: the rmcp handler: the tool list, which only registers and delegates,
//!   and marks the tools that answer at once.
//! - [`tools`]: the tools' request/result types and logic, one file per tool or family.
//! - [`views`]: a device, a lock key and a board as every surface renders them.
//! - [`refusal`]: why a tool said no: a stable reason name and the message for the agent,
//!   rendered once from each tool family's typed error; the shared refusals in `common`.
//! - [`sanitizer`]: the pattern grammar, forbidden characters, matching a call against a
//!   command's [`sanitizer::CommandPolicy`], file-root confinement; knows no config file.
//! - [`capture`]: what a child prints: capped per stream, passed on through a bounded queue,
//!   split into lines only when someone watches.
//! - [`exec`]: running one child in its own process group with timeout, caps and kill.
//! - [`isolation`]: the per-board view (mount namespace) an isolated command runs in.
//! - [`permits`]: a semaphore resizable while permits are out (children, client slots).
//! - [`output`]: terminal output (ANSI, `\r`) turned into readable text.
//! - [`progress`]: output lines turned into MCP progress notifications.
//! - [`running`]: the commands running now (client, argv, board, progress) for the page.
//! - [`jobs`]: commands that outlive their call (background, detached, MCP tasks): the
//!   table per client, output rings with cursors, bounded retention of finished ones.
//! - [`devices`]: the USB device model, Rockchip identification, the registry and its
//!   udev/libusb/sysfs monitors (the one shared source of truth about what is attached).
//! - [`lab`]: gatecmd as a labgrid exporter (docs/LAB.md): boards as labgrid resources,
//!   places bridged to board leases (`labgrid:<place>`), console and power ports.
//! - [`boards`]: boards at run time: `lock_board {match}` selection and its fair queue
//!   across boards, power states, the console capture's hook into `list_boards`,
//!   `boot_board`'s plan.
//! - [`locks`]: lock keys, leases, FIFO waiters, expiry, release on session end.
//! - [`resources`]: the MCP resources (devices, locks, commands) and what an event changes.
//! - [`notify`]: resource change notifications for both protocol eras.
//! - [`pace`]: board resource updates paced to at most 10 per second per subscriber.
//! - [`throttle`]: the one "at most one per interval, the last state always sent" rule
//!   that pacing, progress, the page's stream and console announcements share.
//! - [`subscriptions`]: what a client may subscribe to, and how much of it.
//! - [`quotas`]: per-client shares of subscriptions, streams, unread answers, waiting reads.
//! - [`metrics`]: Prometheus metrics, the recording side: counters and histograms updated
//!   where things happen (the scrape side is `transport::metrics`).
//! - [`audit`]: one JSON line per decision (commands allowed, refused, ended; lock events)
//!   in `<state_dir>/audit.log`, owner-only, rotated by size.
//! - [`staging`]: file staging for agents without a shared folder: listing, stat, chunked
//!   uploads verified by SHA-256, removal, all resolved beneath a root without symlinks and
//!   bounded per root (bytes, entries, depth, directories made per call).

pub mod cli;
pub mod lab;
pub mod page;
pub mod transport;
