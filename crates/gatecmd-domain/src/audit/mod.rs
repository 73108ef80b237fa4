//! The audit log: one bounded JSON line per decision, in `<state_dir>/audit.log`
//! (docs/AUDIT.md).
//!
//! Every `execute_command` decision (refused with its reason, allowed and started, and how
//! it ended) and every lock event becomes one line. The file is owner-only (0600), opened
//! with `O_APPEND`, and each record is written with a single `write_all` of the whole line
//! straight to the kernel (no user-space buffer) by the log's writer thread, microseconds
//! after [`Audit::record`] enqueued it; [`Audit::flush`] (the server's stop) waits for every
//! line enqueued. A `SIGKILL` loses at most the lines still queued, and can cut the one
//! line being written at that instant. There is no `fsync` per line (milliseconds per call on a
//! slow disk); the file is synced at each rotation and at shutdown.
//!
//! What keeps one client from pushing the others' records out of retention:
//! - `bound`: no line is longer than `audit.max_record_bytes`; a longer field is cut and
//!   logged with its length and SHA-256;
//! - `refusals`: after the first few refusals of a kind from a client in a window, the rest
//!   are counted and summarized in one record;
//! - `log`: rotation by size (`max_bytes`, `keep` files) and expiry by age
//!   (`max_age_days`), renaming before reopening so that no written line is lost.
//!
//! What makes a change to the file show (docs/AUDIT.md "Chain and signatures"):
//! - `chain`: every line ends in `prev` (the hash of the line before, across rotation and
//!   restarts) and `sig` (ed25519 by the host's key, `<state_dir>/audit.key`, over the line
//!   without `sig`), added under the log's lock as the line is written;
//! - `writer`: the thread that seals and writes the lines callers enqueue, in their order,
//!   so that signing is off the request path;
//! - `verify`: a log and its rotated files checked line by line (`gatecmd audit verify`);
//! - `evidence`: a job's lines in one sealed bundle that verifies offline
//!   (`gatecmd evidence`).
//!
//! The module depends on nothing above it but the settings in `config`: callers hand it
//! plain data in its own record types, one per kind of line (`records`: execute_command
//! and lock events; `approvals`, `jobs`, `boards` (power, console, boot, board commands),
//! `files`, `flash`, `labgrid`, `plans` (test plan runs), `server`); no caller builds a line by hand.

mod approvals;
mod boards;
mod bound;
pub mod chain;
pub mod evidence;
mod files;
mod flash;
mod jobs;
mod labgrid;
mod log;
mod plans;
mod recent;
mod records;
mod refusals;
mod server;
pub mod verify;
mod writer;

pub use approvals::ApprovalRecord;
pub use boards::{
    BoardCommandRecord, BootOutcome, BootRecord, BootStep, CommandOutcome, CommandRan,
    ConsoleWriteRecord, OnReleaseRecord, PowerOutcome, PowerRecord, PowerStepRecord, PowerVia,
    Prompt, RefusedDetail,
};
pub use chain::{GENESIS, KEY_FILE, Signer};
pub use files::FileRecord;
pub use flash::{Ended, FlashOutcome, FlashRecord, Flashed, StepMs};
pub use jobs::JobRecord;
pub use labgrid::{LabgridEvent, LabgridRecord, PlaceChange};
pub use log::{Audit, AuditError, FILE_NAME};
pub use plans::PlanRecord;
pub use recent::{Decision, RECENT, Recent};
pub use records::{ExecuteCall, RunEnd, RunOutcome, RunStart, RunTrail, record_lock_events};
pub use refusals::RefusalClass;
pub use server::ServerRecord;
