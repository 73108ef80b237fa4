//! `execute_command`, by responsibility: [`interface`] (arguments and result), [`prepare`]
//! (policy and typed refusals: nothing has run), [`run`] (locks → spawn → outcome) and
//! [`render`] (text for people).

mod background;
mod held;
pub mod interface;
pub mod job_calls;
mod outcome;
pub mod prepare;
pub mod render;
pub mod run;

pub use interface::{ExecuteRequest, ExecuteResult};
pub use run::run;
