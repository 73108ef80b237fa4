//! `run_test_plan {board, plan | plan_file, timeout_secs?, background?, lease?}`: a test
//! plan's steps run at a leased board's shell as `board_run` runs them, each judged by its
//! exit code and output, the console watched for faults, the verdicts reported with a
//! JUnit XML report. The work is gatecmd-domain's `usecases::plan` (the plan's checks, the
//! board taken, an approval, the job, the audit); this file holds the request, the answer
//! and the MCP side: the approval round trip, the foreground wait that continues as a job
//! when the client gives up, the task handle.

use std::sync::Arc;

use rmcp::handler::server::tool::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResponse;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::calls::answer::{refusal, structured};
use crate::calls::approvals::{self, LeaseWatch};
use crate::handler::{GatecmdServer, session_id, wants_task};
use gatecmd_core::identity::ClientIdentity;
use gatecmd_core::refusal::Refusal;
use gatecmd_domain::approvals::NewRequest;
use gatecmd_domain::jobs::Origin;
use gatecmd_domain::locks::{LeaseId, LockKey, SessionId};
use gatecmd_domain::state::AppState;
use gatecmd_domain::usecases::flash::Approve;
use gatecmd_domain::usecases::plan::{self as usecase, Ask, Report, Source};
pub use refusal::PlanRefusal;
use refusal::worded;
use render::{render, words};

mod refusal;
mod render;

/// Arguments of `run_test_plan`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanRequest {
    /// A board name from list_boards; you must hold its lease.
    pub board: String,
    /// The plan: an object {name, steps: [{name, run, expect?, expect_exit?, timeout_secs?,
    /// continue?}], fail_on?: [regex]}, or that as YAML or JSON text (docs/TESTPLANS.md).
    #[serde(default)]
    pub plan: Option<serde_json::Value>,
    /// A file in the file roots holding the plan (YAML or JSON), instead of plan.
    #[serde(default)]
    pub plan_file: Option<String>,
    /// Limit of the whole run in seconds (default 600, at most 86400); each step has its
    /// own timeout_secs (default 30).
    #[serde(default)]
    pub timeout_secs: Option<u64>,
    /// Answer at once with a job id (follow it with wait_job; the result is in its
    /// `result`).
    #[serde(default)]
    pub background: bool,
    /// Your board lease (from lock_board); a 2025-11-25 session that took it may omit it.
    #[serde(default)]
    pub lease: Option<String>,
}

/// Result of `run_test_plan` (or a refusal in its place). Field names are part of the
/// interface (docs/TOOLS.md, docs/TESTPLANS.md).
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(transform = crate::calls::answer::or_refusal)]
pub struct PlanResult {
    #[serde(flatten)]
    pub report: Report,
}

#[tool_router(router = run_test_plan_router, vis = "pub(crate)")]
impl GatecmdServer {
    /// Runs a test plan's steps at a leased board's shell, to a verdict.
    #[tool(
        description = "Run a test plan on a leased, booted board: each step's command line runs at the board's \
                       shell over its console as board_run runs it, and passes when its exit code is expect_exit \
                       (default 0) and its output matches the regex expect (if given). A console line matching \
                       fail_on, or a kernel panic, oops, BUG or reset seen while the plan runs, fails the plan. \
                       A step that cannot run (timeout, console gone) is error; after a step that does not pass \
                       the rest are skipped unless it says continue: true. The answer has each step's verdict \
                       (pass, fail, error, skipped), exit_code, output and ms, the faults, the plan's verdict \
                       and a JUnit XML report (junit). Plan: {name, steps: [{name, run, expect?, expect_exit?, \
                       timeout_secs?, continue?}], fail_on?: [regex]} as an object, YAML/JSON text, or \
                       plan_file (a file in the file roots). Runs as a job: background: true answers with its \
                       id (wait_job shows each step, cancel_job stops it). Needs your lock_board lease; \
                       approval rules on board_run hold it too.",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = true),
        output_schema = schema_for_output::<PlanResult>()
    )]
    async fn run_test_plan(
        &self,
        Parameters(req): Parameters<PlanRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let who = self.identity(&ctx)?;
        let task = wants_task(&ctx);
        Ok(plan_call(&self.state, &who, session_id(&ctx), req, &ctx, task).await)
    }
}

/// The approval round trip of an MCP call: it waits in the call, telling the client who
/// it waits for; the client cancelling it withdraws the request.
struct InCall<'a> {
    state: &'a AppState,
    ctx: &'a RequestContext<RoleServer>,
}

impl Approve for InCall<'_> {
    async fn approve(
        &self,
        request: NewRequest,
        key: LockKey,
        lease: Option<LeaseId>,
    ) -> Result<String, Refusal> {
        let watch = LeaseWatch::find(self.state, std::slice::from_ref(&key), lease.as_ref());
        approvals::wait_in_call_for_id(self.state, request, watch, self.ctx).await
    }
}

/// `run_test_plan`.
pub async fn plan_call(
    state: &Arc<AppState>,
    who: &ClientIdentity,
    session: Option<SessionId>,
    req: PlanRequest,
    ctx: &RequestContext<RoleServer>,
    task: bool,
) -> CallToolResponse {
    let source = match (req.plan, req.plan_file) {
        (Some(p), None) => Some(Source::Inline(p)),
        (None, Some(f)) => Some(Source::File(f)),
        _ => None,
    };
    let ask = Ask {
        tool: "run_test_plan",
        client: who.name.clone(),
        session,
        lease: req.lease,
        board: req.board,
        source: source.unwrap_or(Source::Inline(serde_json::Value::Null)),
        timeout_secs: req.timeout_secs,
    };
    if matches!(ask.source, Source::Inline(serde_json::Value::Null)) {
        let r: Refusal = PlanRefusal::NoPlan {
            board: ask.board.clone(),
        }
        .into();
        usecase::audit_refused(state, &ask, r.reason.as_str(), &r.message);
        return refusal(r).into();
    }
    let prepared = match usecase::prepare(state, &ask, &InCall { state, ctx }).await {
        Ok(p) => p,
        Err(e) => {
            let r = worded(e, &ask);
            usecase::audit_refused(state, &ask, r.reason.as_str(), &r.message);
            return refusal(r).into();
        }
    };
    let origin = match (task, req.background) {
        (true, _) => Origin::Task,
        (false, true) => Origin::Background,
        (false, false) => Origin::Foreground,
    };
    let plan = prepared.plan_name().to_string();
    let job = usecase::launch(state, &ask, origin, prepared, render);
    match origin {
        Origin::Task => crate::calls::jobs::task_handle(&job),
        Origin::Background => {
            let report = Report::running(&job, &plan);
            let text = format!(
                "running plan {plan} on board {} as job {}; follow it with wait_job {{\"job\": \"{}\"}} \
                 (each wait returns after at most 110 s with a line per step; the final result is in \
                 its `result`), stop it with cancel_job.\n{}",
                ask.board,
                job.id,
                job.id,
                words(&report)
            );
            structured(&PlanResult { report }, text).into()
        }
        _ => crate::calls::jobs::wait_foreground(state, &job, ctx)
            .await
            .into(),
    }
}
