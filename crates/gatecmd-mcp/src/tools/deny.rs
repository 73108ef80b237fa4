//! `deny`: an approver client denies a pending approval request (docs/APPROVALS.md),
//! with a note. Only the request's rule's approvers may, never the requester itself; a
//! refusal is audited. The call waiting on the request audits the decision and acts on it.

use rmcp::handler::server::tool::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};

use crate::calls::approvals::{DecisionRequest, DecisionResult, decide_call};
use crate::handler::GatecmdServer;

#[tool_router(router = deny_router, vis = "pub(crate)")]
impl GatecmdServer {
    /// Denys an approval request.
    #[tool(
        description = "Deny a pending approval request (gatecmd://approvals lists them) as one of its rule's approvers, with a note the requester is shown. Nothing runs; the waiting call is refused with approval_denied. Returns the request and its decision.",
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false),
        output_schema = schema_for_output::<DecisionResult>()
    )]
    async fn deny(
        &self,
        Parameters(req): Parameters<DecisionRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        Ok(decide_call(&self.state, &who, req, false))
    }
}
