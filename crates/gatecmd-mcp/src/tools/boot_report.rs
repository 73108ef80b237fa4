//! `boot_report {board, boot?}`: one boot of a board as gatecmd-domain's `boards::boot_reports` recorded
//! it (trigger, start, stages and faults with their times, outcome, transcript); the
//! board's holder reads it, and `admin` clients, as for `console_read`.

use rmcp::handler::server::tool::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::calls::answer::{refusal, structured};
use crate::console::console_access::{ConsoleError, readable};
use crate::handler::{GatecmdServer, answers_at_once};
use gatecmd_core::identity::ClientIdentity;
use gatecmd_core::refusal::{Classified, RefusalReason};
use gatecmd_domain::boards::boot_reports::{BootLookup, BootReport};
use gatecmd_domain::state::AppState;

/// Arguments of `boot_report`.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BootReportRequest {
    /// Board name (see list_boards); it needs a console.
    pub board: String,
    /// The boot's number (gatecmd://boards/{board}/boots lists those kept). Default: the
    /// latest.
    #[serde(default)]
    pub boot: Option<u64>,
}

/// Result of `boot_report` (or a refusal in its place).
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(transform = crate::calls::answer::or_refusal)]
pub struct BootReportResult {
    #[serde(flatten)]
    pub report: BootReport,
}

/// Why `boot_report` (or a boots resource) said no.
#[derive(Debug, thiserror::Error)]
pub enum BootReportError {
    /// No such board, no console, not the holder.
    #[error("{0}")]
    Console(#[from] ConsoleError),
    #[error("{0}")]
    Lookup(#[from] BootLookup),
}

impl Classified for BootReportError {
    fn reason(&self) -> RefusalReason {
        match self {
            BootReportError::Console(e) => e.reason(),
            BootReportError::Lookup(BootLookup::NoConsole { .. }) => RefusalReason::NotConfigured,
            BootReportError::Lookup(BootLookup::NoBoot { .. } | BootLookup::NotKept { .. }) => {
                RefusalReason::NotFound
            }
        }
    }
}

#[tool_router(router = boot_report_router, vis = "pub(crate)")]
impl GatecmdServer {
    /// One boot of a board: stages, faults, outcome, transcript.
    #[tool(
        description = "What a board's boot did: its trigger (which power action, by whom, or a reset seen on the \
                       console), started_at, the stages it went through (spl atf optee uboot kernel init login shell, \
                       android_*) and the faults it showed (kernel_panic oops bug warning reset no_kernel), each \
                       with at_ms from the power-on and its console line, the outcome (login shell uboot panic \
                       reset_loop silent booting) and the transcript. The latest boot unless boot is given \
                       (gatecmd://boards/{board}/boots lists them). Needs the board's lease (lock_board) unless you \
                       are admin.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false),
        output_schema = schema_for_output::<BootReportResult>(),
        meta = answers_at_once()
    )]
    async fn boot_report(
        &self,
        Parameters(req): Parameters<BootReportRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        if let Some(r) =
            crate::lab::forward::remote_call(&self.state, &who, "boot_report", &req, 0).await
        {
            return Ok(r);
        }
        Ok(report_for(&self.state, &who, req))
    }
}

/// `boot_report`.
pub fn report_for(
    state: &AppState,
    who: &ClientIdentity,
    req: BootReportRequest,
) -> CallToolResult {
    let boards = state.config().board_names();
    let report = readable(&state.consoles, &boards, who, &req.board)
        .map_err(BootReportError::from)
        .and_then(|_| Ok(state.boots.report(&req.board, req.boot)?));
    let report = match report {
        Ok(r) => r,
        Err(e) => return refusal(e.into()),
    };
    let s = &report.summary;
    let stages: Vec<String> = s
        .stages
        .iter()
        .map(|x| format!("{} {} ms", x.stage.as_str(), x.at_ms))
        .collect();
    let faults: Vec<String> = s
        .faults
        .iter()
        .map(|f| format!("{} at {} ms: {}", f.kind.as_str(), f.at_ms, f.line))
        .collect();
    let text = format!(
        "board {} boot {} ({}{}), started {}: {}\nstages: {}\n{}transcript: {} bytes{}",
        s.board,
        s.boot,
        s.trigger.action,
        s.trigger
            .by
            .as_deref()
            .map(|b| format!(" by {b}"))
            .unwrap_or_default(),
        s.started_at,
        s.outcome.as_str(),
        if stages.is_empty() {
            "none yet".to_string()
        } else {
            stages.join(", ")
        },
        if faults.is_empty() {
            String::new()
        } else {
            format!("faults:\n  {}\n", faults.join("\n  "))
        },
        s.transcript_bytes,
        if s.transcript_dropped_bytes > 0 {
            format!(" ({} not kept)", s.transcript_dropped_bytes)
        } else {
            String::new()
        }
    );
    structured(&BootReportResult { report }, text)
}
