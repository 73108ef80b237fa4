//! `power_board`: switch a board off, on, or off-wait-on, through the executor like any
//! command (the command lines are its power backend's, `gatecmd_domain::config::power`),
//! under the caller's board lease, audited.

use std::time::{Duration, Instant};

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
use crate::calls::reasons::unknown_board;
use crate::server::handler::{GatecmdServer, session_id};
use gatecmd_core::identity::ClientIdentity;
use gatecmd_core::refusal::common::LeaseInvalid;
use gatecmd_core::refusal::{Refusal, RefusalReason};
use gatecmd_domain::approvals::NewRequest;
use gatecmd_domain::audit::{PowerOutcome, PowerRecord};
use gatecmd_domain::boards::PowerState;
use gatecmd_domain::boots::Trigger;
use gatecmd_domain::config::power::switch_spec;
use gatecmd_domain::config::{Gated, GatedTool, approval_rule};
use gatecmd_domain::locks::{ClientName, CommandLockRequest, LeaseId, LockKey, SessionId};
use gatecmd_domain::state::AppState;
use gatecmd_domain::usecases::power::{self, Audited, run_power};

/// Longest `off_secs` of a cycle.
const MAX_OFF_SECS: u64 = 300;

/// What to do with the power.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PowerVerb {
    On,
    Off,
    /// Off, wait `off_secs`, on.
    Cycle,
}

/// Arguments of `power_board`.
#[derive(Debug, Deserialize, JsonSchema)]
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
    let Some(board) = config.board(&req.board) else {
        return refusal(unknown_board(&config, &req.board).into());
    };
    let off_secs = req.off_secs.unwrap_or(2);
    if off_secs > MAX_OFF_SECS {
        let e = PowerError::OffTooLong {
            off_secs,
            max: MAX_OFF_SECS,
        };
        return refusal(e.into());
    }
    let steps: &[bool] = match req.action {
        PowerVerb::On => &[true],
        PowerVerb::Off => &[false],
        PowerVerb::Cycle => &[false, true],
    };
    let specs = match steps
        .iter()
        .map(|on| switch_spec(&config, board, *on))
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(s) => s,
        Err(e) => return refused(state, who, &req, PowerError::from(e).into()),
    };
    let key = LockKey::Board(board.name.clone());
    let presented = req.lease.is_some() || session.is_some();
    if let Err(e) = holds_lease(state, who, &key, presented) {
        return refused(state, who, &req, PowerError::from(e).into());
    }
    let argv: Vec<Vec<String>> = specs.iter().map(power::argv).collect();
    if let Some(rule) = approval_rule(
        &config.approvals,
        Gated::Tool {
            tool: GatedTool::PowerBoard,
            action: &name_of(&req.action),
        },
        &[board],
    ) {
        // Every check that can refuse has passed and nothing was switched: wait for a yes,
        // then only the same command lines, under the lease still held, may run.
        let lease = req.lease.clone().map(LeaseId);
        let key = LockKey::Board(board.name.clone());
        let spec = NewRequest {
            client: who.name.clone(),
            note: req.note.clone(),
            tool: "power_board".into(),
            what: format!("power_board {} {}", board.name, name_of(&req.action)),
            argv: Some(argv.iter().map(|a| a.join(" ")).collect()),
            board: Some(board.name.clone()),
            holder: approvals::board_holder(state, &board.name),
            files: vec![],
            rule: rule.describe(),
            approvers: rule.by.clone(),
            timeout: rule.timeout,
            job: None,
        };
        let watch = approvals::LeaseWatch::find(state, std::slice::from_ref(&key), lease.as_ref());
        if let Err(r) = approvals::wait_in_call(state, spec, watch, ctx).await {
            return refused(state, who, &req, r);
        }
        let now = state.config();
        let same = now.board(&board.name).is_some_and(|b| {
            steps
                .iter()
                .map(|on| switch_spec(&now, b, *on).map(|s| power::argv(&s)))
                .collect::<Result<Vec<_>, _>>()
                .is_ok_and(|a| a == argv)
        });
        if !same {
            let r = Refusal::new(
                RefusalReason::ChangedSinceApproval,
                format!(
                    "board {}'s power switch changed since the approval (a reload); nothing \
                     was switched. Call again",
                    board.name
                ),
            );
            return refused(state, who, &req, r);
        }
        if let Err(e) = holds_lease(state, who, &key, presented) {
            return refused(state, who, &req, PowerError::from(e).into());
        }
    }
    // The board key is held for the whole action, under the caller's lease: no command of
    // the same lease runs between off and on.
    let lock = CommandLockRequest {
        keys: vec![key],
        shared: vec![],
        client: ClientName(who.name.clone()),
        session,
        lease: req.lease.clone().map(LeaseId),
        command: format!("power_board {}", name_of(&req.action)),
    };
    let guard = match state
        .locks
        .acquire_for_command_wait(lock, Duration::ZERO)
        .await
    {
        Ok(g) => g,
        Err(e) => return refused(state, who, &req, PowerError::from(e).into()),
    };
    let started = Instant::now();
    let mut result = PowerResult {
        board: board.name.clone(),
        action: req.action,
        state: state.boards.power_state(&board.name),
        argv: argv.clone(),
        exit_code: None,
        output: String::new(),
        duration_ms: 0,
    };
    let mut ok = true;
    for (i, (spec, on)) in specs.iter().zip(steps).enumerate() {
        if i > 0 {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(off_secs)) => {}
                _ = ctx.ct.cancelled() => { ok = false; result.output.push_str("cancelled while off; the board stays off\n"); break; }
            }
        }
        let after = if *on { PowerState::On } else { PowerState::Off };
        if *on {
            // The bytes from here on are the boot this switch starts (docs/BOARDS.md).
            let trigger = Trigger::action("power_board", &who.name, &name_of(&req.action));
            state.boots.power_on(&board.name, trigger);
        }
        let run = run_power(
            state,
            &board.name,
            spec,
            after,
            ctx.ct.clone(),
            Audited::ByCaller,
        )
        .await;
        result.state = run.state;
        match &run.outcome {
            Ok(o) => {
                result.exit_code = o.exit_code;
                result.output.push_str(&run.output());
            }
            Err(e) => result.output.push_str(&format!("{e}\n")),
        }
        if !run.ok() {
            ok = false;
            break;
        }
    }
    drop(guard);
    result.duration_ms = started.elapsed().as_millis() as u64;
    state.audit.record(&PowerRecord {
        client: &who.name,
        board: &board.name,
        action: &name_of(&req.action),
        outcome: PowerOutcome::Ran {
            argv: &argv,
            exit_code: result.exit_code,
            state: &name_of(&result.state),
            ok,
            duration_ms: result.duration_ms,
        },
    });
    let text = format!(
        "power_board {} {}: {} (state {}, {} ms){}\n",
        result.board,
        name_of(&result.action),
        if ok { "done" } else { "failed" },
        name_of(&result.state),
        result.duration_ms,
        if result.output.is_empty() {
            String::new()
        } else {
            format!("\n{}", result.output)
        }
    );
    if ok {
        structured(&result, text)
    } else {
        structured_error(&result, text)
    }
}

/// The caller must hold the board's lease: power is never switched under someone else's
/// feet, nor on a board nobody leased.
fn holds_lease(
    state: &AppState,
    who: &ClientIdentity,
    key: &LockKey,
    presented: bool,
) -> Result<(), LeaseInvalid> {
    let st = state.locks.key_state(key);
    match st.as_ref().and_then(|s| s.lease.as_ref()) {
        Some(l) if l.holder.0 == who.name && !presented => Err(LeaseInvalid::NotPassed {
            key: key.to_string(),
            lease_id: l.lease_id.0.clone(),
            tool: "power_board".into(),
        }),
        Some(l) if l.holder.0 == who.name => Ok(()),
        // Someone else's lease: the lock manager words who, since when, time left, queue.
        Some(_) => Ok(()),
        None => Err(LeaseInvalid::Missing {
            tool: "power_board".into(),
            board: match key {
                LockKey::Board(n) => n.clone(),
                _ => String::new(),
            },
        }),
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
        action: &name_of(&req.action),
        outcome: PowerOutcome::refused(r.reason.as_str(), &r.message),
    });
    refusal(r)
}

/// The wire name of a value (`on`, `cycle`, `unknown`).
fn name_of(v: &impl Serialize) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}
