//! `power: {on: {command, args}, off: {command, args}}`: two `commands:` entries switch the
//! board (a relay, a smart plug, the vboard's `power`), each with arguments one of its
//! patterns accepts, checked by the sanitizer at load and again at each call. The same
//! checks serve `power.maskrom`, which may stand beside any switch.

use serde::Deserialize;

use super::super::host::binary_problem;
use super::backend::{Backend, Check, Context, SpecError};
use crate::exec::Spec;
use gatecmd_core::sanitizer::{self, Args, FileRules};

/// One action as written: `{command, args}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAction {
    command: String,
    #[serde(default)]
    args: Args,
}

/// `power.recovery` as written: the action, and what must then enumerate at the board's
/// usb port (a family of the families table, and optionally its mode).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRecovery {
    command: String,
    #[serde(default)]
    args: Args,
    family: String,
    mode: Option<String>,
}

impl RawRecovery {
    /// The action part, checked like `on`/`off`; the family and mode as written.
    pub(crate) fn split(self) -> (RawAction, String, Option<String>) {
        (
            RawAction {
                command: self.command,
                args: self.args,
            },
            self.family,
            self.mode,
        )
    }
}

/// A board's recovery action (`power.recovery`, or `power.maskrom` for a Rockchip): the
/// command that sends it to its recovery or flashing mode, and the family and mode that
/// must then enumerate at its usb port (`boot_board {to: recovery}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    pub action: PowerAction,
    pub family: &'static str,
    /// `None`: any mode of the family.
    pub mode: Option<&'static str>,
}

/// One power action: a configured command and its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PowerAction {
    /// A `commands:` entry's name.
    pub command: String,
    /// Arguments one of its patterns accepts (checked at load).
    pub args: Vec<String>,
}

/// Named `commands:` entries that switch the board on and off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commands {
    /// Switches the board on.
    pub on: PowerAction,
    /// Switches the board off.
    pub off: PowerAction,
}

impl Backend for Commands {
    const NAME: &'static str = "commands";
    const FORM: &'static str = "both on: {command, args} and off: {command, args}";
    type Raw = (RawAction, RawAction);

    fn check((on, off): Self::Raw, c: &mut Check<'_>) -> Option<Self> {
        let on = check_action(c, "on", on);
        let off = check_action(c, "off", off);
        Some(Commands { on: on?, off: off? })
    }

    fn spec(&self, ctx: &Context<'_>, on: bool) -> Result<Spec, SpecError> {
        action_spec(ctx, if on { &self.on } else { &self.off })
    }

    fn describe(&self) -> String {
        format!(
            "on: {} {}, off: {} {}",
            self.on.command,
            self.on.args.join(" "),
            self.off.command,
            self.off.args.join(" ")
        )
    }

    fn commands(&self) -> Vec<&str> {
        vec![self.on.command.as_str(), self.off.command.as_str()]
    }
}

/// Checks the action written under `which` (`on`, `off`, `maskrom`): a configured command
/// whose patterns accept its arguments.
pub(crate) fn check_action(c: &mut Check<'_>, which: &str, a: RawAction) -> Option<PowerAction> {
    let Some(command) = c.commands.iter().find(|k| k.name == a.command) else {
        let known: Vec<_> = c.commands.iter().map(|k| k.name.as_str()).collect();
        let known = if known.is_empty() {
            "none".to_string()
        } else {
            known.join(", ")
        };
        let e = format!("unknown command {:?}; defined commands: {known}", a.command);
        c.error(&format!("{which}.command"), e);
        return None;
    };
    let args = a.args.into_vec();
    if let Err(refused) = sanitizer::check(command, &args, c.file_roots) {
        let e = format!(
            "{:?} with args {args:?} matches none of its patterns: {refused}",
            a.command
        );
        c.error(&format!("{which}.args"), e);
        return None;
    }
    Some(PowerAction {
        command: a.command,
        args,
    })
}

/// The spec of one configured action, checked again by the sanitizer: files, binaries and
/// the configuration change after load.
pub(crate) fn action_spec(ctx: &Context<'_>, action: &PowerAction) -> Result<Spec, SpecError> {
    let Some(command) = ctx.commands.iter().find(|c| c.name == action.command) else {
        return Err(SpecError::CommandGone {
            command: action.command.clone(),
        });
    };
    if let Some(why) = binary_problem(&command.binary) {
        return Err(SpecError::CommandUnavailable {
            command: command.name.clone(),
            why,
        });
    }
    let rules = FileRules {
        roots: ctx.file_roots,
        allow_hardlinked_inputs: ctx.allow_hardlinked_inputs,
    };
    let approved = sanitizer::check_with(command, &action.args, rules)?;
    let timeout = command
        .patterns
        .get(approved.pattern_index)
        .and_then(|p| p.timeout)
        .unwrap_or(command.timeout);
    Ok(Spec {
        binary: command.binary.clone(),
        args: approved.args,
        env: command.env.clone(),
        timeout,
        isolation: None,
        inherit: approved.files.into_iter().map(|f| f.fd).collect(),
        live_output: false,
    })
}
