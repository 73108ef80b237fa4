//! `boot_board`'s plan: which steps take a board from where it is to the state asked for,
//! with what its configuration offers — or what is missing from that configuration. Pure:
//! the tool (gatecmd-mcp's `boot_board`) looks at the board, asks for a plan, and runs
//! each step as a normal gatecmd action.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::config::BoardConfig;
use gatecmd_devices::RockchipMode;

/// A state `boot_board` drives a board to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    /// The boot ROM's USB device (rockusb, MaskROM mode) at the board's usb port.
    Maskrom,
    /// The board's recovery or flashing mode, any family (`power.recovery`; a Rockchip's
    /// `power.maskrom`): the family and mode it names enumerate at the board's usb port.
    Recovery,
    /// U-Boot's prompt on the console, autoboot stopped.
    Uboot,
    /// A login or shell prompt on the console (board_run logs in).
    Shell,
    /// Power off.
    Off,
}

impl Target {
    pub fn as_str(self) -> &'static str {
        match self {
            Target::Maskrom => "maskrom",
            Target::Recovery => "recovery",
            Target::Uboot => "uboot",
            Target::Shell => "shell",
            Target::Off => "off",
        }
    }
}

/// One action of a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The power switch's off action.
    PowerOff,
    /// The power switch's on action.
    PowerOn,
    /// `power.maskrom`: the MaskROM button held, the board reset.
    Maskrom,
    /// Wait for the rockusb device in MaskROM mode at the board's usb port.
    AwaitMaskrom,
    /// The recovery action (`power.recovery`, or `power.maskrom`).
    Recovery,
    /// Wait for the recovery's family and mode at the board's usb port.
    AwaitRecovery,
    /// Watch the boot log, send the interrupt at the autoboot countdown, await U-Boot's prompt.
    StopAutoboot,
    /// Wait for a login or shell prompt.
    AwaitShell,
}

/// What the board looks like before the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Now {
    /// The rockusb device at the board's usb port, and its mode.
    pub rockusb: Option<RockchipMode>,
    /// The family and mode of the device at the board's usb port, if any.
    pub device: Option<(&'static str, Option<&'static str>)>,
    /// The console answered a newline with U-Boot's prompt.
    pub at_uboot: bool,
    /// The console answered a newline with a login or shell prompt.
    pub at_shell: bool,
}

/// What a board's configuration lacks to reach a target.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "board {board:?} cannot be brought to {target} with its configuration: it needs {}",
    needs.join(" and ")
)]
pub struct Unreachable {
    pub board: String,
    pub target: &'static str,
    pub needs: Vec<&'static str>,
}

/// The steps from `now` to `target`, or what the board's configuration lacks for it.
pub fn plan(board: &BoardConfig, target: Target, now: Now) -> Result<Vec<Step>, Unreachable> {
    let power = board.power.is_some();
    let console = board.console.is_some();
    let mut missing = Vec::new();
    let need = |ok: bool, what: &'static str, missing: &mut Vec<&'static str>| {
        if !ok {
            missing.push(what);
        }
    };
    let steps = match target {
        Target::Off => {
            need(
                power,
                "a power switch (power: uhubctl, or on/off commands)",
                &mut missing,
            );
            vec![Step::PowerOff]
        }
        Target::Maskrom if now.rockusb == Some(RockchipMode::MaskRom) => vec![],
        Target::Maskrom => {
            need(
                board.maskrom.is_some(),
                "power.maskrom (a command that holds the MaskROM button and resets the board)",
                &mut missing,
            );
            vec![Step::Maskrom, Step::AwaitMaskrom]
        }
        Target::Recovery => match board.recovery() {
            Some(r)
                if now.device.is_some_and(|(family, mode)| {
                    family == r.family && r.mode.is_none_or(|m| mode == Some(m))
                }) =>
            {
                vec![]
            }
            Some(_) => vec![Step::Recovery, Step::AwaitRecovery],
            None => {
                need(
                    false,
                    "power.recovery (a command that sends the board to its recovery or flashing \
                     mode, and the family and mode that then enumerate) or power.maskrom",
                    &mut missing,
                );
                vec![]
            }
        },
        Target::Uboot if now.at_uboot && now.rockusb.is_none() => vec![],
        Target::Uboot => {
            need(console, "a console (console: port or path)", &mut missing);
            need(
                power,
                "a power switch to reset the board into U-Boot",
                &mut missing,
            );
            vec![Step::PowerOff, Step::PowerOn, Step::StopAutoboot]
        }
        // A rockusb device at the port means the boot ROM or a loader runs, whatever the
        // console shows: only a reset boots the system.
        Target::Shell if now.at_shell && now.rockusb.is_none() => vec![],
        Target::Shell => {
            need(console, "a console (console: port or path)", &mut missing);
            need(power, "a power switch to boot the board", &mut missing);
            vec![Step::PowerOff, Step::PowerOn, Step::AwaitShell]
        }
    };
    if missing.is_empty() {
        Ok(steps)
    } else {
        Err(Unreachable {
            board: board.name.clone(),
            target: target.as_str(),
            needs: missing,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::power::commands::Commands;
    use crate::config::{ConsoleConfig, PowerAction, PowerConfig, Recovery};

    fn board(console: bool, power: bool, maskrom: bool) -> BoardConfig {
        let action = |a: &str| PowerAction {
            command: "vboard".into(),
            args: vec![a.into()],
        };
        BoardConfig {
            name: "b".into(),
            tags: Default::default(),
            usb: "1-1".parse().expect("a port path"),
            console: console.then(|| ConsoleConfig {
                port: Some("2-1".into()),
                path: None,
                baud: 115200,
                buffer_bytes: 4096,
            }),
            power: power.then(|| {
                PowerConfig::Commands(Commands {
                    on: action("on"),
                    off: action("off"),
                })
            }),
            maskrom: maskrom.then(|| action("maskrom")),
            recovery_action: None,
            shell: Default::default(),
            on_release: Default::default(),
            loaders: None,
            usbplug: None,
        }
    }

    #[test]
    fn each_target_has_its_steps_and_names_what_is_missing() {
        let full = board(true, true, true);
        let now = Now::default();
        assert_eq!(plan(&full, Target::Off, now), Ok(vec![Step::PowerOff]));
        assert_eq!(
            plan(&full, Target::Maskrom, now),
            Ok(vec![Step::Maskrom, Step::AwaitMaskrom])
        );
        assert_eq!(
            plan(&full, Target::Shell, now),
            Ok(vec![Step::PowerOff, Step::PowerOn, Step::AwaitShell])
        );
        let e = plan(&board(true, true, false), Target::Maskrom, now).expect_err("no maskrom");
        assert!(e.to_string().contains("power.maskrom"), "{e}");
        let e = plan(&board(false, false, false), Target::Uboot, now).expect_err("bare");
        let e = e.to_string();
        assert!(e.contains("a console") && e.contains("power switch"), "{e}");
        assert!(plan(&board(true, false, false), Target::Off, now).is_err());
    }

    #[test]
    fn a_board_already_there_needs_nothing_unless_a_loader_runs() {
        let b = board(true, false, false);
        let maskrom = Now {
            rockusb: Some(RockchipMode::MaskRom),
            ..Now::default()
        };
        assert_eq!(plan(&b, Target::Maskrom, maskrom), Ok(vec![]));
        let shell = Now {
            at_shell: true,
            ..Now::default()
        };
        assert_eq!(plan(&b, Target::Shell, shell), Ok(vec![]));
        // A loader at the port: the console's prompt is stale, a reset is needed (and
        // this board has no power switch).
        let loader = Now {
            rockusb: Some(RockchipMode::Loader),
            at_shell: true,
            ..Now::default()
        };
        assert!(plan(&b, Target::Shell, loader).is_err());
    }

    #[test]
    fn recovery_is_any_family_s_and_maskrom_is_a_rockchip_s() {
        let now = Now::default();
        // A Rockchip's power.maskrom serves to: recovery, expecting rockusb in MaskROM.
        let rk = board(true, true, true);
        assert_eq!(
            rk.recovery().map(|r| (r.family, r.mode)),
            Some(("rockusb", Some("maskrom")))
        );
        assert_eq!(
            plan(&rk, Target::Recovery, now),
            Ok(vec![Step::Recovery, Step::AwaitRecovery])
        );
        let there = Now {
            device: Some(("rockusb", Some("maskrom"))),
            ..now
        };
        assert_eq!(plan(&rk, Target::Recovery, there), Ok(vec![]));
        // A fastboot board: its power.recovery names the family to expect, any mode.
        let mut fb = board(true, true, false);
        fb.recovery_action = Some(Recovery {
            action: PowerAction {
                command: "vboard".into(),
                args: vec!["recovery".into()],
            },
            family: "fastboot",
            mode: None,
        });
        let fastboot = Now {
            device: Some(("fastboot", Some("fastboot"))),
            ..now
        };
        assert_eq!(plan(&fb, Target::Recovery, fastboot), Ok(vec![]));
        assert_eq!(
            plan(&fb, Target::Recovery, there),
            Ok(vec![Step::Recovery, Step::AwaitRecovery]),
            "a rockusb device at a fastboot board's port is not its recovery"
        );
        let e = plan(&board(true, true, false), Target::Recovery, now).expect_err("none");
        assert!(e.to_string().contains("power.recovery"), "{e}");
    }
}
