//! `stat_file`: size, modification time and SHA-256 of a regular file inside a file root,
//! hashed on a blocking thread; a refusal is audited.

use std::sync::Arc;

use rmcp::handler::server::tool::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::calls::answer::structured;
use crate::calls::file_staging::{blocking, refused, rfc3339};
use crate::handler::GatecmdServer;
use gatecmd_core::identity::ClientIdentity;
use gatecmd_domain::staging;
use gatecmd_domain::state::AppState;

/// Arguments of `stat_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatFileRequest {
    /// File path: relative to the first root, or absolute inside a root.
    pub path: String,
}

/// Result of `stat_file`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(transform = crate::calls::answer::or_refusal)]
pub struct StatFileResult {
    /// Absolute path (usable as a command's file argument).
    pub path: String,
    pub root: String,
    pub size: u64,
    pub modified: String,
    /// SHA-256 of the content, lowercase hex.
    pub sha256: String,
}

#[tool_router(router = stat_file_router, vis = "pub(crate)")]
impl GatecmdServer {
    /// Size and SHA-256 of a file inside a file root.
    #[tool(
        description = "Size, modification time and SHA-256 of a regular file inside a file root: \
                       confirm the host has exactly the image you built before flashing it.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false),
        output_schema = schema_for_output::<StatFileResult>()
    )]
    async fn stat_file(
        &self,
        Parameters(req): Parameters<StatFileRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        Ok(stat(self.state.clone(), &who, req).await)
    }
}

/// `stat_file`.
pub async fn stat(
    state: Arc<AppState>,
    who: &ClientIdentity,
    req: StatFileRequest,
) -> CallToolResult {
    let config = state.config();
    let target = match staging::resolve(&config.file_roots, None, &req.path) {
        Ok(t) => t,
        Err(e) => return refused(&state.audit, who, "stat", &req.path, &e),
    };
    let t = target.clone();
    match blocking(move || staging::stat(&t)).await {
        Ok(f) => {
            let result = StatFileResult {
                path: target.display(),
                root: target.root.display().to_string(),
                size: f.entry.size,
                modified: rfc3339(f.entry.modified),
                sha256: f.sha256,
            };
            let text = format!(
                "{}: {} bytes, sha256 {}, modified {}",
                result.path, result.size, result.sha256, result.modified
            );
            structured(&result, text)
        }
        Err(e) => refused(&state.audit, who, "stat", &target.display(), &e),
    }
}
