//! `approve`: an approver client approves a pending approval request (docs/APPROVALS.md),
//! with a note. Only the request's rule's approvers may, never the requester itself; a
//! refusal is audited. The call waiting on the request audits the decision and acts on it.

use rmcp::handler::server::tool::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};

use crate::calls::approvals::{DecisionRequest, DecisionResult, decide_call};
use crate::handler::GatecmdServer;

#[tool_router(router = approve_router, vis = "pub(crate)")]
impl GatecmdServer {
    /// Approves an approval request.
    #[tool(
        description = "Approve a pending approval request (gatecmd://approvals lists them with exactly what will run) as one of its rule's approvers, with an optional note. The requester cannot approve its own request. The waiting call then runs (or is refused if what was approved changed). Returns the request and its decision.",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false),
        output_schema = schema_for_output::<DecisionResult>()
    )]
    async fn approve(
        &self,
        Parameters(req): Parameters<DecisionRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        Ok(decide_call(&self.state, &who, req, true))
    }
}
