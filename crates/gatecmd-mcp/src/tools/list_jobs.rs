//! `list_jobs`: the caller's jobs, running and recently finished (the view is `JobSummary`
//! in `views/jobs.rs`, which the `gatecmd://jobs` resources show too), with the notices of
//! calls that continued as jobs after the client gave up on them.

use rmcp::handler::server::tool::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::calls::answer::structured;
use crate::calls::jobs::{notices, tell};
use crate::handler::{GatecmdServer, answers_at_once};
use crate::views::{JobList, JobSummary};
use gatecmd_core::identity::ClientIdentity;
use gatecmd_domain::jobs::JobState;
use gatecmd_domain::state::AppState;

/// Arguments of `list_jobs`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListJobsRequest {
    /// Only jobs in this state.
    #[serde(default)]
    pub state: Option<JobState>,
}

#[tool_router(router = list_jobs_router, vis = "pub(crate)")]
impl GatecmdServer {
    /// Lists the caller's jobs.
    #[tool(
        description = "List your jobs (running and recently finished; any session of yours sees them): id, \
                       state, command line, progress, exit code. Also says which of your calls continued as \
                       jobs after you gave up on them.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false),
        output_schema = schema_for_output::<JobList>(),
        meta = answers_at_once()
    )]
    async fn list_jobs(
        &self,
        Parameters(req): Parameters<ListJobsRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        Ok(list(&self.state, &who, req))
    }
}

/// `list_jobs`: the caller's jobs, oldest first.
pub fn list(state: &AppState, who: &ClientIdentity, req: ListJobsRequest) -> CallToolResult {
    let jobs: Vec<JobSummary> = state
        .jobs
        .list(&who.name)
        .iter()
        .filter(|v| req.state.is_none_or(|s| v.state == s))
        .map(JobSummary::of)
        .collect();
    let mut text = String::new();
    if jobs.is_empty() {
        text.push_str("no jobs\n");
    }
    for j in &jobs {
        text.push_str(&format!(
            "{} {} {}{}\n",
            j.job,
            j.state.as_str(),
            j.argv.join(" "),
            j.progress.map(|p| format!(" ({p}%)")).unwrap_or_default()
        ));
    }
    let mut r = structured(
        &JobList {
            jobs,
            notices: vec![],
        },
        text,
    );
    tell(&mut r, notices(state, &who.name));
    r
}
