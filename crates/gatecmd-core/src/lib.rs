//! gatecmd's core: what every other layer stands on, importing no other gatecmd crate.

pub mod beneath;
pub mod identity;
pub mod metrics;
pub mod output;
pub mod refusal;
pub mod sanitizer;
pub mod throttle;
