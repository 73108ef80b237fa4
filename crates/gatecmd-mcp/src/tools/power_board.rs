//! `power_board`: switch a board off, on, or off-wait-on, through the executor like any
//! command (the command lines are its power backend's, `gatecmd_domain::config::power`),
//! under the caller's board lease, audited. The work is the domain's
//! (`gatecmd_domain::usecases::power::switch`); this file holds the request, the answer,
//! the approval round trip and the wording.

use rmcp::handler::server::tool::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::calls::answer::{refusal, structured, structured_error};
use crate::calls::approvals;
use crate::calls::power_refusal::PowerError;
use crate::handler::{GatecmdServer, session_id};
use gatecmd_core::identity::ClientIdentity;
use gatecmd_core::refusal::{Refusal, RefusalReason};
use gatecmd_domain::approvals::NewRequest;
use gatecmd_domain::audit::{PowerOutcome, PowerRecord};
use gatecmd_domain::boards::PowerState;
use gatecmd_domain::config::{Config, Gated, GatedTool, approval_rule};
use gatecmd_domain::locks::{LeaseId, LockKey, SessionId};
use gatecmd_domain::state::AppState;
use gatecmd_domain::usecases::power::switch::{self, Plan, Switch, SwitchError, state_name};
use gatecmd_domain::usecases::take::Caller;

/// What to do with the power.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PowerVerb {
    On,
    Off,
    /// Off, wait `off_secs`, on.
    Cycle,
}

impl From<PowerVerb> for Switch {
    fn from(v: PowerVerb) -> Switch {
        match v {
            PowerVerb::On => Switch::On,
            PowerVerb::Off => Switch::Off,
            PowerVerb::Cycle => Switch::Cycle,
        }
    }
}

/// Arguments of `power_board`.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PowerRequest {
    /// A board name from list_boards.
    pub board: String,
    pub action: PowerVerb,
    /// For cycle: seconds between off and on (default 2, at most 300).
    #[serde(default)]
    pub off_secs: Option<u64>,
    /// Your board lease (from lock_board); a 2025-11-25 session that took it may omit it.
    #[serde(default)]
    pub lease: Option<String>,
    /// Why, shown to the approver when an approval rule holds for this action
    /// (docs/APPROVALS.md); ignored otherwise.
    #[serde(default)]
    pub note: Option<String>,
}

/// Result of `power_board` (or a refusal in its place).
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(transform = crate::calls::answer::or_refusal)]
pub struct PowerResult {
    pub board: String,
    pub action: PowerVerb,
    /// The board's power state after the action: on, off or unknown (an action failed).
    pub state: PowerState,
    /// The command lines run, in order (two for a cycle).
    pub argv: Vec<Vec<String>>,
    /// Exit code of the last command run.
    pub exit_code: Option<i32>,
    /// Output of the commands, cleaned, for a failure's reason.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub output: String,
    pub duration_ms: u64,
}

#[tool_router(router = power_board_router, vis = "pub(crate)")]
impl GatecmdServer {
    /// Switches a board's power.
    #[tool(
        description = "Switch a leased board's power: on, off, or cycle (off, wait off_secs (default 2), on), \
                       through its configured switch (uhubctl or on/off commands). Needs your lock_board lease. \
                       Returns the state and the command lines run.",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false),
        output_schema = schema_for_output::<PowerResult>()
    )]
    async fn power_board(
        &self,
        Parameters(req): Parameters<PowerRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        if let Some(r) = crate::lab::forward::remote_call(
            &self.state,
            &who,
            "power_board",
            &req,
            req.off_secs.unwrap_or(0),
        )
        .await
        {
            return Ok(r);
        }
        Ok(power(&self.state, &who, session_id(&ctx), req, &ctx).await)
    }
}

/// `power_board`.
pub async fn power(
    state: &AppState,
    who: &ClientIdentity,
    session: Option<SessionId>,
    req: PowerRequest,
    ctx: &RequestContext<RoleServer>,
) -> CallToolResult {
    let config = state.config();
    let caller = || Caller {
        client: &who.name,
        session: session.clone(),
        lease: req.lease.as_deref(),
        tool: "power_board",
    };
    let plan = match switch::plan(&config, &req.board, req.action.into(), req.off_secs) {
        Ok(p) => p,
        // Refused before the board is known to be switchable: not audited.
        Err(e @ (SwitchError::UnknownBoard(_) | SwitchError::OffTooLong { .. })) => {
            return refusal(refusal_of(e));
        }
        Err(e) => return refused(state, who, &req, refusal_of(e)),
    };
    if let Err(r) = approved(state, &config, &plan, caller(), &req, ctx).await {
        return refused(state, who, &req, r);
    }
    // The board key is held for the whole action, under the caller's lease: no command of
    // the same lease runs between off and on.
    let done = match switch::run(state, &config, &plan, caller(), ctx.ct.clone()).await {
        Ok(d) => d,
        Err(e) => return refused(state, who, &req, refusal_of(e)),
    };
    let mut output = done.output;
    if done.cancelled_while_off {
        output.push_str("cancelled while off; the board stays off\n");
    }
    let result = PowerResult {
        board: plan.board.name.clone(),
        action: req.action,
        state: done.state,
        argv: plan.argv.clone(),
        exit_code: done.exit_code,
        output,
        duration_ms: done.took.as_millis() as u64,
    };
    let text = format!(
        "power_board {} {}: {} (state {}, {} ms){}\n",
        result.board,
        plan.switch.as_str(),
        if done.ok { "done" } else { "failed" },
        state_name(result.state),
        result.duration_ms,
        if result.output.is_empty() {
            String::new()
        } else {
            format!("\n{}", result.output)
        }
    );
    if done.ok {
        structured(&result, text)
    } else {
        structured_error(&result, text)
    }
}

/// When an `approvals:` rule holds for this action (docs/APPROVALS.md): every check that
/// can refuse has passed and nothing was switched; the lease is checked, the call waits
/// for a yes, then only the same command lines may run (the lease is checked again when
/// the board is taken).
async fn approved(
    state: &AppState,
    config: &Config,
    plan: &Plan,
    caller: Caller<'_>,
    req: &PowerRequest,
    ctx: &RequestContext<RoleServer>,
) -> Result<(), Refusal> {
    let action = plan.switch.as_str();
    let what = Gated::Tool {
        tool: GatedTool::PowerBoard,
        action,
    };
    let Some(rule) = approval_rule(&config.approvals, what, &[&plan.board]) else {
        return Ok(());
    };
    switch::lease_held(state, plan, &caller).map_err(refusal_of)?;
    let board = &plan.board.name;
    let spec = NewRequest {
        client: caller.client.to_string(),
        note: req.note.clone(),
        tool: "power_board".into(),
        what: format!("power_board {board} {action}"),
        argv: Some(plan.argv.iter().map(|a| a.join(" ")).collect()),
        board: Some(board.clone()),
        holder: approvals::board_holder(state, board),
        files: vec![],
        rule: rule.describe(),
        approvers: rule.by.clone(),
        timeout: rule.timeout,
        job: None,
    };
    let key = [LockKey::Board(board.clone())];
    let watch = approvals::LeaseWatch::find(state, &key, req.lease.clone().map(LeaseId).as_ref());
    approvals::wait_in_call(state, spec, watch, ctx).await?;
    switch::unchanged(state, plan).map_err(refusal_of)
}

/// A switch's failure, worded for the agent.
fn refusal_of(e: SwitchError) -> Refusal {
    match e {
        SwitchError::UnknownBoard(e) => PowerError::from(e).into(),
        SwitchError::OffTooLong { off_secs, max } => {
            PowerError::OffTooLong { off_secs, max }.into()
        }
        SwitchError::Spec(e) => PowerError::from(e).into(),
        SwitchError::Lease(e) => PowerError::from(e).into(),
        SwitchError::Lock(e) => PowerError::from(e).into(),
        SwitchError::Changed { board } => Refusal::new(
            RefusalReason::ChangedSinceApproval,
            format!(
                "board {board}'s power switch changed since the approval (a reload); nothing \
                 was switched. Call again"
            ),
        ),
    }
}

fn refused(
    state: &AppState,
    who: &ClientIdentity,
    req: &PowerRequest,
    r: Refusal,
) -> CallToolResult {
    state.audit.record(&PowerRecord {
        client: &who.name,
        board: &req.board,
        action: Switch::from(req.action).as_str(),
        outcome: PowerOutcome::refused(r.reason.as_str(), &r.message),
    });
    refusal(r)
}
