//! `remove_file`: removes a regular file inside a file root the caller may write (also an
//! unfinished upload, by its hidden name); audited.

use std::sync::Arc;

use rmcp::handler::server::tool::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::calls::answer::structured;
use crate::calls::file_staging::{blocking, refused};
use crate::handler::{GatecmdServer, answers_at_once};
use gatecmd_core::identity::ClientIdentity;
use gatecmd_domain::staging::{self, AuditRecord};
use gatecmd_domain::state::AppState;

/// Arguments of `remove_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RemoveFileRequest {
    /// File path: relative to the first root, or absolute inside a root. Files only.
    pub path: String,
}

/// Result of `remove_file`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(transform = crate::calls::answer::or_refusal)]
pub struct RemoveFileResult {
    pub path: String,
    pub root: String,
    /// Size of the removed file.
    pub removed_bytes: u64,
}

#[tool_router(router = remove_file_router, vis = "pub(crate)")]
impl GatecmdServer {
    /// Removes a file.
    #[tool(
        description = "Remove a regular file inside a file root you may write, e.g. an image you no \
                       longer need (files only; also aborts an unfinished upload when given its \
                       .<name>.gatecmd-upload name). Returns the path removed.",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false),
        output_schema = schema_for_output::<RemoveFileResult>(),
        meta = answers_at_once()
    )]
    async fn remove_file(
        &self,
        Parameters(req): Parameters<RemoveFileRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        Ok(remove(self.state.clone(), &who, req).await)
    }
}

/// `remove_file`.
pub async fn remove(
    state: Arc<AppState>,
    who: &ClientIdentity,
    req: RemoveFileRequest,
) -> CallToolResult {
    let config = state.config();
    let target = match staging::resolve(&config.file_roots, None, &req.path) {
        Ok(t) => t,
        Err(e) => return refused(&state.audit, who, "remove", &req.path, &e),
    };
    let shown = target.display();
    let policy = config.staging.policy(&who.name);
    if let Err(e) = staging::check_writable(&who.name, &policy, &config.file_roots, &target) {
        return refused(&state.audit, who, "remove", &shown, &e);
    }
    let t = target.clone();
    let st = state.clone();
    match blocking(move || staging::remove(&st.staging, &t)).await {
        Ok(bytes) => {
            staging::audit(
                &state.audit,
                &AuditRecord {
                    client: &who.name,
                    action: "remove",
                    path: &shown,
                    bytes: Some(bytes),
                    sha256: None,
                    refused: None,
                },
            );
            let result = RemoveFileResult {
                path: shown,
                root: target.root.display().to_string(),
                removed_bytes: bytes,
            };
            let text = format!("removed {} ({} bytes)", result.path, result.removed_bytes);
            structured(&result, text)
        }
        Err(e) => refused(&state.audit, who, "remove", &shown, &e),
    }
}
