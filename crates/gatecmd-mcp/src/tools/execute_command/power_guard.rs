//! A board's power command belongs to the board (issue 22): `execute_command` refuses it
//! before anything else, dry runs included, so no client (the board's holder neither) cuts
//! a board's power around its lease or around `power_board`'s bookkeeping.

use gatecmd_domain::config::{Config, power_boards_of};

/// The command is some board's `power.on` or `power.off`.
#[derive(Debug, thiserror::Error)]
#[error(
    "command {name:?} switches the power of board(s) {boards}: only power_board runs it, under the board's lease (lock_board, then power_board)"
)]
pub struct PowerCommand {
    pub name: String,
    pub boards: String,
}

/// `Err` when `command` is some board's power command.
pub fn check(config: &Config, command: &str) -> Result<(), PowerCommand> {
    let owners = power_boards_of(&config.boards, command);
    if owners.is_empty() {
        return Ok(());
    }
    Err(PowerCommand {
        name: command.to_string(),
        boards: owners.join(", "),
    })
}
