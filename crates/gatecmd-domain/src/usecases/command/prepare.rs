//! Policy for a command call: every check that can refuse it before anything runs
//! (client rights, binary, sanitizer, timeout, wait, devices and their lock keys), each
//! refusal a [`Refused`]. It decides on one
//! [`Snapshot`] of the configuration and the devices and is given nothing else of the
//! shared state, so no check can read a later moment than another. Each thing it needs is
//! looked up once: the command by name, its device class, the board a call names, and the
//! device the call runs on (its id was parsed as the request was read, `DeviceArg`), which
//! what it returns carries by reference into the snapshot.

use std::time::Duration;

use gatecmd_core::identity::ClientIdentity;
use gatecmd_core::sanitizer;
use gatecmd_devices::{Device, DeviceId};

use super::ask::{Ask, DeviceArg};
use super::refused::{Refused, power_command};
use super::snapshot::Snapshot;
use crate::config::{BoardConfig, CancelPolicy, CommandConfig, Config};
use crate::exec::Spec;
use crate::locks::{LockKey, MAX_WAIT_SECS, lock_key_of};

/// A call that passed every check: what to run and what to lock.
pub struct Prepared<'a> {
    /// What every check read: the run, its refusals and its record use the same.
    pub snapshot: &'a Snapshot,
    pub command: &'a CommandConfig,
    pub keys: Vec<LockKey>,
    /// Held shared: an isolated command's board VID:PID key.
    pub shared_keys: Vec<LockKey>,
    /// The device the call runs on, when it names one (or its isolated command has one).
    pub device: Option<&'a Device>,
    /// The configured board whose usb port holds `device`, if any.
    pub board: Option<&'a BoardConfig>,
    /// Whether the command runs isolated, seeing only `device` (then always set).
    pub isolated: bool,
    pub spec: Spec,
    /// `spec.args` for people: a file argument as the path it resolved to, where the child
    /// gets `/proc/self/fd/N`.
    pub shown_args: Vec<String>,
    /// Each file argument as the path it resolved to, with the open file the child gets
    /// (what an approval hashes, docs/APPROVALS.md).
    pub files: Vec<(String, std::sync::Arc<std::os::fd::OwnedFd>)>,
    pub progress: Option<regex::Regex>,
    pub cancel: CancelPolicy,
    pub dry_run: bool,
    /// How long to queue for busy locks (at most `MAX_WAIT_SECS`).
    pub wait: Duration,
    /// Answer with a job handle once the locks are held (`background: true`).
    pub background: bool,
    /// The device is in a mode the pattern does not work in (`modes:`), as the registry
    /// showed it when the call was checked; told only if the run fails.
    pub wrong_mode: Option<WrongMode>,
}

/// A device in a mode the matched pattern does not work in, and what gets it there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrongMode {
    pub command: String,
    /// The pattern that matched, e.g. `wl {lba} {image}`.
    pub pattern: String,
    pub device: String,
    /// The mode the registry shows, e.g. `maskrom`.
    pub mode: String,
    /// The modes the pattern works in.
    pub works_in: Vec<String>,
    /// The configured board at the device's port, if any.
    pub board: Option<String>,
    /// Patterns of the same command that work in the device's mode now and send a loader
    /// (`loader_args`), e.g. `db {loader}`: the step from MaskROM to Loader.
    pub loader_steps: Vec<String>,
}

/// Every loader argument of the matched pattern must resolve to a file the board's
/// `loaders` (else `flash.loaders`) allows: the same policy as `flash_board`'s `loader`.
fn loaders_allowed(
    config: &Config,
    board: Option<&BoardConfig>,
    pattern: &crate::config::PatternConfig,
    shown: &[String],
) -> Result<(), Refused> {
    let allowed = match board {
        Some(b) => b.loaders(&config.flash),
        None => config.flash.loaders.as_deref(),
    };
    for (i, w) in pattern.pattern.words.iter().enumerate() {
        let sanitizer::Word::Slot(slot) = w else {
            continue;
        };
        let Some(real) = shown.get(i).filter(|_| pattern.loader_slots.contains(slot)) else {
            continue;
        };
        if !crate::config::loader_in(allowed, std::path::Path::new(real)) {
            return Err(Refused::LoaderNotAllowed {
                path: real.clone(),
                allowed: crate::flash::allowed_loaders_words(allowed),
            });
        }
    }
    Ok(())
}

/// The device the call runs on (named, or the one device of its class it touches), when
/// the registry shows it in a mode the matched pattern does not work in.
fn wrong_mode(
    snap: &Snapshot,
    command: &CommandConfig,
    index: usize,
    named: Option<&Device>,
    touched: &[Device],
) -> Option<WrongMode> {
    let pattern = &command.patterns[index];
    let dev = named.or(match touched {
        [one] => Some(one),
        _ => None,
    })?;
    let mode = dev.mode?;
    if pattern.works_in(Some(mode)) {
        return None;
    }
    let loader_steps = (command.patterns.iter())
        .filter(|p| !p.loader_slots.is_empty() && p.works_in(Some(mode)) && !p.modes.is_empty())
        .map(|p| p.pattern.to_string())
        .collect();
    Some(WrongMode {
        command: command.name.clone(),
        pattern: pattern.pattern.to_string(),
        device: dev.id.to_string(),
        mode: mode.to_string(),
        works_in: pattern.modes.clone(),
        board: snap
            .config
            .board_at(dev.id.as_str())
            .map(|b| b.name.clone()),
        loader_steps,
    })
}

impl Prepared<'_> {
    /// The argv for people (results, logs, the audit record): file arguments as the paths
    /// they resolved to.
    pub fn argv(&self) -> Vec<String> {
        std::iter::once(self.spec.binary.display().to_string())
            .chain(self.shown_args.iter().cloned())
            .collect()
    }

    /// The argv exactly as the child receives it.
    pub fn passed_argv(&self) -> Vec<String> {
        std::iter::once(self.spec.binary.display().to_string())
            .chain(self.spec.args.iter().cloned())
            .collect()
    }

    /// The board an isolated command runs on (its view holds only this one).
    pub fn isolate(&self) -> Option<&DeviceId> {
        self.device.filter(|_| self.isolated).map(|d| &d.id)
    }

    /// The device the call runs on, as its id.
    pub fn device_id(&self) -> Option<String> {
        self.device.map(|d| d.id.to_string())
    }

    /// The keys it takes exclusively, as shown.
    pub fn lock_keys(&self) -> Vec<String> {
        self.keys.iter().map(|k| k.to_string()).collect()
    }
}

/// Argv as one line, quoting words with spaces (for display only; nothing is run through a
/// shell).
pub fn shell_words(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            if a.contains(' ') || a.is_empty() {
                format!("'{a}'")
            } else {
                a.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Every check that can refuse the call, in order; nothing has run when this fails.
pub fn prepare<'a>(
    snap: &'a Snapshot,
    who: &ClientIdentity,
    req: Ask,
) -> Result<Prepared<'a>, Refused> {
    let config: &'a Config = &snap.config;
    let named = config.command(&req.command);
    let Some(command) = named.filter(|c| who.may_run(&c.name)) else {
        return Err(Refused::UnknownCommand {
            configured: named.is_some(),
            name: req.command,
            visible: config
                .commands
                .iter()
                .filter(|c| who.may_run(&c.name))
                .map(|c| c.name.clone())
                .collect(),
        });
    };
    power_command(config, &command.name)?;
    // Checked now, not at load: a tool may be installed (or removed) while the server runs.
    if let Some(why) = crate::config::binary_problem(&command.binary) {
        return Err(Refused::Unavailable {
            name: command.name.clone(),
            why,
        });
    }
    let args = req.args.into_vec();
    let rules = sanitizer::FileRules {
        roots: &config.file_roots,
        allow_hardlinked_inputs: config.allow_hardlinked_inputs,
    };
    let approved = sanitizer::check_with(command, &args, rules)?;
    let pattern = &command.patterns[approved.pattern_index];
    let limit = pattern.timeout.unwrap_or(command.timeout);
    let timeout = match req.timeout_secs {
        None => limit,
        Some(0) => return Err(Refused::ZeroTimeout),
        Some(t) if Duration::from_secs(t) > limit => {
            return Err(Refused::TimeoutTooLong {
                asked: t,
                limit: limit.as_secs(),
            });
        }
        Some(t) => Duration::from_secs(t),
    };
    let isolated = command.isolates(approved.pattern_index);
    let asked = asked(snap, req.board.as_deref(), req.device)?;
    let Locks {
        mut keys,
        shared_keys,
        device,
        touched,
    } = locks(snap, command, asked, isolated)?;
    // A device on a board's port is the board's: its command takes `board:NAME` too, so a
    // board lease held by another client keeps it out (docs/LOCKS.md "Boards").
    let touched: Vec<Device> = touched.into_iter().cloned().collect();
    keys.extend(crate::boards::board_keys(config, &touched));
    keys.sort();
    keys.dedup();
    // Last, as before it moved here from the lock step: a call wrong in several ways is
    // told the same first reason, dry run or not.
    let wait_secs = req.wait_secs.unwrap_or(0);
    if wait_secs > MAX_WAIT_SECS {
        return Err(Refused::WaitTooLong {
            wait: wait_secs,
            max: MAX_WAIT_SECS,
        });
    }
    let progress = pattern
        .progress
        .clone()
        .or_else(|| command.progress.clone());
    let files: Vec<(String, std::sync::Arc<std::os::fd::OwnedFd>)> = (approved.files.iter())
        .map(|f| (f.real.display().to_string(), f.fd.clone()))
        .collect();
    let wrong_mode = wrong_mode(snap, command, approved.pattern_index, device, &touched);
    // The board the call runs on takes its own `loaders` (else `flash.loaders`).
    let board = device
        .or(match touched.as_slice() {
            [one] => Some(one),
            _ => None,
        })
        .and_then(|d| config.board_at(d.id.as_str()));
    loaders_allowed(config, board, pattern, &approved.shown)?;
    Ok(Prepared {
        wrong_mode,
        snapshot: snap,
        command,
        keys,
        shared_keys,
        board: device.and_then(|d| config.board_at(d.id.as_str())),
        device,
        isolated,
        shown_args: approved.shown,
        files,
        spec: Spec {
            binary: command.binary.clone(),
            args: approved.args,
            env: command.env.clone(),
            timeout,
            isolation: None,
            inherit: approved.files.into_iter().map(|f| f.fd).collect(),
            // Progress is read from the output as it is printed, not when a buffer fills.
            live_output: progress.is_some(),
        },
        progress,
        cancel: pattern.cancel.unwrap_or(command.cancel),
        dry_run: req.dry_run,
        wait: Duration::from_secs(wait_secs),
        background: req.background,
    })
}

/// What a call asks to run on, as its request names it.
enum Asked<'a> {
    /// Neither `device` nor `board`: every attached device of the command's class.
    Any,
    /// `device`, parsed as the request was read (or why it is no port path).
    Device(DeviceArg),
    /// `board`: the device attached at its usb port now, found in the snapshot.
    Board(&'a Device),
}

/// Reads `board` and `device`: a board is looked up in the configuration and the device
/// at its port in the snapshot, once each.
fn asked<'a>(
    snap: &'a Snapshot,
    board: Option<&str>,
    device: Option<DeviceArg>,
) -> Result<Asked<'a>, Refused> {
    let Some(name) = board else {
        return Ok(device.map_or(Asked::Any, Asked::Device));
    };
    if device.is_some() {
        return Err(Refused::BoardAndDevice);
    }
    let config = &snap.config;
    let Some(b) = config.board(name) else {
        return Err(Refused::UnknownBoard {
            name: name.to_string(),
            known: config.boards.iter().map(|b| b.name.clone()).collect(),
        });
    };
    let at_port = snap.device(&b.usb);
    match at_port {
        Some(dev) => Ok(Asked::Board(dev)),
        None => Err(Refused::BoardEmpty {
            board: b.name.clone(),
            usb: b.usb.to_string(),
        }),
    }
}

/// What a command locks and runs on, all of it read from the snapshot.
struct Locks<'a> {
    /// Taken exclusively.
    keys: Vec<LockKey>,
    /// Held shared (an isolated command's board VID:PID key).
    shared_keys: Vec<LockKey>,
    /// The device the call runs on, when it names one (or its isolated command has one).
    device: Option<&'a Device>,
    /// Every device the command touches: whose board keys it takes too.
    touched: Vec<&'a Device>,
}

/// The locks of a call: the command's class (looked up once) and the device it names (found
/// once in the snapshot) give the keys. A command without a class locks nothing and names
/// no device; one with a class but no such device attached is refused. An isolated command
/// takes its board's `port:` key exclusively and the board's VID:PID (or group) key shared;
/// its board is the device named, or the only attached device of its class.
fn locks<'a>(
    snap: &'a Snapshot,
    command: &CommandConfig,
    asked: Asked<'a>,
    isolated: bool,
) -> Result<Locks<'a>, Refused> {
    let config = &snap.config;
    let Some(class_name) = &command.device else {
        if isolated {
            // Validation makes an isolated command name a class.
            return Err(Refused::IsolatedWithoutClass {
                command: command.name.clone(),
            });
        }
        return match asked {
            Asked::Any => Ok(Locks {
                keys: vec![],
                shared_keys: vec![],
                device: None,
                touched: vec![],
            }),
            _ => Err(Refused::NoDeviceClass {
                command: command.name.clone(),
            }),
        };
    };
    let Some(class) = config.device_class(class_name) else {
        return Err(Refused::ClassNotConfigured {
            class: class_name.clone(),
        });
    };
    let named = match asked {
        Asked::Any => None,
        Asked::Device(DeviceArg::Invalid(e)) => return Err(e.into()),
        Asked::Device(DeviceArg::Id(id)) => match snap.device(&id) {
            Some(dev) => Some(dev),
            None => {
                return Err(Refused::NotAttached {
                    device: id.to_string(),
                    attached: attached_list(snap),
                });
            }
        },
        Asked::Board(dev) => Some(dev),
    };
    if let Some(dev) = named
        && !class.matches(dev)
    {
        return Err(Refused::NotOfClass {
            device: dev.id.to_string(),
            vid: dev.vid,
            pid: dev.pid,
            class: class_name.clone(),
            matching: class.describe(),
            command: command.name.clone(),
        });
    }
    let of_class: Vec<&Device> = (snap.devices().iter())
        .filter(|d| class.matches(d))
        .collect();
    let none_attached = || Refused::NoneAttached {
        class: class_name.clone(),
        matching: class.describe(),
        command: command.name.clone(),
        attached: attached_list(snap),
    };
    if isolated {
        let dev = match (named, of_class.as_slice()) {
            (Some(dev), _) => dev,
            (None, [one]) => one,
            (None, []) => return Err(none_attached()),
            (None, many) => {
                return Err(Refused::Ambiguous {
                    class: class_name.clone(),
                    command: command.name.clone(),
                    ids: many.iter().map(|d| d.id.to_string()).collect(),
                });
            }
        };
        return Ok(Locks {
            keys: vec![LockKey::Port(dev.id.to_string())],
            shared_keys: vec![lock_key_of(config, dev)],
            device: Some(dev),
            touched: vec![dev],
        });
    }
    if let Some(dev) = named {
        return Ok(Locks {
            keys: vec![lock_key_of(config, dev)],
            shared_keys: vec![],
            device: Some(dev),
            touched: vec![dev],
        });
    }
    if of_class.is_empty() {
        return Err(none_attached());
    }
    let mut keys: Vec<LockKey> = of_class.iter().map(|d| lock_key_of(config, d)).collect();
    keys.sort();
    keys.dedup();
    Ok(Locks {
        keys,
        shared_keys: vec![],
        device: None,
        touched: of_class,
    })
}

/// What is attached now, for a refusal: `1-2 (2207:350b), …`, or `nothing`.
fn attached_list(snap: &Snapshot) -> String {
    let v: Vec<String> = (snap.devices().iter())
        .map(|d| format!("{} ({:04x}:{:04x})", d.id, d.vid, d.pid))
        .collect();
    if v.is_empty() {
        "nothing".to_string()
    } else {
        v.join(", ")
    }
}

#[cfg(test)]
#[path = "prepare_tests.rs"]
mod tests;
