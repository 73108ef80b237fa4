//! `execute_command`, by responsibility: [`interface`] (arguments and result), [`prepare`]
//! (policy and typed refusals: nothing has run), [`run`] (locks → spawn → outcome) and
//! [`render`] (text for people).

mod background;
pub mod interface;
pub mod job_calls;
pub mod prepare;
pub mod render;
pub mod run;

pub use interface::{ExecuteRequest, ExecuteResult};
pub use run::run;
