//! A board's power, as a call: `switch`, the `power_board` call (a leased board switched
//! off, on, or off-wait-on under the caller's lease, taken for the whole action), through
//! the one power runner, `crate::power_run`.

pub mod switch;
