//! `execute_command`, by responsibility: [`interface`] (arguments and result), [`prepare`]
//! (policy and typed refusals: nothing has run), [`run`] (locks → spawn → outcome) and
//! [`render`] (text for people); [`device_left`] tells whether the device left mid-run.

pub mod device_left;
pub mod interface;
pub mod prepare;
pub mod render;
pub mod run;

pub use interface::{ExecuteRequest, ExecuteResult};
pub use run::run;
