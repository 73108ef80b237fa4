//! A board's power, as a call: `switch`, the `power_board` call (a leased board switched
//! off, on, or off-wait-on under the caller's lease, taken for the whole action), through
//! the one power runner, `crate::power_run`; `on_release`, a board returned to its
//! `on_release` state when a lease on it ends.

pub mod on_release;
pub mod switch;
