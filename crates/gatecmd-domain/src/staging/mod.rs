//! File staging: agents in VMs have no shared folder, so they list, inspect, upload and
//! remove files inside the configured `file_roots` through MCP tools.
//!
//! One responsibility per file, lower ones first (none imports from a file listed after it):
//! - [`error`]: [`StagingError`], every refusal, written for the agent.
//! - [`beneath`]: resolution that cannot leave a root (no `..`, no symlinks, `*at` calls).
//! - [`temp`]: the hidden temporary name of an unfinished upload.
//! - [`target`]: paths as agents give them ([`resolve`], which refuses a temporary name
//!   above the last component) and client rights ([`check_writable`]).
//! - [`locks`]: the per-file and per-root locks and the streamed uploads being received
//!   with the bytes each was promised ([`Staging`], [`Streams`]).
//! - [`quota`]: what a root holds (bytes and entries, at every depth) and the limits a
//!   write must stay within.
//! - [`inspect`]: facts and SHA-256 of one file ([`stat`]).
//! - [`listing`]: one directory ([`list`]).
//! - [`remove`](mod@remove): [`remove()`].
//! - [`upload`]: chunked uploads into a hidden temporary file, verified by SHA-256, then
//!   renamed into place; a streamed upload admitted from its headers ([`upload::admit`]).
//! - [`audit_trail`]: [`audit()`], the one place staging reports to the audit log.
//!
//! Everything here is blocking file I/O: the tools call it from `spawn_blocking`.

pub mod audit_trail;
pub use gatecmd_core::beneath;
pub mod error;
pub mod inspect;
pub mod listing;
pub mod locks;
pub mod quota;
pub mod remove;
pub mod target;
pub mod temp;
pub mod upload;

pub use audit_trail::{AuditRecord, audit};
pub use error::StagingError;
pub use inspect::{Entry, FileFacts, hash_reader, stat};
pub use listing::{Listing, MAX_LIST_ENTRIES, list};
pub use locks::{Claim, ClaimRefused, KeyedLocks, Staging, StreamRules, Streams};
pub use remove::remove;
pub use target::{RootSel, Target, check_writable, resolve};

#[cfg(test)]
mod tests;
