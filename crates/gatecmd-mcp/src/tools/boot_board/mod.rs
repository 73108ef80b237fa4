//! `boot_board {board, to: maskrom|uboot|shell|off}`: drives a leased board to a state with
//! what its configuration offers (src/boards/boot.rs plans the steps), each step a normal
//! gatecmd action: the board key held for the whole call under the caller's lease, power
//! and MaskROM commands through the executor and the sanitizer, every step audited.

use std::time::{Duration, Instant};

use rmcp::handler::server::tool::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::calls::answer::{refusal, structured, structured_error};
use crate::calls::approvals;
use crate::calls::power_refusal::PowerError;
use crate::console::board_talk::{Leased, TalkRefusal, take_board, talk_refusal};
use crate::server::handler::{GatecmdServer, session_id};
use gatecmd_core::identity::ClientIdentity;
use gatecmd_core::refusal::{Classified, Refusal, RefusalReason};
use gatecmd_devices::{DeviceId, RockchipMode};
use gatecmd_domain::approvals::NewRequest;
use gatecmd_domain::audit::{BootOutcome, BootRecord, BootStep, PowerVia, RefusedDetail};
use gatecmd_domain::boards::PowerState;
use gatecmd_domain::boards::boot::{Now, Step, Target, Unreachable, plan};
use gatecmd_domain::config::power::{action_spec, switch_spec};
use gatecmd_domain::config::{Config, MAX_BOOT_TIMEOUT_SECS};
use gatecmd_domain::config::{Gated, GatedTool, approval_rule};
use gatecmd_domain::console::session::{self, TalkError, Wait, last_line_since, watch};
use gatecmd_domain::console::shell::{Prompts, Seen};
use gatecmd_domain::console::{Console, ConsoleState, uboot};
use gatecmd_domain::exec::{ExecError, Spec};
use gatecmd_domain::locks::SessionId;
use gatecmd_domain::locks::{LeaseId, LockKey};
use gatecmd_domain::state::AppState;
use gatecmd_domain::usecases::power::{Audited, PowerFailure, run_power};

/// How long a newline is answered before the console counts as showing no prompt.
const PROBE_WAIT: Duration = Duration::from_secs(2);

/// Arguments of `boot_board`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BootRequest {
    /// A board name from list_boards; you must hold its lease.
    pub board: String,
    /// recovery (the board's recovery or flashing mode, any family: power.recovery),
    /// maskrom (a Rockchip's boot ROM USB device), uboot (U-Boot's prompt), shell (a login or
    /// shell prompt; board_run logs in), off.
    pub to: Target,
    /// Longest wait in seconds (default: the board's console.boot_timeout_secs, 120).
    #[serde(default)]
    pub timeout_secs: Option<u64>,
    /// Your board lease (from lock_board); a 2025-11-25 session that took it may omit it.
    #[serde(default)]
    pub lease: Option<String>,
    /// Why, shown to the approver when an approval rule holds for this call
    /// (docs/APPROVALS.md); ignored otherwise.
    #[serde(default)]
    pub note: Option<String>,
}

/// Result of `boot_board` (or a refusal in its place).
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(transform = crate::calls::answer::or_refusal)]
pub struct BootResult {
    pub board: String,
    /// The state reached (the one asked for, when the call succeeded).
    pub state: Target,
    pub took_ms: u64,
    /// Console cursor where this call's console output begins (the boot log): pass it to
    /// console_read. Null for a board without a console.
    pub console_cursor: Option<u64>,
    /// What was done, in order (`power_off`, `power_on`, `maskrom`, `await_maskrom`,
    /// `stop_autoboot`, `await_shell`); empty when the board was there already.
    pub steps: Vec<String>,
    /// The report of the boot this call's power-on started (boot_report has its transcript).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boot: Option<gatecmd_domain::boots::BootSummary>,
}

#[tool_router(router = boot_board_router, vis = "pub(crate)")]
impl GatecmdServer {
    /// Drives a leased board to recovery, maskrom, uboot, shell or off.
    #[tool(
        description = "Bring a leased board to a state: recovery (its recovery or flashing mode, any family: \
                       power.recovery's command, then the family and mode it names must enumerate at the board's \
                       usb port; a Rockchip's power.maskrom serves too), maskrom (a Rockchip's rockusb device in \
                       MaskROM mode, through power.maskrom), uboot (power cycle, autoboot interrupted, U-Boot's prompt), shell (power \
                       cycle unless a login or shell prompt already answers, then the login prompt awaited), or \
                       off. Uses only what the board's config offers and says what is missing when a state cannot \
                       be reached. Returns the state, took_ms and the console cursor where the boot log starts.",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = true),
        output_schema = schema_for_output::<BootResult>()
    )]
    async fn boot_board(
        &self,
        Parameters(req): Parameters<BootRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        Ok(boot(&self.state, &who, session_id(&ctx), req, &ctx).await)
    }
}

/// Why `boot_board` said no, beyond what every console conversation tool may answer
/// ([`TalkRefusal`]): the steps that switch power and wait for MaskROM.
#[derive(Debug, thiserror::Error)]
pub enum BootRefusal {
    #[error(transparent)]
    Talk(#[from] TalkRefusal),
    /// What `boot_board` would need is not configured (`plan` names it).
    #[error("{0}")]
    CannotReach(#[from] Unreachable),
    #[error("board {board:?} has no power.maskrom")]
    NoMaskrom { board: String },
    #[error("{0}")]
    Power(#[from] PowerError),
    /// A power or MaskROM command ran and failed.
    #[error("{argv} exited with {exit_code:?}: {output}")]
    PowerFailed {
        argv: String,
        exit_code: Option<i32>,
        output: String,
    },
    #[error("{argv}: {error}")]
    PowerStart { argv: String, error: ExecError },
    #[error("cancelled while waiting for MaskROM")]
    CancelledWaitingMaskrom,
    #[error("cancelled while waiting for the board's recovery mode")]
    CancelledWaitingRecovery,
    #[error(
        "board {board}: waited for {want} at usb port {usb}; the port shows {shows}. Check that the \
         board's power.recovery action does what it says (a button held, a strap), and that the \
         family and mode it names are what this board's ROM or bootloader presents (list_devices)"
    )]
    NoRecoveryInTime {
        board: String,
        usb: String,
        want: String,
        shows: String,
    },
    /// The boot this call started went wrong (docs/BOARDS.md "Boot reports").
    #[error(
        "board {board}: boot {boot} ended {outcome}: {fault}; boot_report {{board: {board:?}, boot: {boot}}} \
         has its stages and transcript"
    )]
    BootFailed {
        board: String,
        boot: u64,
        outcome: &'static str,
        fault: String,
    },
    #[error(
        "board {board}: waited for the rockusb device in MaskROM mode at usb port {usb}; the port shows {shows}"
    )]
    NoMaskromInTime {
        board: String,
        usb: String,
        shows: String,
    },
}

impl Classified for BootRefusal {
    fn reason(&self) -> RefusalReason {
        use RefusalReason as R;
        match self {
            BootRefusal::Talk(e) => e.reason(),
            BootRefusal::CannotReach(_) | BootRefusal::NoMaskrom { .. } => R::NotConfigured,
            BootRefusal::Power(e) => e.reason(),
            BootRefusal::PowerFailed { .. } | BootRefusal::PowerStart { .. } => R::StartFailed,
            BootRefusal::CancelledWaitingMaskrom | BootRefusal::CancelledWaitingRecovery => {
                R::Cancelled
            }
            BootRefusal::NoMaskromInTime { .. } | BootRefusal::NoRecoveryInTime { .. } => {
                R::Timeout
            }
            BootRefusal::BootFailed { .. } => R::WrongState,
        }
    }
}

fn step_name(s: Step) -> &'static str {
    match s {
        Step::PowerOff => "power_off",
        Step::PowerOn => "power_on",
        Step::Maskrom => "maskrom",
        Step::AwaitMaskrom => "await_maskrom",
        Step::Recovery => "recovery",
        Step::AwaitRecovery => "await_recovery",
        Step::StopAutoboot => "stop_autoboot",
        Step::AwaitShell => "await_shell",
    }
}

/// What the board shows now: the rockusb mode at its port, and its console's answer.
async fn look(state: &AppState, l: &Leased, target: Target, cancel: &CancellationToken) -> Now {
    let rockusb = state
        .registry
        .get(&l.board.usb)
        .and_then(|d| d.rockusb_mode());
    let device = state
        .registry
        .get(&l.board.usb)
        .and_then(|d| d.family.map(|f| (f, d.mode)));
    let mut now = Now {
        rockusb,
        device,
        ..Now::default()
    };
    let wants_console = matches!(target, Target::Shell | Target::Uboot);
    if let Some(c) = l
        .console
        .as_ref()
        .filter(|c| wants_console && c.view().state == ConsoleState::Open)
    {
        let wait = Wait {
            deadline: tokio::time::Instant::now() + PROBE_WAIT,
            cancel,
        };
        match session::probe(c, &l.prompts, &wait).await {
            Ok(Seen::Uboot) => now.at_uboot = true,
            Ok(Seen::Shell(_) | Seen::Login) => now.at_shell = true,
            _ => {}
        }
    }
    now
}

/// `boot_board`.
pub async fn boot(
    state: &AppState,
    who: &ClientIdentity,
    session: Option<SessionId>,
    req: BootRequest,
    ctx: &RequestContext<RoleServer>,
) -> CallToolResult {
    let cancel = &ctx.ct;
    let started = Instant::now();
    let record = |outcome: BootOutcome<'_>| {
        state.audit.record(&BootRecord {
            client: &who.name,
            board: &req.board,
            to: req.to.as_str(),
            outcome,
        });
    };
    let refuse = |r: Refusal| {
        record(BootOutcome::Refused(RefusedDetail {
            reason: r.reason.as_str(),
            message: &r.message,
        }));
        refusal(r)
    };
    if let Some(secs) = req.timeout_secs
        && (secs == 0 || secs > MAX_BOOT_TIMEOUT_SECS)
    {
        let e = TalkRefusal::TimeoutOutOfRange {
            given: secs,
            max: MAX_BOOT_TIMEOUT_SECS,
        };
        return refuse(e.into());
    }
    let config = state.config();
    if let Some(r) = await_approval(state, &config, who, session.clone(), &req, ctx).await {
        return refuse(r);
    }
    let leased = match take_board(
        state,
        &config,
        who,
        session,
        &req.board,
        req.lease.as_deref(),
        "boot_board",
    )
    .await
    {
        Ok(l) => l,
        Err(r) => return refuse(r),
    };
    let timeout = req
        .timeout_secs
        .map(Duration::from_secs)
        .unwrap_or(leased.board.shell.boot_timeout);
    let deadline = tokio::time::Instant::now() + timeout;
    let now = look(state, &leased, req.to, cancel).await;
    let steps = match plan(&leased.board, req.to, now) {
        Ok(s) => s,
        Err(missing) => return refuse(BootRefusal::from(missing).into()),
    };
    let cursor = leased.console.as_ref().map(|c| c.bounds().1);
    let mut done = Vec::new();
    // What a boot prints is looked for from just before the power comes on: an answer to
    // the probe arriving late must not pass for the new boot's prompt.
    let mut from = cursor.unwrap_or(0);
    let mut boot_n = None;
    for step in steps {
        if step == Step::PowerOn
            && let Some(c) = &leased.console
        {
            from = c.bounds().1;
        }
        if step == Step::PowerOn {
            let to = format!("to {}", req.to.as_str());
            let trigger = gatecmd_domain::boots::Trigger::action("boot_board", &who.name, &to);
            boot_n = state.boots.power_on(&req.board, trigger);
        }
        let r = match (step, boot_n) {
            // A boot that panics or resets fails the wait for its shell at once, naming why.
            (Step::AwaitShell, Some(n)) => tokio::select! {
                r = run_step(state, &config, &leased, step, from, deadline, cancel) => r,
                s = state.boots.failed(&req.board, n) => Err(boot_failed(s)),
            },
            _ => run_step(state, &config, &leased, step, from, deadline, cancel).await,
        };
        let logged = BootStep {
            step: step_name(step),
            error: r.as_ref().err().map(|e| e.message.as_str()),
        };
        record(if r.is_ok() {
            BootOutcome::Step(logged)
        } else {
            BootOutcome::StepFailed(logged)
        });
        match r {
            Ok(()) => done.push(step_name(step).to_string()),
            Err(e) => {
                drop(leased.guard);
                let mut result = BootResult {
                    board: req.board.clone(),
                    state: req.to,
                    took_ms: started.elapsed().as_millis() as u64,
                    console_cursor: cursor,
                    steps: done,
                    boot: boot_n.and_then(|n| state.boots.summary(&req.board, Some(n)).ok()),
                };
                result.state = reached(state, &req.board, req.to);
                let text = format!(
                    "boot_board {} to {}: step {} failed after {} ms: {}",
                    req.board,
                    req.to.as_str(),
                    step_name(step),
                    result.took_ms,
                    e.message
                );
                return if e.reason == RefusalReason::NotConfigured {
                    refusal(e)
                } else {
                    structured_error(&result, text)
                };
            }
        }
    }
    drop(leased.guard);
    let result = BootResult {
        board: req.board.clone(),
        state: req.to,
        took_ms: started.elapsed().as_millis() as u64,
        console_cursor: cursor,
        steps: done,
        boot: boot_n.and_then(|n| state.boots.summary(&req.board, Some(n)).ok()),
    };
    record(BootOutcome::Reached {
        took_ms: result.took_ms,
        steps: &result.steps,
    });
    let text = format!(
        "boot_board {}: {} in {} ms ({}){}",
        req.board,
        req.to.as_str(),
        result.took_ms,
        if result.steps.is_empty() {
            "already there".to_string()
        } else {
            result.steps.join(", ")
        },
        cursor
            .map(|c| format!("; the console's output of this call starts at cursor {c}"))
            .unwrap_or_default()
    );
    structured(&result, text)
}

/// The refusal of a boot that panicked or reset, naming its first such fault and line.
fn boot_failed(s: gatecmd_domain::boots::BootSummary) -> Refusal {
    use gatecmd_domain::boots::FaultKind;
    let fault = s
        .faults
        .iter()
        .find(|f| matches!(f.kind, FaultKind::KernelPanic | FaultKind::Reset))
        .or(s.faults.first())
        .map(|f| format!("{} at {} ms: {:?}", f.kind.as_str(), f.at_ms, f.line))
        .unwrap_or_else(|| {
            format!(
                "the {} boots before it reset before login",
                s.resets_in_a_row
            )
        });
    BootRefusal::BootFailed {
        board: s.board.clone(),
        boot: s.boot,
        outcome: s.outcome.as_str(),
        fault,
    }
    .into()
}

/// The best description of where a failed call left the board.
/// When an `approvals:` rule holds for this boot (docs/APPROVALS.md): checks the caller's
/// lease (taking the board's key, and letting it go again: nothing is held while a person
/// decides) and waits for the yes in the call. `Some` is the refusal. Nothing is done to
/// the board before the yes — the console is not even probed, so the plan is made after
/// it, on the board as it is then.
async fn await_approval(
    state: &AppState,
    config: &Config,
    who: &ClientIdentity,
    session: Option<SessionId>,
    req: &BootRequest,
    ctx: &RequestContext<RoleServer>,
) -> Option<Refusal> {
    let board = config.board(&req.board)?;
    let what = Gated::Tool {
        tool: GatedTool::BootBoard,
        action: req.to.as_str(),
    };
    let rule = approval_rule(&config.approvals, what, &[board])?;
    let lease = req.lease.as_deref();
    let leased = match take_board(
        state,
        config,
        who,
        session,
        &board.name,
        lease,
        "boot_board",
    )
    .await
    {
        Ok(l) => l,
        Err(r) => return Some(r),
    };
    drop(leased);
    let key = LockKey::Board(board.name.clone());
    let lease = req.lease.clone().map(LeaseId);
    let watch = approvals::LeaseWatch::find(state, std::slice::from_ref(&key), lease.as_ref());
    let spec = NewRequest {
        client: who.name.clone(),
        note: req.note.clone(),
        tool: "boot_board".into(),
        what: format!("boot_board {} to {}", board.name, req.to.as_str()),
        argv: None,
        board: Some(board.name.clone()),
        holder: approvals::board_holder(state, &board.name),
        files: vec![],
        rule: rule.describe(),
        approvers: rule.by.clone(),
        timeout: rule.timeout,
        job: None,
    };
    approvals::wait_in_call(state, spec, watch, ctx).await.err()
}

fn reached(state: &AppState, board: &str, asked: Target) -> Target {
    match state.boards.power_state(board) {
        PowerState::Off => Target::Off,
        _ => asked,
    }
}

async fn run_step(
    state: &AppState,
    config: &Config,
    l: &Leased,
    step: Step,
    from: u64,
    deadline: tokio::time::Instant,
    cancel: &CancellationToken,
) -> Result<(), Refusal> {
    let name = &l.board.name;
    let wait = Wait { deadline, cancel };
    let console = || -> Result<&Console, Refusal> {
        l.console.as_ref().ok_or_else(|| {
            TalkRefusal::NoConsole {
                board: name.clone(),
            }
            .into()
        })
    };
    match step {
        Step::PowerOff => {
            power_step(
                state,
                name,
                switch_spec(config, &l.board, false)
                    .map_err(|e| BootRefusal::from(PowerError::from(e)))?,
                PowerState::Off,
                cancel,
            )
            .await
        }
        Step::PowerOn => {
            power_step(
                state,
                name,
                switch_spec(config, &l.board, true)
                    .map_err(|e| BootRefusal::from(PowerError::from(e)))?,
                PowerState::On,
                cancel,
            )
            .await
        }
        Step::Maskrom => {
            let Some(action) = &l.board.maskrom else {
                let e = BootRefusal::NoMaskrom {
                    board: name.clone(),
                };
                return Err(e.into());
            };
            power_step(
                state,
                name,
                action_spec(config, action).map_err(|e| BootRefusal::from(PowerError::from(e)))?,
                PowerState::On,
                cancel,
            )
            .await
        }
        Step::AwaitMaskrom => await_maskrom(state, &l.board.usb, name, &wait).await,
        Step::Recovery => {
            let Some(r) = l.board.recovery() else {
                let e = BootRefusal::CannotReach(Unreachable {
                    board: name.clone(),
                    target: "recovery",
                    needs: vec!["power.recovery or power.maskrom"],
                });
                return Err(e.into());
            };
            power_step(
                state,
                name,
                action_spec(config, &r.action)
                    .map_err(|e| BootRefusal::from(PowerError::from(e)))?,
                PowerState::On,
                cancel,
            )
            .await
        }
        Step::AwaitRecovery => match l.board.recovery() {
            Some(r) => await_recovery(state, &l.board.usb, name, r.family, r.mode, &wait).await,
            None => Ok(()),
        },
        Step::StopAutoboot => {
            let c = console()?;
            uboot::stop_autoboot(c, &l.prompts, &l.board.shell.uboot.interrupt, from, &wait)
                .await
                .map_err(|e| talk_refusal(name, e))
        }
        Step::AwaitShell => {
            let c = console()?;
            await_shell(c, &l.prompts, from, &wait)
                .await
                .map_err(|e| talk_refusal(name, e))
        }
    }
}

/// One power or MaskROM command, through the domain's power runner; its failure worded
/// as `boot_board`'s.
async fn power_step(
    state: &AppState,
    board: &str,
    spec: Spec,
    after: PowerState,
    cancel: &CancellationToken,
) -> Result<(), Refusal> {
    let run = run_power(
        state,
        board,
        &spec,
        after,
        cancel.clone(),
        Audited::Step(PowerVia::BootBoard),
    )
    .await;
    run.into_result().map_err(|f| match f {
        PowerFailure::Failed {
            argv,
            exit_code,
            output,
        } => BootRefusal::PowerFailed {
            argv,
            exit_code,
            output,
        }
        .into(),
        PowerFailure::NotStarted { argv, error } => BootRefusal::PowerStart { argv, error }.into(),
    })
}

/// Waits for the rockusb device in MaskROM mode at `id`.
async fn await_maskrom(
    state: &AppState,
    id: &DeviceId,
    board: &str,
    wait: &Wait<'_>,
) -> Result<(), Refusal> {
    let mut events = state.registry.subscribe();
    loop {
        if state.registry.get(id).and_then(|d| d.rockusb_mode()) == Some(RockchipMode::MaskRom) {
            return Ok(());
        }
        tokio::select! {
            _ = wait.cancel.cancelled() => {
                return Err(BootRefusal::CancelledWaitingMaskrom.into());
            }
            r = events.recv() => {
                if let Err(tokio::sync::broadcast::error::RecvError::Closed) = r {
                    // The monitor stopped: look again at the deadline only.
                    tokio::time::sleep_until(wait.deadline).await;
                }
            }
            _ = tokio::time::sleep_until(wait.deadline) => {
                let now = state.registry.get(id).map(|d| d.rockusb_mode().map(|m| m.to_string()).unwrap_or_else(|| "a non-rockusb device".into()));
                return Err(BootRefusal::NoMaskromInTime {
                    board: board.to_string(),
                    usb: id.to_string(),
                    shows: now.unwrap_or_else(|| "nothing".into()),
                }
                .into());
            }
        }
    }
}

/// Waits for a device of `family` (and `mode`, when given) at `id`.
async fn await_recovery(
    state: &AppState,
    id: &DeviceId,
    board: &str,
    family: &'static str,
    mode: Option<&'static str>,
    wait: &Wait<'_>,
) -> Result<(), Refusal> {
    let is_it = |d: &gatecmd_devices::Device| {
        d.family == Some(family) && mode.is_none_or(|m| d.mode == Some(m))
    };
    let mut events = state.registry.subscribe();
    loop {
        if state.registry.get(id).is_some_and(|d| is_it(&d)) {
            return Ok(());
        }
        tokio::select! {
            _ = wait.cancel.cancelled() => {
                return Err(BootRefusal::CancelledWaitingRecovery.into());
            }
            r = events.recv() => {
                if let Err(tokio::sync::broadcast::error::RecvError::Closed) = r {
                    tokio::time::sleep_until(wait.deadline).await;
                }
            }
            _ = tokio::time::sleep_until(wait.deadline) => {
                let shows = match state.registry.get(id) {
                    None => "nothing".to_string(),
                    Some(d) => format!(
                        "{:04x}:{:04x}, family {}, mode {}",
                        d.vid,
                        d.pid,
                        d.family.unwrap_or("none"),
                        d.mode.unwrap_or("none")
                    ),
                };
                let want = match mode {
                    Some(m) => format!("a {family} device in mode {m}"),
                    None => format!("a {family} device"),
                };
                return Err(BootRefusal::NoRecoveryInTime {
                    board: board.to_string(),
                    usb: id.to_string(),
                    want,
                    shows,
                }
                .into());
            }
        }
    }
}

/// Waits for a login or shell prompt in the output from `from` on.
async fn await_shell(
    console: &Console,
    prompts: &Prompts,
    from: u64,
    wait: &Wait<'_>,
) -> Result<(), TalkError> {
    let awaited = format!(
        "a login prompt /{}/ or shell prompt /{}/ after power-on",
        prompts.login.as_str(),
        prompts.shell.as_str()
    );
    watch(console, wait, &awaited, || {
        matches!(
            prompts.classify(&last_line_since(console, from)),
            Some(Seen::Login | Seen::Shell(_))
        )
        .then_some(())
    })
    .await
}
