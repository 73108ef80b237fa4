//! Policy for `execute_command`: every check that can refuse the call before anything
//! runs (client rights, binary, sanitizer, timeout, devices and their lock keys), and the
//! typed refusals of the whole call.

use std::time::Duration;

use crate::auth::ClientIdentity;
use crate::config::{CancelPolicy, CommandConfig, Config};
use crate::devices::{DeviceError, DeviceId};
use crate::exec::{ExecError, Spec};
use crate::isolation::IsolationError;
use crate::locks::{LockError, LockKey};
use crate::refusal::{Refusal, RefusalReason};
use crate::sanitizer;
use crate::state::AppState;
use crate::tools::devices::lock_key_of;
use crate::tools::reasons::{isolation_reason, lock_reason};

use super::interface::ExecuteRequest;

/// Why `execute_command` said no. Each message names what is in the way and the next
/// step; [`Rejected::reason`] is its stable class.
#[derive(Debug, thiserror::Error)]
pub enum Rejected {
    #[error(
        "unknown command {name:?}. Commands you may run: {}. Call list_commands for their argument patterns.",
        or_none(visible)
    )]
    UnknownCommand { name: String, visible: Vec<String> },
    #[error(
        "command {name:?} is configured but unavailable on this host: {why}. Ask the bench operator to install it."
    )]
    Unavailable { name: String, why: String },
    #[error("{0}")]
    Args(#[from] sanitizer::Refusal),
    #[error("{0}")]
    PowerCommand(#[from] super::power_guard::PowerCommand),
    #[error("timeout_secs must be at least 1")]
    ZeroTimeout,
    #[error(
        "timeout_secs {asked} exceeds this command's limit of {limit} s; pass at most {limit} or omit it"
    )]
    TimeoutTooLong { asked: u64, limit: u64 },
    #[error("command {command:?} does not touch a device; omit `device`")]
    NoDeviceClass { command: String },
    #[error("device class {class:?} is not configured")]
    ClassNotConfigured { class: String },
    #[error(
        "command {command:?} is isolated but names no device class; ask the bench operator to fix the config"
    )]
    IsolatedWithoutClass { command: String },
    #[error("{0}")]
    BadDeviceId(#[from] DeviceError),
    #[error(
        "device {device} is not attached. Attached now: {attached}. Call list_devices, or wait_for_device for a board that is re-enumerating."
    )]
    NotAttached { device: String, attached: String },
    /// The board went away between the look and the lookup.
    #[error("device {device} is not attached")]
    Vanished { device: String },
    #[error(
        "device {device} ({vid:04x}:{pid:04x}) is not a {class} device ({class_vid:04x}:{class_pid}); {command:?} runs only on those"
    )]
    NotOfClass {
        device: String,
        vid: u16,
        pid: u16,
        class: String,
        class_vid: u16,
        class_pid: String,
        command: String,
    },
    #[error(
        "no {class} device ({class_vid:04x}:{class_pid}) is attached, so {command:?} has nothing to run on. Attached now: {attached}. \
         Plug the board in (in MaskROM or Loader mode), or call wait_for_device."
    )]
    NoneAttached {
        class: String,
        class_vid: u16,
        class_pid: String,
        command: String,
        attached: String,
    },
    #[error("no {class} device is attached")]
    NoBoard { class: String },
    #[error(
        "{} {class} boards are attached ({}); {command:?} runs on one board at a time and sees only that one: \
         pass `device` (one of {}). list_devices shows which is which.",
        ids.len(), ids.join(", "), ids.join(", ")
    )]
    Ambiguous {
        class: String,
        command: String,
        ids: Vec<String>,
    },
    #[error("give either board or device, not both")]
    BoardAndDevice,
    #[error("no board is named {name:?}; configured boards: {}", or_none(known))]
    UnknownBoard { name: String, known: Vec<String> },
    #[error(
        "board {board:?} has nothing attached at its usb port {usb}; power it on or put it in MaskROM, \
         then wait_for_device {{id: \"{usb}\"}}"
    )]
    BoardEmpty { board: String, usb: String },
    #[error("wait_secs {wait} is more than the maximum of {max}")]
    WaitTooLong { wait: u64, max: u64 },
    #[error(
        "client {client:?} already runs {max} commands at once (limits.max_concurrent_per_client); \
         wait for one to finish, then retry"
    )]
    TooManyRunning { client: String, max: usize },
    #[error("cancelled while waiting for the device lock; nothing was run")]
    CancelledWaiting,
    #[error("{0}")]
    Lock(#[from] LockError),
    #[error("{0}")]
    Isolation(#[from] IsolationError),
    /// Allowed, but the executor could not start it.
    #[error("{0}")]
    Start(#[from] ExecError),
    /// Allowed, but the task running it (a `cancel: never` command) failed.
    #[error("the command's task failed: {0}")]
    Task(String),
}

fn or_none(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

impl Rejected {
    /// The stable class of this refusal.
    pub fn reason(&self) -> RefusalReason {
        use RefusalReason as R;
        match self {
            Rejected::UnknownCommand { .. } => R::UnknownCommand,
            Rejected::Unavailable { .. } => R::CommandUnavailable,
            Rejected::PowerCommand(_) => R::PowerCommand,
            Rejected::Args(sanitizer::Refusal::ForbiddenChar { .. }) => R::ForbiddenCharacter,
            // A file argument outside the roots is one way a pattern fails to match; the
            // message names it.
            Rejected::Args(sanitizer::Refusal::NoMatch { .. }) => R::NoPatternMatched,
            Rejected::ZeroTimeout
            | Rejected::NoDeviceClass { .. }
            | Rejected::BadDeviceId(_)
            | Rejected::BoardAndDevice => R::InvalidRequest,
            Rejected::UnknownBoard { .. } => R::NotFound,
            Rejected::TimeoutTooLong { .. } => R::TimeoutTooLong,
            Rejected::ClassNotConfigured { .. } | Rejected::IsolatedWithoutClass { .. } => {
                R::NotConfigured
            }
            Rejected::NotAttached { .. }
            | Rejected::Vanished { .. }
            | Rejected::NoneAttached { .. }
            | Rejected::NoBoard { .. }
            | Rejected::BoardEmpty { .. } => R::DeviceAbsent,
            Rejected::NotOfClass { .. } => R::DeviceMismatch,
            Rejected::Ambiguous { .. } => R::DeviceAmbiguous,
            Rejected::WaitTooLong { .. } | Rejected::TooManyRunning { .. } => R::Limit,
            Rejected::CancelledWaiting => R::Cancelled,
            Rejected::Lock(e) => lock_reason(e),
            Rejected::Isolation(e) => isolation_reason(e),
            Rejected::Start(ExecError::ShuttingDown) => R::ShuttingDown,
            Rejected::Start(ExecError::Isolation(e)) => isolation_reason(e),
            Rejected::Start(_) | Rejected::Task(_) => R::StartFailed,
        }
    }
}

impl From<Rejected> for Refusal {
    fn from(r: Rejected) -> Refusal {
        Refusal::from_error(r.reason(), &r)
    }
}

/// A call that passed every check: what to run and what to lock.
pub struct Prepared<'a> {
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
    config: &'a Config,
    state: &AppState,
    who: &ClientIdentity,
    req: ExecuteRequest,
) -> Result<Prepared<'a>, Rejected> {
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
    if let Some(why) = crate::config::binary_problem(&command.binary) {
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
    let asked = device_of_board(config, state, req.board.as_deref(), req.device)?;
    let Locks {
        mut keys,
        shared_keys,
        device,
    } = if isolated {
        board_keys(config, state, command, asked.as_deref())?
    } else {
        let (keys, device) = device_keys(config, state, command, asked.as_deref())?;
        Locks {
            keys,
            shared_keys: vec![],
            device,
        }
    };
    // A device on a board's port is the board's: its command takes `board:NAME` too, so a
    // board lease held by another client keeps it out (docs/LOCKS.md "Boards").
    let touched: Vec<crate::devices::Device> = match &device {
        Some(id) => state.registry.get(id).into_iter().collect(),
        None => command
            .device
            .as_deref()
            .and_then(|c| config.device_class(c))
            .map(|class| {
                state
                    .registry
                    .snapshot()
                    .into_iter()
                    .filter(|d| class.matches(d.vid, d.pid))
                    .collect()
            })
            .unwrap_or_default(),
    };
    keys.extend(crate::boards::board_keys(config, &touched));
    keys.sort();
    keys.dedup();
    Ok(Prepared {
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
        background: req.background,
    })
}

/// The lock keys a command takes: those of the device it names, or of every attached device
/// of its class. A command with a class and no such device attached is refused.
pub fn device_keys(
    config: &Config,
    state: &AppState,
    command: &CommandConfig,
    device: Option<&str>,
) -> Result<(Vec<LockKey>, Option<DeviceId>), Rejected> {
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
    let all = state.registry.snapshot();
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
    config: &Config,
    state: &AppState,
    board: Option<&str>,
    device: Option<String>,
) -> Result<Option<String>, Rejected> {
    let Some(name) = board else {
        return Ok(device);
    };
    if device.is_some() {
        return Err(Rejected::BoardAndDevice);
    }
    let Some(b) = config.board(name) else {
        return Err(Rejected::UnknownBoard {
            name: name.to_string(),
            known: config.boards.iter().map(|b| b.name.clone()).collect(),
        });
    };
    let attached = b
        .usb
        .parse::<DeviceId>()
        .ok()
        .is_some_and(|id| state.registry.get(&id).is_some());
    if !attached {
        return Err(Rejected::BoardEmpty {
            board: b.name.clone(),
            usb: b.usb.clone(),
        });
    }
    Ok(Some(b.usb.clone()))
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
    config: &Config,
    state: &AppState,
    command: &CommandConfig,
    device: Option<&str>,
) -> Result<Locks, Rejected> {
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
            // The same checks as for any device command: attached, of the class.
            let (_, id) = device_keys(config, state, command, device)?;
            id.and_then(|id| state.registry.get(&id))
                .ok_or_else(|| Rejected::Vanished {
                    device: d.to_string(),
                })?
        }
        None => {
            let boards: Vec<_> = state
                .registry
                .snapshot()
                .into_iter()
                .filter(|d| class.matches(d.vid, d.pid))
                .collect();
            match boards.as_slice() {
                [one] => one.clone(),
                [] => {
                    // device_keys words the "nothing attached" refusal.
                    device_keys(config, state, command, None)?;
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
