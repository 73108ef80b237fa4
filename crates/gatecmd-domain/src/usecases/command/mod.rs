//! Running an allowlisted command, written once below the surfaces that offer it (the
//! `execute_command` tool today): the call as asked, every check that can refuse it on one
//! snapshot, the client's slot and the locks, the run in the foreground or as a job, and a
//! call held for an approver's yes and checked again; it reports what ran ([`Report`]). A
//! surface supplies its request, its answer ([`Answer`]: a job's stored answer rendered,
//! its words for a refusal) and its progress reporter ([`Reporter`]); nothing here names a
//! tool or an MCP type.
//!
//! - `ask`: the call as asked ([`Ask`]), and the device id parsed as it is read.
//! - `snapshot`: what one call reads of the shared state, each read once.
//! - `prepare`: every check that can refuse the call before anything runs, on the
//!   snapshot ([`Prepared`]); `prepare_tests.rs` its unit tests.
//! - `refused`: why a call was refused ([`Refused`], data; the surface words it).
//! - `hold`: the call ([`Call`]: who, the refusal record), the client's slot and the locks,
//!   and the run's beginning under them ([`Begun`]).
//! - `device_left`: whether the device a command ran on left the bus meanwhile.
//! - `dry_run`: what a dry run shows beyond the checks: the view, the locks now.
//! - `report`: what a call ran and how it ended ([`Report`]), a surface's answer's core.
//! - `run`: the run in the foreground (`cancel: kill`, `cancel: never`).
//! - `job`: the run as a job (`background`, a task, `cancel: detach`) and its end.
//! - `approval`: a call an `approvals:` rule holds: its waiting job and request, the wait
//!   for the decision, and the run once approved, bound to what was approved.

pub mod approval;
pub mod ask;
pub mod device_left;
pub mod dry_run;
pub mod hold;
pub mod job;
pub mod prepare;
pub mod refused;
pub mod report;
pub mod run;
pub mod snapshot;

pub use ask::{Ask, DeviceArg};
pub use device_left::{Left, Watch};
pub use dry_run::{DryRun, KeyNow, dry_run};
pub use hold::{Begun, Call, Held, Reporter, start};
pub use job::{Answer, launch, origin};
pub use prepare::{Prepared, WrongMode, prepare, shell_words};
pub use refused::Refused;
pub use report::Report;
pub use run::{Finished, run_foreground};
pub use snapshot::Snapshot;
