//! `boards:`: names, ports, consoles and power switches, checked against each other and
//! against `commands:` (a power action must be a command line the sanitizer accepts; each
//! power backend checks its own keys, `power/`).

use std::path::PathBuf;

use gatecmd_devices::DeviceId;

use super::super::boards::{
    BoardConfig, ConsoleConfig, DEFAULT_CONSOLE_BUFFER_BYTES, MAX_CONSOLE_BUFFER_BYTES,
    MIN_CONSOLE_BUFFER_BYTES, OnRelease, STANDARD_BAUDS, UsbplugPair,
};
use super::super::command::CommandConfig;
use super::super::power::commands::RawRecovery;
use super::super::power::{Check, PowerAction, PowerConfig, Recovery, Report, check_action};
use super::super::raw::{RawBoard, RawConsole, RawUsbplug};
use super::super::values::{check_name, parse_abs, port_error, valid_port_path};
use super::validator::Validator;
use gatecmd_devices::families;

/// The power backends record their problems here, located like every other field.
impl Report for Validator {
    fn error(&mut self, field: &str, message: String) {
        let at = self.at(field);
        self.err(at, field.to_string(), message);
    }
}

impl Validator {
    /// `usbplug: {ddr, usbplug}`: two absolute paths. Whether `flash.loaders` allows them
    /// is asked when a flash would send them (as for a loader the call names).
    fn usbplug(&mut self, i: usize, u: RawUsbplug) -> Option<UsbplugPair> {
        let mut path = |key: &str, v: &str| {
            let field = format!("boards[{i}].usbplug.{key}");
            let at = self.at(&field);
            self.value(parse_abs(v), at, field)
        };
        let ddr = path("ddr", &u.ddr);
        let usbplug = path("usbplug", &u.usbplug);
        Some(UsbplugPair {
            ddr: ddr?,
            usbplug: usbplug?,
        })
    }

    /// `power.recovery`: its action checked like `on`/`off`, its family and mode against
    /// the families table. Beside `power.maskrom` it is one too many (maskrom is the
    /// Rockchip's recovery).
    fn recovery(
        &mut self,
        power_field: &str,
        raw: RawRecovery,
        maskrom: Option<&Option<PowerAction>>,
        commands: &[CommandConfig],
        file_roots: &[PathBuf],
    ) -> Option<Option<Recovery>> {
        let (action, family, mode) = raw.split();
        let field = format!("{power_field}.recovery");
        if matches!(maskrom, Some(Some(_))) {
            self.error(
                &field,
                "give power.maskrom or power.recovery, not both: maskrom is a Rockchip's \
                 recovery (rockusb in MaskROM mode must enumerate)"
                    .into(),
            );
            return None;
        }
        let family = families::family_named(&family);
        if family.is_none() {
            self.error(
                &format!("{field}.family"),
                format!(
                    "not a family of the families table (docs/FAMILIES.md); families: {}",
                    families::families().join(", ")
                ),
            );
        }
        let mode = match mode {
            None => Some(None),
            Some(m) => match families::mode_named(&m) {
                Some(m) => Some(Some(m)),
                None => {
                    self.error(
                        &format!("{field}.mode"),
                        format!(
                            "{m:?} is not a mode of the families table; modes: {}",
                            families::modes().join(", ")
                        ),
                    );
                    None
                }
            },
        };
        let mut c = Check::new(self, power_field.to_string(), commands, file_roots);
        let action = check_action(&mut c, "recovery", action)?;
        Some(Some(Recovery {
            action,
            family: family?,
            mode: mode?,
        }))
    }

    pub(super) fn boards(
        &mut self,
        raw: Vec<RawBoard>,
        commands: &[CommandConfig],
        file_roots: &[PathBuf],
    ) -> Vec<BoardConfig> {
        let mut out: Vec<BoardConfig> = Vec::new();
        for (i, mut b) in raw.into_iter().enumerate() {
            let field = |f: &str| format!("boards[{i}].{f}");
            let at = self.at(&field("name"));
            let mut ok = self.value(check_name(&b.name), at, field("name")).is_some();
            if out.iter().any(|o| o.name == b.name) {
                let at = self.at(&field("name"));
                self.err(
                    at,
                    field("name"),
                    format!(
                        "board {:?} is defined twice; give each board a unique name",
                        b.name
                    ),
                );
                ok = false;
            }
            let at = self.at(&field("usb"));
            // Parsed once here: every user of the board holds a valid port path.
            let usb = match b.usb.parse::<DeviceId>() {
                Ok(id) if valid_port_path(&b.usb) => Some(id),
                _ => {
                    self.err(at, field("usb"), port_error("usb", &b.usb));
                    None
                }
            };
            if let Some(other) = usb.as_ref().and_then(|u| out.iter().find(|o| &o.usb == u)) {
                self.err(
                    at,
                    field("usb"),
                    format!(
                        "board {:?} is on usb port {:?}, which board {:?} already uses: one port is one board",
                        b.name, b.usb, other.name
                    ),
                );
                ok = false;
            }
            let shell = match &b.console {
                None => Some(Default::default()),
                Some(c) => self.shell(i, c),
            };
            let power_field = format!("boards[{i}].power");
            let maskrom = match b.power.as_mut().and_then(|p| p.maskrom.take()) {
                None => Some(None),
                Some(a) => {
                    let mut c = Check::new(self, power_field.clone(), commands, file_roots);
                    check_action(&mut c, "maskrom", a).map(Some)
                }
            };
            let recovery = match b.power.as_mut().and_then(|p| p.recovery.take()) {
                None => Some(None),
                Some(r) => self.recovery(&power_field, r, maskrom.as_ref(), commands, file_roots),
            };
            let console = match b.console {
                None => Some(None),
                Some(c) => self.console(i, &b.usb, c).map(Some),
            };
            let power = match b.power {
                None => Some(None),
                Some(p) => {
                    let mut c = Check::new(self, power_field, commands, file_roots);
                    PowerConfig::check(p, &mut c).map(Some)
                }
            };
            let on_release = b.on_release;
            let needs = match on_release {
                OnRelease::Keep => None,
                OnRelease::Off if power.as_ref().is_some_and(|p| p.is_none()) => {
                    Some("`off` needs `power:` (the board's power switch)")
                }
                OnRelease::Maskrom if maskrom.as_ref().is_some_and(|m| m.is_none()) => {
                    Some("`maskrom` needs `power.maskrom` (the command that puts it into MaskROM)")
                }
                _ => None,
            };
            for (k, p) in b.loaders.iter().flatten().enumerate() {
                if !p.is_absolute() {
                    let f = field(&format!("loaders[{k}]"));
                    let at = self.at(&f);
                    self.err(
                        at,
                        f,
                        format!("{} is not an absolute path; write the loader file's (or its directory's) absolute path", p.display()),
                    );
                    ok = false;
                }
            }
            if let Some(why) = needs {
                let at = self.at(&field("on_release"));
                self.err(at, field("on_release"), why.into());
                ok = false;
            }
            let usbplug = match b.usbplug.take() {
                None => Some(None),
                Some(u) => self.usbplug(i, u).map(Some),
            };
            if let (
                true,
                Some(usb),
                Some(console),
                Some(power),
                Some(shell),
                Some(maskrom),
                Some(recovery_action),
                Some(usbplug),
            ) = (ok, usb, console, power, shell, maskrom, recovery, usbplug)
            {
                out.push(BoardConfig {
                    name: b.name,
                    tags: b.tags,
                    usb,
                    console,
                    power,
                    maskrom,
                    recovery_action,
                    shell,
                    on_release,
                    loaders: b.loaders,
                    usbplug,
                });
            }
        }
        // Checked once every board is known: board 1's console on board 2's usb port.
        for (i, b) in out.iter().enumerate() {
            let Some(port) = b.console.as_ref().and_then(|c| c.port.as_ref()) else {
                continue;
            };
            if let Some(other) = out
                .iter()
                .find(|o| o.name != b.name && o.usb.as_str() == port)
            {
                let at = self.at(&format!("boards[{i}].console.port"));
                self.err(
                    at,
                    format!("boards[{i}].console.port"),
                    format!(
                        "console port {port:?} is the usb port of board {:?}; a serial adapter needs a port of its own",
                        other.name
                    ),
                );
            }
        }
        out
    }

    fn console(&mut self, i: usize, usb: &str, c: RawConsole) -> Option<ConsoleConfig> {
        let field = |f: &str| format!("boards[{i}].console.{f}");
        let at = self.at(&format!("boards[{i}].console"));
        let mut ok = true;
        let path = match (&c.port, &c.path) {
            (Some(_), Some(_)) | (None, None) => {
                self.err(
                    at,
                    format!("boards[{i}].console"),
                    "give exactly one of port (the adapter's USB port path, e.g. \"1-3\") and path (a tty, e.g. /dev/serial/by-path/...)".into(),
                );
                return None;
            }
            (Some(port), None) => {
                if !valid_port_path(port) {
                    self.err(
                        self.at(&field("port")),
                        field("port"),
                        port_error("console port", port),
                    );
                    ok = false;
                } else if port == usb {
                    self.err(
                        self.at(&field("port")),
                        field("port"),
                        format!(
                            "console port {port:?} is the board's own usb port; the serial adapter enumerates on a port of its own"
                        ),
                    );
                    ok = false;
                }
                None
            }
            (None, Some(p)) => self.value(parse_abs(p), self.at(&field("path")), field("path")),
        };
        if !STANDARD_BAUDS.contains(&c.baud) {
            self.err(
                self.at(&field("baud")),
                field("baud"),
                format!(
                    "baud rate {} is not one a tty can be set to; use one of {}",
                    c.baud,
                    STANDARD_BAUDS
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
            ok = false;
        }
        if c.path.is_some() && path.is_none() {
            ok = false;
        }
        let buffer_bytes = match c.buffer_bytes {
            None => DEFAULT_CONSOLE_BUFFER_BYTES,
            Some(n) => match usize::try_from(n) {
                Ok(n) if (MIN_CONSOLE_BUFFER_BYTES..=MAX_CONSOLE_BUFFER_BYTES).contains(&n) => n,
                _ => {
                    let at = self.at(&field("buffer_bytes"));
                    self.err(
                        at,
                        field("buffer_bytes"),
                        format!(
                            "buffer_bytes {n} is outside {MIN_CONSOLE_BUFFER_BYTES}..={MAX_CONSOLE_BUFFER_BYTES} \
                             (4 KiB to 64 MiB, in bytes); leave it out for the default {DEFAULT_CONSOLE_BUFFER_BYTES} (1 MiB)"
                        ),
                    );
                    ok = false;
                    0
                }
            },
        };
        ok.then_some(ConsoleConfig {
            port: c.port,
            path,
            baud: c.baud,
            buffer_bytes,
        })
    }

    /// A client's `commands:` list may not name a power action's command: only
    /// `power_board` runs it (under the board's lease), so listing it would promise the
    /// client something `execute_command` always refuses.
    pub(super) fn power_commands_unlisted(
        &mut self,
        clients: &[super::super::schema::ClientConfig],
        boards: &[BoardConfig],
    ) {
        for (ci, c) in clients.iter().enumerate() {
            for name in c.commands.iter().flatten() {
                let owners = super::super::boards::power_boards_of(boards, name);
                if !owners.is_empty() {
                    let field = format!("clients[{ci}].commands");
                    let at = self.at(&field);
                    self.err(
                        at,
                        field,
                        format!(
                            "{name:?} is the power command of board(s) {}: only power_board runs it, \
                             under the board's lease; remove it from this list",
                            owners.join(", ")
                        ),
                    );
                }
            }
        }
    }
}
