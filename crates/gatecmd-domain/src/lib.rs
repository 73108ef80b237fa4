//! gatecmd's domain: the bench and its rules, below the MCP surface.
//!
//! # Layout
//!
//! - `approvals`: requests that wait for a named approver's yes, their decisions, and the
//!   file hashes an approval is bound to.
//! - `config`: the YAML configuration: each setting declared once, validation with file,
//!   line and field errors, boards and their power backends (`config::power`, one file per
//!   backend).
//! - `state`: the shared state every tool reads (the configuration in force, executor,
//!   registry, locks, audit, consoles, jobs), and what a reload applies or leaves for a
//!   restart.
//! - `locks`: leases and command locks on devices and boards: one lane per key, FIFO
//!   waiters, TTLs, per-client limits.
//! - `boards`: boards at run time: `lock_board {match}` selection and its fair queue, power
//!   states, consoles joined to boards, `boot_board`'s plan. Inside it:
//!   - `boot_reports`: boot reports: one record per power-on or console-seen boot, with the
//!     stages and faults its console showed, a bounded transcript and an outcome.
//! - `console`: board serial consoles captured into rings with cursors, and the
//!   conversations (`board_run`, U-Boot) held over them.
//! - `exec`: running one child (no shell, cleared environment, own process group, timeout,
//!   capped output): the only place that spawns processes. Inside it:
//!   - `capture`: what a running child prints, read into capped captures and, when someone
//!     watches, into lines.
//!   - `progress`: the percentage a command's output line reports, from its `progress:`
//!     regex.
//!   - `isolation`: an isolated command's mount namespace, in which the USB view holds only
//!     its board.
//! - `flash`: `flash_board`'s orchestration: from any state to an image written, verified
//!   and booted, over the native rockusb engine (`gatecmd-flash`).
//! - `power_run`: running one of a board's power actions (the executor, a step's audit
//!   line, the board's power state after it): the one runner every caller uses.
//! - `jobs`: commands that outlive their call, per client, with bounded retention. Inside
//!   it:
//!   - `running`: the commands running now, for the bench page.
//! - `lab`: the lab beyond this host: every exporter's gatecmd boards and the places over
//!   them as the labgrid coordinator lists them (`lab::directory`), for the lab-wide tools;
//!   other hosts' lab waiters queued here, withdrawable (`lab::waits`).
//! - `limits`: what a client or the server may hold at once:
//!   - `permits`: a counting semaphore that a reload can resize (children, client slots).
//!   - `quotas`: per-client shares of what a client holds open (subscriptions, streams,
//!     answers, waiting reads).
//! - `staging`: file staging inside the file roots (list, stat, upload, remove) with
//!   quotas.
//! - `audit`: the audit log, one bounded JSON line per decision, rotated and aggregated,
//!   each line chained to the one before and signed by the host's key; its verification and
//!   a job's evidence bundle.
//! - `usecases`: what a board action does, once, for every surface that offers it (the
//!   MCP tools, the labgrid bridge, the bench page; the command line through the tools).

pub mod approvals;
pub mod audit;
pub mod boards;
pub mod config;
pub mod console;
pub mod exec;
pub mod flash;
pub mod jobs;
pub mod lab;
pub mod limits;
pub mod locks;
pub mod power_run;
pub mod staging;
pub mod state;
pub mod usecases;
