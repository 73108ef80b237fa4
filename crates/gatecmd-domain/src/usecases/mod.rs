//! Use cases: what a board action does, written once for every surface that offers it, so
//! that each surface holds only its request, its answer, its wording and its wire format.
//! The MCP tools call them; the labgrid bridge (`src/lab/`) calls `power::switch` for its
//! power port and `lease::board` for a place's hold; the bench page (`src/page/`) calls
//! `approval::decide` and `unlock::end_lease`; the command line (`src/cli/`) is a client of
//! the running server and reaches them through its tools (`gatecmd approve` → `approve`,
//! `gatecmd leases end` → `unlock_device`). `tests/server/use_cases.rs` holds it: no surface
//! builds a lease request, takes a board's key or runs the power runner itself.
//!
//! - `approval`: holding a call for an approver's yes: the request, the wait for its
//!   decision, an approver's decision (`decide`: the `approve`/`deny` tools and the bench
//!   page), the refusal a no becomes, each file's digest and its re-check; for every gated
//!   tool.
//! - `boot`: driving a leased board to a state (`boot_board`): what it shows, the plan,
//!   each step (power through `crate::power_run`, waits for a USB device or a console prompt).
//! - `command`: running an allowlisted command (`execute_command`): the call checked on
//!   one snapshot, its slot and locks, the run in the foreground or as a job, a call held
//!   for an approval and checked again once approved.
//! - `flash`: flashing a leased board as a call (`flash_board`): the request checked
//!   against the policy once, files opened beneath the roots, the slot and board taken, the
//!   call held for an approval (each file hashed once) and checked again, the flash run,
//!   audited and ended as a job.
//! - `job`: ending a job, the one way every job ends (audit line, metrics).
//! - `lease`: taking a lease, the one place a lease request is built: `lease::board`, a
//!   board by name or by match (`lock_board`, the labgrid bridge's holds), match requests
//!   queued in arrival order; `lease::key`, a device or a lock key (`lock_device`).
//! - `plan`: running a test plan on a leased board (`run_test_plan`): the plan checked,
//!   the board taken as `board_run` takes it, each step run at its shell as a job with the
//!   console watched for faults, the verdicts audited under the job's id, a JUnit report.
//! - `shell_line`: one command line at a leased board's shell, the probe, login and
//!   framed run that `board_run` and a test plan's steps share.
//! - `power`: `power::switch`, a board switched under its caller's lease (`power_board`,
//!   the labgrid power port), through the one power runner (`crate::power_run`, below the
//!   use cases: the flash's orchestration runs it too); `power::on_release`, a board
//!   switched to its `on_release` state when a lease ends.
//! - `unlock`: ending a lease by its id: the holder's own, or anyone's by an `admin`
//!   client (`unlock_device`, `gatecmd leases end`, the bench page's release).
//! - `take`: taking a leased board (lookup, lease check and key, once, on one
//!   configuration snapshot) for `board_run`, `uboot_run`, `boot_board` and `flash_board`;
//!   with the client's command slot first (`take_with_slot`) for the job-backed calls,
//!   `flash_board` and `run_test_plan`.

pub mod approval;
pub mod boot;
pub mod command;
pub mod flash;
pub mod job;
pub mod lease;
pub mod plan;
pub mod power;
pub mod shell_line;
pub mod take;
pub mod unlock;
