//! Locks on devices: who may run a command on a board, and when.
//!
//! Each [`LockKey`] has a lane holding at most one lease, at most one running
//! command, and a FIFO queue of waiters (lease requests and command requests
//! in one queue). The rules, in short (docs/LOCKS.md has the long form):
//!
//! - **One command per key at a time**, always — even two commands of the
//!   same lease run one after the other.
//! - **A lease** ([`LockManager::lock`]) holds a key across commands. While
//!   it lives, only commands carrying its id from its client (or, with no id,
//!   from the legacy MCP session that took it) run on the key; everyone else
//!   waits or is refused. It renews with each of its commands, never expires
//!   while one of them runs, and ends by [`LockManager::unlock`], expiry,
//!   [`LockManager::force_unlock`] or [`LockManager::release_session`].
//! - **Waiting** is FIFO. A released key is handed straight to the first
//!   waiter that may take it, so a newcomer never barges in. Waiting has no
//!   deadline of its own: wrap it in a timeout, and drop the future to leave
//!   the queue ([`LockManager::acquire_for_command_wait`] does both).
//! - **Several keys** are taken in sorted order, so two commands never
//!   deadlock; a command never keeps some keys after failing to get others.
//! - **Shared holds** (intention locks): a command or lease on one board
//!   (`port:1-2`) also holds the board's VID:PID key *shared*. Any number of
//!   board holds coexist; a whole-VID:PID command or lease (exclusive) waits
//!   for all of them, and they wait for it. A queued exclusive request is
//!   not overtaken by later shared ones.
//!
//! - **Limits** ([`LockSettings`]): one client holds at most
//!   `max_leases_per_client` leases (waiting lease requests included) and has
//!   at most `max_waiters_per_client` requests queued; a note is at most
//!   `max_note_bytes`; a snapshot lists at most `max_listed` keys and counts
//!   the rest. A request at a limit is refused with a [`LockError`] that names
//!   the limit and what to do.
//!
//! Everything is in memory: a restart releases every lease.
//!
//! # Layout
//!
//! Bottom to top; each file imports only from files above it in this list.
//! - `ids`, `error`, `view`, `settings`, `request`: names, refusals, what the
//!   outside sees, limits, what callers ask for.
//! - `want`: what a request wants from one key and what it is granted.
//! - `lane`: the table (one lane per key) and its read-only questions.
//! - `admission`: who may take a key when (leases, shared/exclusive, FIFO
//!   hand-off, per-client limits).
//! - `ops`: the changes to the table (take, queue, release, hand on, expire).
//! - `plan`: which keys a request takes, in which order.
//! - `guard`, `expiry`: RAII release and the expiry task.
//! - `manager` ([`LockManager`]), then `commands` and `leases`, its operations,
//!   `census` (counts for the metrics scrape) and `outside` (leases an outside
//!   holder keeps: a labgrid place).

mod admission;
mod census;
mod commands;
mod device_keys;
mod error;
mod expiry;
mod guard;
mod ids;
mod lane;
mod leases;
mod manager;
mod ops;
mod outside;
mod plan;
mod request;
mod settings;
mod view;
mod want;

#[cfg(test)]
mod tests;

pub use census::LockCensus;
pub use device_keys::{class_of, lock_key_of};
pub use error::{BusyInfo, HeldBy, LockError, Retake};
pub use guard::CommandGuard;
pub use ids::{ClientName, LeaseId, LockKey, ParseLockKeyError, SessionId};
pub use manager::LockManager;
pub use request::{CommandLockRequest, LeaseRequest};
pub use settings::{LockSettings, MAX_WAIT_SECS};
pub use view::{KeyState, LeaseInfo, LockEvent, LockEventKind, LocksView, RunInfo, SharedInfo};
