//! `boards[].power`: a board's power switch, one file per backend behind the [`Backend`]
//! trait (boardswarm's shape).
//!
//! A backend's file holds everything about it: its raw YAML form, its checks (errors with
//! file, line and field through the validator), the exec [`Spec`] that switches the board
//! on or off (run through the executor like any command), and what `gatecmd check` prints.
//! The list below is the one place that names them; [`PowerConfig`] and the raw `power:`
//! section are generated from it (`list.rs`).
//!
//! # Layout
//!
//! - `backend`: the [`Backend`] trait, and the [`Check`] and [`Context`] a backend is given.
//! - `list`: the `backends!` macro, what the list becomes.
//! - `uhubctl`: a hub port switched by uhubctl.
//! - `commands`: two `commands:` entries, on and off; also the `maskrom` action's checks.
//! - `pdudaemon`: an outlet of a PDU that pdudaemon drives, through its `pduclient`.
//! - `spec`: the command a board's power action runs, from the configuration in force.
//!
//! # Adding a backend
//!
//! Write `<name>.rs` implementing [`Backend`], add its `pub mod` line and its entry in
//! `backends!` below (its keys under `power:` and what they hold), and its row in
//! docs/BOARDS.md's table of power backends. `pdudaemon.rs` was added that way.

mod backend;
mod list;
mod spec;

// The backends: public, so their types are reached as `power::uhubctl::Uhubctl`.
pub mod commands;
pub mod pdudaemon;
pub mod uhubctl;

use crate::exec::Spec;
use list::backends;

pub(crate) use backend::Report;
pub use backend::{Backend, Check, Context, SpecError};
pub(crate) use commands::check_action;
pub use commands::{PowerAction, Recovery};
pub use spec::{action_spec, switch_spec};

backends! {
    /// `uhubctl -l HUB -p PORT -a on|off`.
    uhubctl::Uhubctl { uhubctl: uhubctl::Raw },
    /// Named `commands:` entries, with arguments their patterns accept.
    commands::Commands { on: commands::RawAction, off: commands::RawAction },
    /// `pduclient --daemon HOST --hostname PDU --port N --command on|off`.
    pdudaemon::Pdudaemon { pdudaemon: pdudaemon::Raw },
}

#[cfg(test)]
mod tests;
