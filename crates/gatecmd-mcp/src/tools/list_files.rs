//! `list_files`: a directory inside a file root (name, type, size, modified; symlinks shown,
//! never followed), with the roots the caller may write and its upload limits. The file
//! work is [`gatecmd_domain::staging`]'s, on a blocking thread; a refusal is audited.

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
use crate::handler::{GatecmdServer, answers_at_once};
use gatecmd_core::identity::ClientIdentity;
use gatecmd_domain::staging::{self, RootSel};
use gatecmd_domain::state::AppState;

/// Arguments of `list_files`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListFilesRequest {
    /// Which file root: its index (0 = first) or its path as listed in `roots`. Default: the
    /// root that `path` names, else the first.
    #[serde(default)]
    pub root: Option<RootSel>,
    /// Directory to list: relative to the root, or absolute inside it. Default: the root.
    #[serde(default)]
    pub path: Option<String>,
}

/// One entry of a listing.
#[derive(Debug, Serialize, JsonSchema)]
pub struct FileEntry {
    pub name: String,
    /// `file`, `dir`, `symlink` (never followed), `fifo`, `socket`, `char_device`, `block_device`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Bytes (0 for anything but a file).
    pub size: u64,
    /// Last modification, RFC 3339 UTC.
    pub modified: String,
    /// The hidden temporary file of an unfinished upload (`.<name>.gatecmd-upload`).
    pub partial_upload: bool,
}

/// A file root and whether the caller may write there.
#[derive(Debug, Serialize, JsonSchema)]
pub struct RootInfo {
    pub index: usize,
    pub path: String,
    pub writable: bool,
}

/// The caller's staging limits.
#[derive(Debug, Serialize, JsonSchema)]
pub struct FileLimits {
    pub max_file_bytes: u64,
    /// Largest decoded chunk per write_file call.
    pub max_chunk_bytes: u64,
    pub quota_bytes_per_root: u64,
}

/// Result of `list_files`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(transform = crate::calls::answer::or_refusal)]
pub struct ListFilesResult {
    /// The root listed (as configured).
    pub root: String,
    /// The directory listed, relative to the root (`.` for the root).
    pub path: String,
    /// The directory listed, absolute.
    pub absolute_path: String,
    pub entries: Vec<FileEntry>,
    /// Entries left out beyond 10,000.
    pub omitted: usize,
    /// Bytes of regular files under this root (counted against the quota).
    pub used_bytes: u64,
    /// Every file root.
    pub roots: Vec<RootInfo>,
    pub limits: FileLimits,
}

#[tool_router(router = list_files_router, vis = "pub(crate)")]
impl GatecmdServer {
    /// Lists a directory inside a file root.
    #[tool(
        description = "List a directory inside a file root (the directories where command file \
                       arguments live): name, type, size, modified; symlinks are shown, never followed. \
                       Also returns the roots (which you may write) and your upload limits.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false),
        output_schema = schema_for_output::<ListFilesResult>(),
        meta = answers_at_once()
    )]
    async fn list_files(
        &self,
        Parameters(req): Parameters<ListFilesRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        Ok(list(self.state.clone(), &who, req).await)
    }
}

/// `list_files`.
pub async fn list(
    state: Arc<AppState>,
    who: &ClientIdentity,
    req: ListFilesRequest,
) -> CallToolResult {
    let config = state.config();
    let path = req.path.unwrap_or_default();
    let target = match staging::resolve(&config.file_roots, req.root.as_ref(), &path) {
        Ok(t) => t,
        Err(e) => return refused(&state.audit, who, "list", &path, &e),
    };
    let t = target.clone();
    let listing = match blocking(move || staging::list(&t)).await {
        Ok(l) => l,
        Err(e) => return refused(&state.audit, who, "list", &target.display(), &e),
    };
    let policy = config.staging.policy(&who.name);
    let result = ListFilesResult {
        root: target.root.display().to_string(),
        path: target.relative(),
        absolute_path: target.display(),
        entries: listing
            .entries
            .iter()
            .map(|e| FileEntry {
                name: e.name.clone(),
                kind: e.kind.name().to_string(),
                size: e.size,
                modified: rfc3339(e.modified),
                partial_upload: e.partial_upload,
            })
            .collect(),
        omitted: listing.omitted,
        used_bytes: listing.used_bytes,
        roots: config
            .file_roots
            .iter()
            .enumerate()
            .map(|(index, r)| RootInfo {
                index,
                path: r.display().to_string(),
                writable: policy.write_roots.allows(r),
            })
            .collect(),
        limits: FileLimits {
            max_file_bytes: policy.limits.max_file_bytes,
            max_chunk_bytes: policy.limits.max_chunk_bytes,
            quota_bytes_per_root: policy.limits.quota_bytes_per_root,
        },
    };
    let mut text = format!(
        "{} ({} entries; root {} uses {} of {} bytes; chunks of at most {} bytes)\n",
        result.absolute_path,
        result.entries.len() + result.omitted,
        result.root,
        result.used_bytes,
        result.limits.quota_bytes_per_root,
        result.limits.max_chunk_bytes,
    );
    for e in &result.entries {
        let note = if e.partial_upload {
            "  (unfinished upload)"
        } else {
            ""
        };
        text.push_str(&format!(
            "{:<12} {:>12}  {}  {}{note}\n",
            e.kind, e.size, e.modified, e.name
        ));
    }
    if result.omitted > 0 {
        text.push_str(&format!("... {} more entries not shown\n", result.omitted));
    }
    let roots: Vec<String> = result
        .roots
        .iter()
        .map(|r| {
            format!(
                "[{}] {}{}",
                r.index,
                r.path,
                if r.writable { " (writable)" } else { "" }
            )
        })
        .collect();
    text.push_str(&format!("roots: {}", roots.join(", ")));
    structured(&result, text)
}
