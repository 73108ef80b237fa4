//! A plan call checked and what it runs with taken, in the order a refusal is met: the
//! plan (inline, or a file beneath the file roots) parsed and checked, the time limit, the
//! client's command slot and the leased board with its console and prompts (taken through
//! the same use case as `board_run`), then the approval when a rule holds for `board_run`
//! on the board: a plan is a string of `board_run`s, so the rules that hold `board_run`
//! hold it, once for the whole plan, every command line shown to the approver. Nothing is
//! held while a person decides; after the yes the slot and the board are taken again.

use gatecmd_core::refusal::Refusal;
use gatecmd_core::refusal::common::LeaseMissing;
use gatecmd_core::sanitizer::{FileArgError, FileKind, FileRules, open_file_arg};
use sha2::{Digest, Sha256};
use std::io::Read;

use super::format::{Checked, MAX_PLAN_BYTES, Plan, PlanError};
use crate::approvals::NewRequest;
use crate::audit::PlanRecord;
use crate::config::{Config, Gated, GatedTool, ValueError, approval_rule};
use crate::console::shell::Prompts;
use crate::limits::permits::Permit;
use crate::locks::{LeaseId, LockError, SessionId};
use crate::state::AppState;
use crate::usecases::flash::Approve;
use crate::usecases::take::{Caller, SlotTakeError, Taken, take_with_slot};

/// A plan run's default and longest limit, every step included.
pub const DEFAULT_PLAN_SECS: u64 = 600;
pub const MAX_PLAN_SECS: u64 = 86_400;
/// Longest one-line summary an approver is shown (`what`); `argv` holds every line.
const MAX_WHAT_BYTES: usize = 2048;

/// Where the plan comes from.
pub enum Source {
    /// The plan itself: an object, or a string of YAML or JSON.
    Inline(serde_json::Value),
    /// A file beneath the file roots holding YAML or JSON.
    File(String),
}

/// A plan request as the use case reads it.
pub struct Ask {
    /// The surface's name for the action (`run_test_plan`): the lease refusal, the job and
    /// the approval request name it.
    pub tool: &'static str,
    pub client: String,
    pub session: Option<SessionId>,
    pub lease: Option<String>,
    pub board: String,
    pub source: Source,
    pub timeout_secs: Option<u64>,
}

/// Why a plan was refused before its job started; the surface words each.
#[derive(Debug)]
pub enum Refused {
    Plan(PlanError),
    /// `plan_file` cannot be used.
    File {
        value: String,
        error: FileArgError,
    },
    /// `plan_file` opened but could not be read as text.
    Unreadable {
        value: String,
        why: String,
    },
    TimeoutOutOfRange {
        given: u64,
        max: u64,
    },
    /// The client's command slots are all taken (`limits.max_concurrent_per_client`).
    TooManyRunning {
        max: usize,
    },
    UnknownBoard {
        known: Vec<String>,
    },
    Lease(LeaseMissing),
    Lock(LockError),
    NoConsole,
    BadPrompts(ValueError),
    /// The surface's approval round trip said no (worded by the surface).
    Approval(Refusal),
}

/// A plan call checked, with what its job runs with.
pub struct Prepared {
    pub(super) plan: Checked,
    /// The SHA-256 of the plan's text as given (the audit's `plan_sha256`).
    pub(super) sha256: String,
    pub(super) secs: u64,
    pub(super) slot: Permit,
    pub(super) taken: Taken,
    pub(super) prompts: Prompts,
    /// The approval that let it run (`apr-N`), when a rule held it: its start line names
    /// it, so the job's evidence carries the person's yes.
    pub(super) approval: Option<String>,
}

impl Prepared {
    /// The checked plan's name.
    pub fn plan_name(&self) -> &str {
        &self.plan.name
    }
}

/// Checks `ask` and takes what it runs with; when an `approvals:` rule holds, holds it
/// through `approve` and takes again after the yes.
pub async fn prepare(
    state: &AppState,
    ask: &Ask,
    approve: &impl Approve,
) -> Result<Prepared, Refused> {
    let config = state.config();
    let (plan, text) = match &ask.source {
        Source::Inline(v) => (Plan::from_value(v.clone()), v.to_string()),
        Source::File(f) => {
            let text = read_plan_file(&config, f)?;
            (Plan::parse(&text), text)
        }
    };
    let plan = plan.and_then(|p| p.check()).map_err(Refused::Plan)?;
    let sha256 = hex::encode(Sha256::digest(text.as_bytes()));
    let secs = ask.timeout_secs.unwrap_or(DEFAULT_PLAN_SECS);
    if secs == 0 || secs > MAX_PLAN_SECS {
        return Err(Refused::TimeoutOutOfRange {
            given: secs,
            max: MAX_PLAN_SECS,
        });
    }
    let (slot, taken, prompts) = take(state, &config, ask).await?;
    let gated = Gated::Tool {
        tool: GatedTool::BoardRun,
        action: "",
    };
    let Some(rule) = approval_rule(&config.approvals, gated, &[&taken.board]).cloned() else {
        return Ok(Prepared {
            plan,
            sha256,
            secs,
            slot,
            taken,
            prompts,
            approval: None,
        });
    };
    let key = taken.key.clone();
    let lines: Vec<String> = plan.steps.iter().map(|s| s.run.clone()).collect();
    let request = NewRequest {
        client: ask.client.clone(),
        note: None,
        tool: ask.tool.into(),
        what: summary(ask, &plan.name, &lines),
        argv: Some(lines),
        board: Some(ask.board.clone()),
        holder: crate::usecases::approval::board_holder(state, &ask.board),
        files: vec![],
        rule: rule.describe(),
        approvers: rule.by.clone(),
        timeout: rule.timeout,
        job: None,
    };
    drop((slot, taken));
    let lease = ask.lease.clone().map(LeaseId);
    let approval = approve
        .approve(request, key, lease)
        .await
        .map_err(Refused::Approval)?;
    let config = state.config();
    let (slot, taken, prompts) = take(state, &config, ask).await?;
    Ok(Prepared {
        plan,
        sha256,
        secs,
        slot,
        taken,
        prompts,
        approval: Some(approval),
    })
}

/// The approver's one line: the plan and its command lines, at most [`MAX_WHAT_BYTES`]
/// (every line in full is the request's `argv`).
fn summary(ask: &Ask, plan: &str, lines: &[String]) -> String {
    let mut what = format!(
        "{} {}: plan {plan} ({} steps: {})",
        ask.tool,
        ask.board,
        lines.len(),
        lines.join(" ; ")
    );
    if what.len() > MAX_WHAT_BYTES {
        let mut at = MAX_WHAT_BYTES;
        while !what.is_char_boundary(at) {
            at -= 1;
        }
        what.truncate(at);
        what.push_str(" …");
    }
    what
}

/// The audit line of a refused plan, with the surface's wording of the refusal.
pub fn audit_refused(state: &AppState, ask: &Ask, reason: &str, message: &str) {
    state.audit.record(&PlanRecord::Refused {
        client: &ask.client,
        board: &ask.board,
        reason,
        message,
    });
}

/// `plan_file` opened beneath the file roots (as every file argument is) and read, at
/// most [`MAX_PLAN_BYTES`].
fn read_plan_file(config: &Config, value: &str) -> Result<String, Refused> {
    let rules = FileRules {
        roots: &config.file_roots,
        allow_hardlinked_inputs: config.allow_hardlinked_inputs,
    };
    let opened = open_file_arg(value, FileKind::Input, rules).map_err(|error| Refused::File {
        value: value.to_string(),
        error,
    })?;
    let unreadable = |why: String| Refused::Unreadable {
        value: value.to_string(),
        why,
    };
    let fd = (opened.fd.try_clone()).map_err(|e| unreadable(e.to_string()))?;
    let mut text = String::new();
    std::fs::File::from(fd)
        .take(MAX_PLAN_BYTES as u64 + 1)
        .read_to_string(&mut text)
        .map_err(|e| unreadable(e.to_string()))?;
    if text.len() > MAX_PLAN_BYTES {
        return Err(Refused::Plan(PlanError::TooLong { bytes: text.len() }));
    }
    Ok(text)
}

/// One of the client's command slots (a plan counts as a command), then the board's key
/// under the caller's lease, with its console and prompts.
async fn take(
    state: &AppState,
    config: &Config,
    ask: &Ask,
) -> Result<(Permit, Taken, Prompts), Refused> {
    let caller = Caller {
        client: &ask.client,
        session: ask.session.clone(),
        lease: ask.lease.as_deref(),
        tool: ask.tool,
    };
    let (slot, taken) = take_with_slot(state, config, caller, &ask.board).await?;
    if taken.console.is_none() {
        return Err(Refused::NoConsole);
    }
    let prompts = Prompts::new(&taken.board.shell).map_err(Refused::BadPrompts)?;
    Ok((slot, taken, prompts))
}

impl From<SlotTakeError> for Refused {
    fn from(e: SlotTakeError) -> Self {
        match e {
            SlotTakeError::TooManyRunning { max } => Refused::TooManyRunning { max },
            SlotTakeError::UnknownBoard { known } => Refused::UnknownBoard { known },
            SlotTakeError::Lease(e) => Refused::Lease(e),
            SlotTakeError::Lock(e) => Refused::Lock(e),
        }
    }
}
