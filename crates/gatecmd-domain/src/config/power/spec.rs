//! The command a board's power action runs, from the configuration in force: what
//! `power_board`, `boot_board` and the labgrid power port hand to the executor.

use super::super::boards::BoardConfig;
use super::super::schema::Config;
use super::PowerConfig;
use super::backend::{Context, SpecError};
use super::commands::{self, PowerAction};
use crate::exec::Spec;

/// What a power command needs of `config`.
fn context(config: &Config) -> Context<'_> {
    Context {
        commands: &config.commands,
        file_roots: &config.file_roots,
        allow_hardlinked_inputs: config.allow_hardlinked_inputs,
    }
}

/// The command that switches `board` on (`on`) or off.
pub fn switch_spec(config: &Config, board: &BoardConfig, on: bool) -> Result<Spec, SpecError> {
    match &board.power {
        Some(p) => p.spec(&context(config), on),
        None => Err(SpecError::NoSwitch {
            board: board.name.clone(),
            switches: PowerConfig::NAMES.join(", "),
        }),
    }
}

/// The command of one configured action (`power.maskrom`), checked again by the sanitizer.
pub fn action_spec(config: &Config, action: &PowerAction) -> Result<Spec, SpecError> {
    commands::action_spec(&context(config), action)
}
