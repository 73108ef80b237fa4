//! `execute_command`: policy first (client rights, sanitizer), then the executor.

use std::time::Duration;

use rmcp::RoleServer;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::audit;
use crate::auth::ClientIdentity;
use crate::config::{CancelPolicy, CommandConfig, Config};
use crate::devices::DeviceId;
use crate::exec::{Outcome, Spec, StopReason};
use crate::isolation::{Plan, Privilege, View};
use crate::locks::{ClientName, CommandLockRequest, LeaseId, LockKey, SessionId};
use crate::output;
use crate::progress;
use crate::sanitizer::{self, Args};
use crate::state::AppState;
use crate::tools::devices::{LockView, lock_key_of};
use crate::tools::locks::MAX_WAIT_SECS;

/// Arguments of `execute_command`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecuteRequest {
    /// Name of the command (from list_commands).
    pub command: String,
    /// Arguments: preferably a list of strings, one per argument; a single string is split on
    /// whitespace.
    #[serde(default)]
    pub args: Args,
    /// Seconds before the command is stopped; at most the command's configured timeout.
    #[serde(default)]
    pub timeout_secs: Option<u64>,
    /// Validate everything and show the exact argv, without running anything.
    #[serde(default)]
    pub dry_run: bool,
    /// Device id (from list_devices) for a command that touches a device class; default: every
    /// attached device of the class. An isolated command runs on exactly this board and sees
    /// no other; it may be omitted only when exactly one board of its class is attached.
    #[serde(default)]
    pub device: Option<String>,
    /// Lease id from lock_device, when the device is leased (a 2025-11-25 session that took the
    /// lease may omit it).
    #[serde(default)]
    pub lease: Option<String>,
    /// How long to queue if the device is busy (default 0: answer at once with who holds it).
    #[serde(default)]
    pub wait_secs: Option<u64>,
}

/// Result of `execute_command`. Field names are part of the interface (docs/TOOLS.md).
#[derive(Debug, Serialize, JsonSchema)]
pub struct ExecuteResult {
    pub command: String,
    /// The argv as executed: absolute binary, then arguments (file slots resolved).
    pub argv: Vec<String>,
    /// Exit code; null when the command did not exit by itself (signal, timeout, cancel) or in a dry run.
    pub exit_code: Option<i32>,
    /// The signal that ended the command, if one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// Standard output, escape sequences removed and `\r` overwrites applied.
    pub stdout: String,
    pub stderr: String,
    /// Whether output beyond the server's cap was dropped.
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub duration_ms: u64,
    pub timed_out: bool,
    pub cancelled: bool,
    /// The timeout that applied, in seconds.
    pub timeout_secs: u64,
    /// True when nothing was run (dry_run).
    pub dry_run: bool,
    /// Device id the command was bound to, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// Lock keys held while it ran (or that it would take, in a dry run).
    pub lock_keys: Vec<String>,
    /// Keys held shared while it ran: an isolated command's board VID:PID (or group) key,
    /// which keeps whole-VID:PID commands and leases out but not other boards' commands.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shared_lock_keys: Vec<String>,
    /// The isolated view the command ran in (or would run in, in a dry run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub isolated_view: Option<View>,
    /// Why the command was stopped, in words, when it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
}

/// Runs `execute_command` for `who`.
pub async fn run(
    state: &AppState,
    who: &ClientIdentity,
    session: Option<SessionId>,
    req: ExecuteRequest,
    ctx: &RequestContext<RoleServer>,
) -> CallToolResult {
    let config = state.config();
    let lease = req.lease.clone().map(LeaseId);
    let wait_secs = req.wait_secs.unwrap_or(0);
    // Audit: the request as asked, before `prepare` consumes it; every refusal below goes
    // through `refuse` so that it is recorded with its reason.
    let call = audit::ExecuteCall::new(
        &who.name,
        session.as_ref().map(|s| s.0.as_str()),
        &req.command,
    );
    let asked = req.args.clone().into_vec();
    // `kind` groups refusals for the audit log's per-client aggregation.
    let refuse = |kind: &'static str, reason: String| {
        state.audit.execute_refused(&call, &asked, kind, &reason);
        super::refusal(reason)
    };
    let prepared = match prepare(&config, state, who, req) {
        Ok(p) => p,
        Err(msg) => {
            tracing::info!(client = %who.name, verdict = "refused", reason = %msg, "execute_command");
            return refuse("policy", msg);
        }
    };
    let mut result = ExecuteResult {
        command: prepared.command.name.clone(),
        argv: prepared.argv(),
        exit_code: None,
        signal: None,
        stdout: String::new(),
        stderr: String::new(),
        stdout_truncated: false,
        stderr_truncated: false,
        duration_ms: 0,
        timed_out: false,
        cancelled: false,
        timeout_secs: prepared.spec.timeout.as_secs(),
        dry_run: prepared.dry_run,
        device: prepared.device.as_ref().map(|d| d.to_string()),
        lock_keys: prepared.keys.iter().map(|k| k.to_string()).collect(),
        shared_lock_keys: prepared.shared_keys.iter().map(|k| k.to_string()).collect(),
        isolated_view: None,
        stop_reason: None,
    };
    let roots = config.isolation.roots();
    if prepared.dry_run {
        let mut text = format!(
            "dry run: would run {}\ntimeout {} s; nothing was run\n",
            shell_words(&result.argv),
            result.timeout_secs
        );
        if let Some(id) = &prepared.isolate {
            match Plan::new(&roots, id, Privilege::current()) {
                Ok(plan) => {
                    text.push_str(&render_view(&plan.view));
                    result.isolated_view = Some(plan.view);
                }
                Err(e) => return refuse("isolation", e.to_string()),
            }
        }
        for k in prepared.keys.iter().chain(&prepared.shared_keys) {
            let v = LockView::of(&state.locks, k, &who.name);
            match (&v.holder, v.held) {
                (Some(h), true) => text.push_str(&format!(
                    "lock {k}: held by {h} now ({} waiting)\n",
                    v.queue_len
                )),
                _ => text.push_str(&format!("lock {k}: free now\n")),
            }
        }
        state.audit.execute_dry_run(&call, &result.argv);
        return super::structured(&result, text);
    }
    if wait_secs > MAX_WAIT_SECS {
        return refuse(
            "wait_secs",
            format!("wait_secs {wait_secs} is more than the maximum of {MAX_WAIT_SECS}"),
        );
    }
    let Some(slot) = state.client_slot(&who.name) else {
        let max = config.limits.max_concurrent_per_client;
        return refuse(
            "client_busy",
            format!(
                "client {:?} already runs {max} commands at once (limits.max_concurrent_per_client); \
             wait for one to finish, then retry",
                who.name
            ),
        );
    };
    let lock_req = CommandLockRequest {
        keys: prepared.keys.clone(),
        shared: prepared.shared_keys.clone(),
        client: ClientName(who.name.clone()),
        session,
        lease,
        command: format!("{} {}", prepared.command.name, prepared.spec.args.join(" "))
            .trim_end()
            .to_string(),
    };
    // A request cancelled while queued leaves the queue at once (the future is dropped).
    let acquired = tokio::select! {
        r = state.locks.acquire_for_command_wait(lock_req, Duration::from_secs(wait_secs)) => r,
        _ = ctx.ct.cancelled() => return refuse("cancelled", "cancelled while waiting for the device lock; nothing was run".into()),
    };
    let lock_guard = match acquired {
        Ok(g) => g,
        Err(e) => {
            tracing::info!(client = %who.name, command = %result.command, verdict = "refused", reason = %e, "execute_command");
            return refuse("lock_busy", e.to_string());
        }
    };
    let mut spec = prepared.spec.clone();
    if let Some(id) = &prepared.isolate {
        // Built now, under the lock: a board that re-enumerated since `prepare` (or since
        // the last command) is seen with its current bus and device number.
        match Plan::new(&roots, id, Privilege::current()) {
            Ok(plan) => {
                spec.isolation = Some(plan.setup);
                result.isolated_view = Some(plan.view);
            }
            Err(e) => {
                tracing::info!(client = %who.name, command = %result.command, verdict = "refused", reason = %e, "execute_command");
                return refuse("isolation", e.to_string());
            }
        }
    }
    tracing::info!(client = %who.name, command = %result.command, argv = ?result.argv, device = ?result.device, verdict = "allowed", "execute_command");
    // Written before the spawn (locks held), so a crash mid-run still shows what was started.
    let trail = audit::RunTrail::start(
        &state.audit,
        call.clone(),
        audit::RunStart {
            argv: result.argv.clone(),
            device: result.device.clone(),
            lock_keys: result.lock_keys.clone(),
            timeout_secs: result.timeout_secs,
        },
    );

    let (reporter, reporter_done) = match ctx.meta.get_progress_token() {
        Some(token) => {
            let sink = progress::Sink {
                peer: ctx.peer.clone(),
                token,
            };
            let (tx, done) = progress::spawn_reporter(sink, prepared.progress.clone());
            (Some(tx), Some(done))
        }
        None => (None, None),
    };
    let on_line = move |_kind, line: &str| {
        if let Some(tx) = &reporter {
            let _ = tx.send(line.to_string());
        }
    };
    let outcome = if prepared.cancel == CancelPolicy::Never {
        // Run detached from this request so that neither a cancel nor a dropped request
        // stops it; the caller still waits for the result.
        let executor = state.executor.clone();
        let mut task = tokio::spawn(async move {
            let r = executor.run(&spec, CancellationToken::new(), on_line).await;
            // The device stays locked until the command (and its group) is gone.
            drop(lock_guard);
            drop(slot);
            r
        });
        let mut refused_cancel = false;
        let joined = loop {
            tokio::select! {
                r = &mut task => break r,
                _ = ctx.ct.cancelled(), if !refused_cancel => {
                    refused_cancel = true;
                    tracing::warn!(client = %who.name, command = %result.command, "cancel refused: command is marked cancel: never");
                }
            }
        };
        if refused_cancel {
            result.stop_reason = Some(
                "a cancel was refused: this command is marked `cancel: never` and ran to its end"
                    .into(),
            );
        }
        match joined {
            Ok(r) => r,
            Err(e) => {
                let msg = format!("the command's task failed: {e}");
                trail.failed(&msg);
                return super::refusal(msg);
            }
        }
    } else {
        let r = state.executor.run(&spec, ctx.ct.clone(), on_line).await;
        drop(lock_guard);
        drop(slot);
        r
    };
    let outcome = match outcome {
        Ok(o) => o,
        Err(e) => {
            tracing::warn!(client = %who.name, command = %result.command, error = %e, "execute_command failed to start");
            trail.failed(&e.to_string());
            return super::refusal(e.to_string());
        }
    };
    if let Some(done) = reporter_done {
        // The line sender went with the run; the reporter now flushes and ends.
        let _ = tokio::time::timeout(Duration::from_secs(1), done).await;
    }
    fill(&mut result, &outcome, state.executor.grace());
    trail.finished(&audit::RunEnd {
        outcome: match outcome.stopped {
            Some(StopReason::Timeout) => audit::RunOutcome::TimedOut,
            Some(StopReason::Cancelled) => audit::RunOutcome::Cancelled,
            Some(StopReason::Shutdown) => audit::RunOutcome::Shutdown,
            None if outcome.exit_code.is_some() => audit::RunOutcome::Exited,
            None => audit::RunOutcome::Signalled,
        },
        exit_code: result.exit_code,
        signal: result.signal,
        duration_ms: result.duration_ms,
        stdout_bytes: outcome.stdout.len() as u64 + outcome.stdout_dropped,
        stderr_bytes: outcome.stderr.len() as u64 + outcome.stderr_dropped,
    });
    tracing::info!(
        client = %who.name, command = %result.command, exit_code = ?result.exit_code,
        duration_ms = result.duration_ms, timed_out = result.timed_out, cancelled = result.cancelled,
        "execute_command finished"
    );
    let text = render(&result);
    if result.exit_code == Some(0) && !result.timed_out && !result.cancelled {
        super::structured(&result, text)
    } else {
        super::structured_error(&result, text)
    }
}

struct Prepared<'a> {
    command: &'a CommandConfig,
    keys: Vec<LockKey>,
    /// Held shared: an isolated command's board VID:PID key.
    shared_keys: Vec<LockKey>,
    device: Option<DeviceId>,
    /// The board an isolated command runs on (its view holds only this one).
    isolate: Option<DeviceId>,
    spec: Spec,
    progress: Option<regex::Regex>,
    cancel: CancelPolicy,
    dry_run: bool,
}

impl Prepared<'_> {
    fn argv(&self) -> Vec<String> {
        std::iter::once(self.spec.binary.display().to_string())
            .chain(self.spec.args.iter().cloned())
            .collect()
    }
}

/// Every check that can refuse the call, in order; nothing has run when this fails.
fn prepare<'a>(
    config: &'a Config,
    state: &AppState,
    who: &ClientIdentity,
    req: ExecuteRequest,
) -> Result<Prepared<'a>, String> {
    let visible: Vec<&str> = config
        .commands
        .iter()
        .filter(|c| who.may_run(&c.name))
        .map(|c| c.name.as_str())
        .collect();
    let Some(command) = config
        .command(&req.command)
        .filter(|c| who.may_run(&c.name))
    else {
        return Err(format!(
            "unknown command {:?}. Commands you may run: {}. Call list_commands for their argument patterns.",
            req.command,
            if visible.is_empty() {
                "none".to_string()
            } else {
                visible.join(", ")
            }
        ));
    };
    // Checked now, not at load: a tool may be installed (or removed) while the server runs.
    if let Some(why) = crate::config::binary_problem(&command.binary) {
        return Err(format!(
            "command {:?} is configured but unavailable on this host: {why}. Ask the bench operator to install it.",
            command.name
        ));
    }
    let args = req.args.into_vec();
    let approved =
        sanitizer::check(command, &args, &config.file_roots).map_err(|e| e.to_string())?;
    let pattern = &command.patterns[approved.pattern_index];
    let limit = pattern.timeout.unwrap_or(command.timeout);
    let timeout = match req.timeout_secs {
        None => limit,
        Some(0) => return Err("timeout_secs must be at least 1".into()),
        Some(t) if Duration::from_secs(t) > limit => {
            return Err(format!(
                "timeout_secs {t} exceeds this command's limit of {} s; pass at most {} or omit it",
                limit.as_secs(),
                limit.as_secs()
            ));
        }
        Some(t) => Duration::from_secs(t),
    };
    let isolated = command.isolates(approved.pattern_index);
    let Locks {
        keys,
        shared_keys,
        device,
    } = if isolated {
        board_keys(config, state, command, req.device.as_deref())?
    } else {
        let (keys, device) = device_keys(config, state, command, req.device.as_deref())?;
        Locks {
            keys,
            shared_keys: vec![],
            device,
        }
    };
    Ok(Prepared {
        command,
        keys,
        shared_keys,
        isolate: device.clone().filter(|_| isolated),
        device,
        spec: Spec {
            binary: command.binary.clone(),
            args: approved.args,
            env: command.env.clone(),
            timeout,
            isolation: None,
        },
        progress: pattern
            .progress
            .clone()
            .or_else(|| command.progress.clone()),
        cancel: pattern.cancel.unwrap_or(command.cancel),
        dry_run: req.dry_run,
    })
}

/// The lock keys a command takes: those of the device it names, or of every attached device
/// of its class. A command with a class and no such device attached is refused.
fn device_keys(
    config: &Config,
    state: &AppState,
    command: &CommandConfig,
    device: Option<&str>,
) -> Result<(Vec<LockKey>, Option<DeviceId>), String> {
    let Some(class_name) = &command.device else {
        return match device {
            Some(_) => Err(format!(
                "command {:?} does not touch a device; omit `device`",
                command.name
            )),
            None => Ok((vec![], None)),
        };
    };
    let Some(class) = config.device_class(class_name) else {
        return Err(format!("device class {class_name:?} is not configured"));
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
    let pid = class
        .pid
        .map(|p| format!("{p:04x}"))
        .unwrap_or_else(|| "*".into());
    if let Some(d) = device {
        let id: DeviceId = d
            .parse()
            .map_err(|e: crate::devices::DeviceError| e.to_string())?;
        let Some(dev) = all.iter().find(|x| x.id == id) else {
            return Err(format!(
                "device {d} is not attached. Attached now: {}. Call list_devices, or wait_for_device for a board that is re-enumerating.",
                attached_list()
            ));
        };
        if !class.matches(dev.vid, dev.pid) {
            return Err(format!(
                "device {d} ({:04x}:{:04x}) is not a {class_name} device ({:04x}:{pid}); {:?} runs only on those",
                dev.vid, dev.pid, class.vid, command.name
            ));
        }
        return Ok((vec![lock_key_of(config, dev)], Some(id)));
    }
    let mut keys: Vec<LockKey> = all
        .iter()
        .filter(|d| class.matches(d.vid, d.pid))
        .map(|d| lock_key_of(config, d))
        .collect();
    if keys.is_empty() {
        return Err(format!(
            "no {class_name} device ({:04x}:{pid}) is attached, so {:?} has nothing to run on. Attached now: {}. \
             Plug the board in (in MaskROM or Loader mode), or call wait_for_device.",
            class.vid,
            command.name,
            attached_list()
        ));
    }
    keys.sort();
    keys.dedup();
    Ok((keys, None))
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
) -> Result<Locks, String> {
    let Some(class_name) = &command.device else {
        // Validation makes an isolated command name a class.
        return Err(format!(
            "command {:?} is isolated but names no device class; ask the bench operator to fix the config",
            command.name
        ));
    };
    let Some(class) = config.device_class(class_name) else {
        return Err(format!("device class {class_name:?} is not configured"));
    };
    let dev = match device {
        Some(_) => {
            // The same checks as for any device command: attached, of the class.
            let (_, id) = device_keys(config, state, command, device)?;
            id.and_then(|id| state.registry.get(&id))
                .ok_or_else(|| format!("device {} is not attached", device.unwrap_or("")))?
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
                    return Err(format!("no {class_name} device is attached"));
                }
                many => {
                    let ids: Vec<String> = many.iter().map(|d| d.id.to_string()).collect();
                    return Err(format!(
                        "{} {class_name} boards are attached ({}); {:?} runs on one board at a time and sees only that one: \
                         pass `device` (one of {}). list_devices shows which is which.",
                        many.len(),
                        ids.join(", "),
                        command.name,
                        ids.join(", ")
                    ));
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

/// The isolated view, for people (dry runs and results).
fn render_view(v: &View) -> String {
    let mut s = format!(
        "isolated view of board {} (bus {:03} device {:03}; {}):\n  {} holds only: {}\n",
        v.device,
        v.busnum,
        v.devnum,
        match v.privilege {
            Privilege::Root => "mount namespace",
            Privilege::UserNamespace => "user + mount namespace",
        },
        v.sysfs_listing,
        v.sysfs_entries.join(", ")
    );
    s.push_str(&format!(
        "  {} holds only: {}\n",
        v.usbfs_dir,
        v.device_nodes.join(", ")
    ));
    s
}

fn fill(result: &mut ExecuteResult, o: &Outcome, grace: Duration) {
    result.exit_code = if o.stopped.is_some() {
        None
    } else {
        o.exit_code
    };
    result.signal = o.signal;
    result.stdout = output::clean(&o.stdout);
    result.stderr = output::clean(&o.stderr);
    result.stdout_truncated = o.stdout_dropped > 0;
    result.stderr_truncated = o.stderr_dropped > 0;
    result.duration_ms = o.duration.as_millis() as u64;
    result.timed_out = o.stopped == Some(StopReason::Timeout);
    result.cancelled = matches!(
        o.stopped,
        Some(StopReason::Cancelled | StopReason::Shutdown)
    );
    let grace = grace.as_secs();
    result.stop_reason = match o.stopped {
        Some(StopReason::Timeout) => Some(format!(
            "timed out after {} s: the process group got SIGTERM, then SIGKILL after {grace} s; output so far is included",
            result.timeout_secs
        )),
        Some(StopReason::Cancelled) => Some(format!(
            "cancelled by the client after {} ms: the process group got SIGTERM, then SIGKILL after {grace} s",
            result.duration_ms
        )),
        Some(StopReason::Shutdown) => Some("stopped because the server is shutting down".into()),
        None => result.stop_reason.take(),
    };
}

fn render(r: &ExecuteResult) -> String {
    let mut s = format!("$ {}\n", shell_words(&r.argv));
    if let Some(v) = &r.isolated_view {
        s.push_str(&render_view(v));
    }
    match (&r.stop_reason, r.exit_code, r.signal) {
        (Some(why), _, _) if r.timed_out || r.cancelled => s.push_str(&format!("{why}\n")),
        (_, Some(c), _) => s.push_str(&format!("exit code {c} after {} ms\n", r.duration_ms)),
        (_, None, Some(sig)) => s.push_str(&format!(
            "killed by signal {sig} after {} ms\n",
            r.duration_ms
        )),
        _ => s.push_str(&format!("ended after {} ms\n", r.duration_ms)),
    }
    for (name, text, cut) in [
        ("stdout", &r.stdout, r.stdout_truncated),
        ("stderr", &r.stderr, r.stderr_truncated),
    ] {
        if !text.is_empty() {
            s.push_str(&format!(
                "--- {name}{} ---\n{text}",
                if cut { " (truncated)" } else { "" }
            ));
            if !text.ends_with('\n') {
                s.push('\n');
            }
        }
    }
    s
}

/// Argv as one line, quoting words with spaces (for display only; nothing is run through a shell).
fn shell_words(argv: &[String]) -> String {
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
