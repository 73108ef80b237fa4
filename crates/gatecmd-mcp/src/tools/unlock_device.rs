//! `unlock_device`: ends a lease taken with `lock_device` or `lock_board`; the next waiter
//! gets the key. An admin client may end another client's lease (logged).

use rmcp::handler::server::tool::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::calls::answer::{refusal, structured};
use crate::calls::reasons::lock_refusal;
use crate::handler::{GatecmdServer, answers_at_once};
use gatecmd_core::identity::ClientIdentity;
use gatecmd_domain::locks::LeaseId;
use gatecmd_domain::state::AppState;

/// Arguments of `unlock_device`.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UnlockRequest {
    /// The lease id lock_device or lock_board returned.
    pub lease: String,
}

/// Result of `unlock_device` (or a refusal in its place).
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(transform = crate::calls::answer::or_refusal)]
pub struct UnlockResult {
    pub lease_id: String,
    pub key: String,
    pub released: bool,
}

#[tool_router(router = unlock_device_router, vis = "pub(crate)")]
impl GatecmdServer {
    /// Releases a lease.
    #[tool(
        description = "Release a lease taken with lock_device or lock_board, when you are done with the \
                       device or board; the next waiter gets it. Returns the lease and key released.",
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false),
        output_schema = schema_for_output::<UnlockResult>(),
        meta = answers_at_once()
    )]
    async fn unlock_device(
        &self,
        Parameters(req): Parameters<UnlockRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        if let Some(r) =
            crate::lab::forward::remote_call(&self.state, &who, "unlock_device", &req, 0).await
        {
            return Ok(r);
        }
        Ok(unlock(&self.state, &who, req))
    }
}

/// `unlock_device`. An admin client may release another client's lease (logged).
pub fn unlock(state: &AppState, who: &ClientIdentity, req: UnlockRequest) -> CallToolResult {
    let lease = LeaseId(req.lease);
    // A client's own tool call; `gatecmd leases end` passes the same tool, so an
    // operator's release from the host is this same code.
    match gatecmd_domain::usecases::unlock::end_lease(state, who, &lease, None) {
        Ok(info) => {
            let res = UnlockResult {
                lease_id: info.lease_id.0.clone(),
                key: info.key.to_string(),
                released: true,
            };
            let text = format!("released lease {} on {}\n", res.lease_id, res.key);
            structured(&res, text)
        }
        Err(e) => refusal(lock_refusal(&e)),
    }
}
