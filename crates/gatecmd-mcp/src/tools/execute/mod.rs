//! `execute_command`, by responsibility: [`interface`] (arguments and result), [`prepare`]
//! (policy and typed refusals on one snapshot (`snapshot.rs`) of the configuration and the devices:
//! nothing has run), [`run`] (locks → spawn → outcome) and
//! [`render`] (text for people); [`power_guard`] refuses a board's power command;
//! [`device_left`] tells whether the device left mid-run.

mod background;
pub mod device_left;
mod held;
pub mod interface;
pub mod job_calls;
mod outcome;
pub mod power_guard;
pub mod prepare;
mod rejected;
pub mod render;
pub mod run;
mod snapshot;

pub use interface::{ExecuteRequest, ExecuteResult};
pub use run::run;
