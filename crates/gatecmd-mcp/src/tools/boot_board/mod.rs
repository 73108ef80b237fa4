//! `boot_board {board, to: maskrom|recovery|uboot|shell|off}`: drives a leased board to a
//! state with what its configuration offers, each step a normal gatecmd action: the board
//! key held for the whole call under the caller's lease, power and MaskROM commands
//! through the executor and the sanitizer, every step audited. The work is the domain's
//! (`gatecmd_domain::usecases::boot`, the plan in `gatecmd_domain::boards::boot`); this
//! folder holds the request, the answer and the approval round trip (here) and the
//! wording of its refusals (`refusal.rs`).

use std::time::Duration;

use rmcp::handler::server::tool::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::calls::answer::{refusal, structured, structured_error};
use crate::calls::approvals;
use crate::console::board_talk::{TalkRefusal, take_board};
use crate::handler::{GatecmdServer, session_id};
use gatecmd_core::identity::ClientIdentity;
use gatecmd_core::refusal::{Refusal, RefusalReason};
use gatecmd_domain::approvals::NewRequest;
use gatecmd_domain::audit::{BootOutcome, BootStep, RefusedDetail};
use gatecmd_domain::boards::boot::Target;
use gatecmd_domain::config::{Config, Gated, GatedTool, MAX_BOOT_TIMEOUT_SECS, approval_rule};
use gatecmd_domain::locks::{LeaseId, LockKey, SessionId};
use gatecmd_domain::state::AppState;
use gatecmd_domain::usecases::boot::{self, Ask, BootFailure, Booted, OnBoard};

mod refusal;

pub use refusal::BootRefusal;
use refusal::refusal_of;

/// Arguments of `boot_board`.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
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
    pub boot: Option<gatecmd_domain::boards::boot_reports::BootSummary>,
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
        if let Some(r) = crate::lab::forward::remote_call(
            &self.state,
            &who,
            "boot_board",
            &req,
            req.timeout_secs.unwrap_or(120),
        )
        .await
        {
            return Ok(r);
        }
        Ok(boot(&self.state, &who, session_id(&ctx), req, &ctx).await)
    }
}

/// `boot_board`.
pub async fn boot(
    state: &AppState,
    who: &ClientIdentity,
    session: Option<SessionId>,
    req: BootRequest,
    ctx: &RequestContext<RoleServer>,
) -> CallToolResult {
    let record = |o: BootOutcome<'_>| boot::record(state, &who.name, &req.board, req.to, o);
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
    let lease = req.lease.as_deref();
    let l = match take_board(
        state,
        &config,
        who,
        session,
        &req.board,
        lease,
        "boot_board",
    )
    .await
    {
        Ok(l) => l,
        Err(r) => return refuse(r),
    };
    let on = OnBoard {
        board: l.board,
        console: l.console,
        prompts: l.prompts,
        guard: l.guard,
    };
    let to = req.to;
    let ask = Ask {
        client: &who.name,
        action: "boot_board",
        to,
        timeout: req.timeout_secs.map(Duration::from_secs),
    };
    let failed = match boot::boot(state, &config, on, &ask, &ctx.ct).await {
        Ok(done) => {
            let r = result_of(&req.board, done);
            let steps = if r.steps.is_empty() {
                "already there".to_string()
            } else {
                r.steps.join(", ")
            };
            let cursor = r
                .console_cursor
                .map(|c| format!("; the console's output of this call starts at cursor {c}"));
            let text = format!(
                "boot_board {}: {} in {} ms ({steps}){}",
                req.board,
                to.as_str(),
                r.took_ms,
                cursor.unwrap_or_default()
            );
            return structured(&r, text);
        }
        Err(BootFailure::Unplanned(missing)) => return refuse(BootRefusal::from(missing).into()),
        Err(BootFailure::Step(f)) => *f,
    };
    let step = boot::step_name(failed.step);
    let e = refusal_of(&req.board, failed.error);
    record(BootOutcome::StepFailed(BootStep {
        step,
        error: Some(&e.message),
    }));
    let r = result_of(&req.board, failed.left);
    let text = format!(
        "boot_board {} to {}: step {step} failed after {} ms: {}",
        req.board,
        to.as_str(),
        r.took_ms,
        e.message
    );
    match e.reason {
        RefusalReason::NotConfigured => refusal(e),
        _ => structured_error(&r, text),
    }
}

fn result_of(board: &str, b: Booted) -> BootResult {
    BootResult {
        board: board.to_string(),
        state: b.state,
        took_ms: b.took.as_millis() as u64,
        console_cursor: b.console_cursor,
        steps: b.steps.iter().map(|s| boot::step_name(*s).into()).collect(),
        boot: b.boot,
    }
}

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
    let (name, to) = (&board.name, req.to.as_str());
    let what = Gated::Tool {
        tool: GatedTool::BootBoard,
        action: to,
    };
    let rule = approval_rule(&config.approvals, what, &[board])?;
    let lease = req.lease.as_deref();
    if let Err(r) = take_board(state, config, who, session, name, lease, "boot_board").await {
        return Some(r);
    }
    let key = [LockKey::Board(name.clone())];
    let watch = approvals::LeaseWatch::find(state, &key, req.lease.clone().map(LeaseId).as_ref());
    let spec = NewRequest {
        client: who.name.clone(),
        note: req.note.clone(),
        tool: "boot_board".into(),
        what: format!("boot_board {name} to {to}"),
        argv: None,
        board: Some(name.clone()),
        holder: approvals::board_holder(state, name),
        files: vec![],
        rule: rule.describe(),
        approvers: rule.by.clone(),
        timeout: rule.timeout,
        job: None,
    };
    approvals::wait_in_call(state, spec, watch, ctx).await.err()
}
