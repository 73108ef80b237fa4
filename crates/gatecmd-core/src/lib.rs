//! gatecmd's core: what every other layer stands on, importing no other gatecmd crate.
//!
//! # Layout
//!
//! - `beneath`: paths resolved beneath a file root that cannot leave it (directory file
//!   descriptors, one component at a time), for staging and command file arguments.
//! - `events`: a broadcast whose ring holds pointers to the events (a large event costs
//!   the ring 8 bytes a slot), for the registry's and the lock table's change streams.
//! - `identity`: who is calling, once the transport authenticated them.
//! - `metrics`: Prometheus metrics, the recording side: the counters and histograms and
//!   the one call per event that updates them.
//! - `named`: `named_enum!`, an enum of words declared once with their stable names, its
//!   list of every variant and its names derived from that one list.
//! - `output`: a child's terminal output turned into text an agent can read.
//! - `refusal`: why a tool said no, as a value (a stable reason and the message), and the
//!   refusals several tool families share (`refusal::common`).
//! - `sanitizer`: the argument policy: which argument lists may reach a child, and how
//!   file arguments are opened.
//! - `throttle`: the "at most one per interval, the last state always sent" rule.

pub mod beneath;
pub mod events;
pub mod identity;
pub mod metrics;
pub mod named;
pub mod output;
pub mod refusal;
pub mod sanitizer;
pub mod throttle;
