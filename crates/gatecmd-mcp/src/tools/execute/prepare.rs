//! Policy for `execute_command`: every check that can refuse the call before anything
//! runs (client rights, binary, sanitizer, timeout, wait, devices and their lock keys), and
//! the typed refusals of the whole call (`Rejected`, in `rejected.rs`). It decides on one
//! [`Snapshot`] of the configuration and the devices and is given nothing else of the
//! shared state, so no check can read a later moment than another.

use std::time::Duration;

use crate::tools::locks::MAX_WAIT_SECS;
use gatecmd_core::identity::ClientIdentity;
use gatecmd_core::sanitizer;
use gatecmd_devices::DeviceId;
use gatecmd_domain::config::{CancelPolicy, CommandConfig, Config};
use gatecmd_domain::exec::Spec;
use gatecmd_domain::locks::LockKey;
use gatecmd_domain::locks::lock_key_of;

use super::interface::ExecuteRequest;

pub use super::rejected::Rejected;
pub use super::snapshot::Snapshot;

/// A call that passed every check: what to run and what to lock.
pub struct Prepared<'a> {
    /// What every check read: the run, its refusals and its record use the same.
    pub snapshot: &'a Snapshot,
    pub command: &'a CommandConfig,
    pub keys: Vec<LockKey>,
    /// Held shared: an isolated command's board VID:PID key.
    pub shared_keys: Vec<LockKey>,
    pub device: Option<DeviceId>,
    /// The board an isolated command runs on (its view holds only this one).
    pub isolate: Option<DeviceId>,
    pub spec: Spec,
    /// `spec.args` for people: a file argument as the path it resolved to, where the child
    /// gets `/proc/self/fd/N`.
    pub shown_args: Vec<String>,
    pub progress: Option<regex::Regex>,
    pub cancel: CancelPolicy,
    pub dry_run: bool,
    /// How long to queue for busy locks (at most `MAX_WAIT_SECS`).
    pub wait: Duration,
    /// Answer with a job handle once the locks are held (`background: true`).
    pub background: bool,
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
}

/// Every check that can refuse the call, in order; nothing has run when this fails.
pub fn prepare<'a>(
    snap: &'a Snapshot,
    who: &ClientIdentity,
    req: ExecuteRequest,
) -> Result<Prepared<'a>, Rejected> {
    let config: &'a Config = &snap.config;
    let Some(command) = config
        .command(&req.command)
        .filter(|c| who.may_run(&c.name))
    else {
        return Err(Rejected::UnknownCommand {
            name: req.command,
            visible: config
                .commands
                .iter()
                .filter(|c| who.may_run(&c.name))
                .map(|c| c.name.clone())
                .collect(),
        });
    };
    super::power_guard::check(config, &command.name)?;
    // Checked now, not at load: a tool may be installed (or removed) while the server runs.
    if let Some(why) = gatecmd_domain::config::binary_problem(&command.binary) {
        return Err(Rejected::Unavailable {
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
        Some(0) => return Err(Rejected::ZeroTimeout),
        Some(t) if Duration::from_secs(t) > limit => {
            return Err(Rejected::TimeoutTooLong {
                asked: t,
                limit: limit.as_secs(),
            });
        }
        Some(t) => Duration::from_secs(t),
    };
    let isolated = command.isolates(approved.pattern_index);
    let asked = device_of_board(snap, req.board.as_deref(), req.device)?;
    let Locks {
        mut keys,
        shared_keys,
        device,
    } = if isolated {
        board_keys(snap, command, asked.as_deref())?
    } else {
        let (keys, device) = device_keys(snap, command, asked.as_deref())?;
        Locks {
            keys,
            shared_keys: vec![],
            device,
        }
    };
    // A device on a board's port is the board's: its command takes `board:NAME` too, so a
    // board lease held by another client keeps it out (docs/LOCKS.md "Boards").
    let touched: Vec<gatecmd_devices::Device> = match &device {
        Some(id) => snap.device(id).cloned().into_iter().collect(),
        None => command
            .device
            .as_deref()
            .and_then(|c| config.device_class(c))
            .map(|class| {
                (snap.devices().iter())
                    .filter(|d| class.matches(d.vid, d.pid))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default(),
    };
    keys.extend(gatecmd_domain::boards::board_keys(config, &touched));
    keys.sort();
    keys.dedup();
    // Last, as before it moved here from the lock step: a call wrong in several ways is
    // told the same first reason, dry run or not.
    let wait_secs = req.wait_secs.unwrap_or(0);
    if wait_secs > MAX_WAIT_SECS {
        return Err(Rejected::WaitTooLong {
            wait: wait_secs,
            max: MAX_WAIT_SECS,
        });
    }
    Ok(Prepared {
        snapshot: snap,
        command,
        keys,
        shared_keys,
        isolate: device.clone().filter(|_| isolated),
        device,
        shown_args: approved.shown,
        spec: Spec {
            binary: command.binary.clone(),
            args: approved.args,
            env: command.env.clone(),
            timeout,
            isolation: None,
            inherit: approved.files.into_iter().map(|f| f.fd).collect(),
        },
        progress: pattern
            .progress
            .clone()
            .or_else(|| command.progress.clone()),
        cancel: pattern.cancel.unwrap_or(command.cancel),
        dry_run: req.dry_run,
        wait: Duration::from_secs(wait_secs),
        background: req.background,
    })
}

/// The lock keys a command takes: those of the device it names, or of every attached device
/// of its class. A command with a class and no such device attached is refused.
pub fn device_keys(
    snap: &Snapshot,
    command: &CommandConfig,
    device: Option<&str>,
) -> Result<(Vec<LockKey>, Option<DeviceId>), Rejected> {
    let config = &snap.config;
    let Some(class_name) = &command.device else {
        return match device {
            Some(_) => Err(Rejected::NoDeviceClass {
                command: command.name.clone(),
            }),
            None => Ok((vec![], None)),
        };
    };
    let Some(class) = config.device_class(class_name) else {
        return Err(Rejected::ClassNotConfigured {
            class: class_name.clone(),
        });
    };
    let all = snap.devices();
    let attached_list = || {
        let v: Vec<String> = all
            .iter()
            .map(|d| format!("{} ({:04x}:{:04x})", d.id, d.vid, d.pid))
            .collect();
        if v.is_empty() {
            "nothing".to_string()
        } else {
            v.join(", ")
        }
    };
    let class_pid = class
        .pid
        .map(|p| format!("{p:04x}"))
        .unwrap_or_else(|| "*".into());
    if let Some(d) = device {
        let id: DeviceId = d.parse()?;
        let Some(dev) = all.iter().find(|x| x.id == id) else {
            return Err(Rejected::NotAttached {
                device: d.to_string(),
                attached: attached_list(),
            });
        };
        if !class.matches(dev.vid, dev.pid) {
            return Err(Rejected::NotOfClass {
                device: d.to_string(),
                vid: dev.vid,
                pid: dev.pid,
                class: class_name.clone(),
                class_vid: class.vid,
                class_pid,
                command: command.name.clone(),
            });
        }
        return Ok((vec![lock_key_of(config, dev)], Some(id)));
    }
    let mut keys: Vec<LockKey> = all
        .iter()
        .filter(|d| class.matches(d.vid, d.pid))
        .map(|d| lock_key_of(config, d))
        .collect();
    if keys.is_empty() {
        return Err(Rejected::NoneAttached {
            class: class_name.clone(),
            class_vid: class.vid,
            class_pid,
            command: command.name.clone(),
            attached: attached_list(),
        });
    }
    keys.sort();
    keys.dedup();
    Ok((keys, None))
}

/// The device a call names: `device` as given, or the port of the board named `board`.
fn device_of_board(
    snap: &Snapshot,
    board: Option<&str>,
    device: Option<String>,
) -> Result<Option<String>, Rejected> {
    let Some(name) = board else {
        return Ok(device);
    };
    if device.is_some() {
        return Err(Rejected::BoardAndDevice);
    }
    let config = &snap.config;
    let Some(b) = config.board(name) else {
        return Err(Rejected::UnknownBoard {
            name: name.to_string(),
            known: config.boards.iter().map(|b| b.name.clone()).collect(),
        });
    };
    if snap.device(&b.usb).is_none() {
        return Err(Rejected::BoardEmpty {
            board: b.name.clone(),
            usb: b.usb.to_string(),
        });
    }
    Ok(Some(b.usb.to_string()))
}

/// What a command locks: keys taken exclusively, keys held shared, and its board.
struct Locks {
    keys: Vec<LockKey>,
    shared_keys: Vec<LockKey>,
    device: Option<DeviceId>,
}

/// The locks of an isolated command: its board's `port:` key exclusively and the board's
/// VID:PID (or group) key shared. The board is `device`, or the only attached board of
/// the command's class.
fn board_keys(
    snap: &Snapshot,
    command: &CommandConfig,
    device: Option<&str>,
) -> Result<Locks, Rejected> {
    let config = &snap.config;
    let Some(class_name) = &command.device else {
        // Validation makes an isolated command name a class.
        return Err(Rejected::IsolatedWithoutClass {
            command: command.name.clone(),
        });
    };
    let Some(class) = config.device_class(class_name) else {
        return Err(Rejected::ClassNotConfigured {
            class: class_name.clone(),
        });
    };
    let dev = match device {
        Some(d) => {
            // The same checks as for any device command: attached, of the class. The look
            // is in the same snapshot, so what device_keys found is there (`Vanished` was
            // a hotplug between two reads of the registry, before it was read once).
            let (_, id) = device_keys(snap, command, device)?;
            id.and_then(|id| snap.device(&id).cloned())
                .ok_or_else(|| Rejected::Vanished {
                    device: d.to_string(),
                })?
        }
        None => {
            let boards: Vec<_> = (snap.devices().iter())
                .filter(|d| class.matches(d.vid, d.pid))
                .collect();
            match boards.as_slice() {
                [one] => (*one).clone(),
                [] => {
                    // device_keys words the "nothing attached" refusal.
                    device_keys(snap, command, None)?;
                    return Err(Rejected::NoBoard {
                        class: class_name.clone(),
                    });
                }
                many => {
                    return Err(Rejected::Ambiguous {
                        class: class_name.clone(),
                        command: command.name.clone(),
                        ids: many.iter().map(|d| d.id.to_string()).collect(),
                    });
                }
            }
        }
    };
    Ok(Locks {
        keys: vec![LockKey::Port(dev.id.to_string())],
        shared_keys: vec![lock_key_of(config, &dev)],
        device: Some(dev.id),
    })
}

#[cfg(test)]
#[path = "prepare_tests.rs"]
mod tests;
