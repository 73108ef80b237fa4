//! `write_file`: one base64 chunk of an upload into a file root; the last chunk carries the
//! whole file's SHA-256, which is verified before the file appears under its name. Every
//! chunk, completion, expired upload and refusal is audited.

use std::sync::Arc;
use std::time::Duration;

use rmcp::handler::server::tool::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::calls::answer::structured;
use crate::calls::file_staging::{blocking, refused};
use crate::handler::GatecmdServer;
use gatecmd_core::identity::ClientIdentity;
use gatecmd_domain::config::Config;
use gatecmd_domain::staging::upload::{self, Chunk};
use gatecmd_domain::staging::{self, AuditRecord, StagingError, Target};
use gatecmd_domain::state::AppState;

/// Arguments of `write_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFileRequest {
    /// File path: relative to the first root, or absolute inside a root. Missing directories
    /// are created when an upload starts.
    pub path: String,
    /// This chunk's bytes, base64 (standard alphabet). At most `limits.max_chunk_bytes`
    /// decoded bytes (see list_files).
    pub content_base64: String,
    /// Where this chunk goes: 0 starts an upload; each next chunk at exactly the bytes
    /// stored so far (the previous result's `next_offset`).
    #[serde(default)]
    pub offset: u64,
    /// With offset 0: discard an unfinished upload of this path and start over.
    #[serde(default)]
    pub truncate: bool,
    /// SHA-256 (64 hex digits) of the whole file. Send it with the last chunk: the file is
    /// verified and only then appears under its name. Without it the upload stays
    /// unfinished (hidden).
    #[serde(default)]
    pub sha256: Option<String>,
}

/// Result of `write_file`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(transform = crate::calls::answer::or_refusal)]
pub struct WriteFileResult {
    /// Absolute final path.
    pub path: String,
    pub root: String,
    /// This chunk's offset and decoded length.
    pub offset: u64,
    pub bytes_written: u64,
    /// Bytes stored so far (= the offset of the next chunk), or the final size.
    pub next_offset: u64,
    /// Verified and renamed into place under `path`.
    pub complete: bool,
    /// The verified SHA-256, when complete.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Where the unfinished upload is kept, when not complete.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temp_path: Option<String>,
}

#[tool_router(router = write_file_router, vis = "pub(crate)")]
impl GatecmdServer {
    /// Uploads one chunk of a file.
    #[tool(
        description = "Upload a file into a file root in base64 chunks: offset 0 starts (truncate: true \
                       restarts an unfinished upload), each next chunk at the returned next_offset; give \
                       sha256 of the whole file with the last chunk: it is verified, then the file appears \
                       under its name (never before). Chunk size limit: see list_files.",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false),
        output_schema = schema_for_output::<WriteFileResult>()
    )]
    async fn write_file(
        &self,
        Parameters(req): Parameters<WriteFileRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        Ok(write(self.state.clone(), &who, req).await)
    }
}

/// `write_file`.
pub async fn write(
    state: Arc<AppState>,
    who: &ClientIdentity,
    req: WriteFileRequest,
) -> CallToolResult {
    let config = state.config();
    let target = match staging::resolve(&config.file_roots, None, &req.path) {
        Ok(t) => t,
        Err(e) => return refused(&state.audit, who, "write", &req.path, &e),
    };
    let shown = target.display();
    let chunk = match check_write(&config, who, &target, req) {
        Ok(c) => c,
        Err(e) => return refused(&state.audit, who, "write", &shown, &e),
    };
    let offset = chunk.offset;
    let policy = config.staging.policy(&who.name);
    let stale = Duration::from_secs(config.staging.stale_upload_secs);
    let t = target.clone();
    let st = state.clone();
    let written = match blocking(move || {
        upload::write(&st.staging, &policy.limits, stale, &t, chunk)
    })
    .await
    {
        Ok(w) => w,
        Err(e) => return refused(&state.audit, who, "write", &shown, &e),
    };
    for p in &written.expired {
        staging::audit(
            &state.audit,
            &AuditRecord {
                client: &who.name,
                action: "expire",
                path: p,
                bytes: None,
                sha256: None,
                refused: None,
            },
        );
    }
    staging::audit(
        &state.audit,
        &AuditRecord {
            client: &who.name,
            action: if written.complete {
                "finalize"
            } else {
                "write"
            },
            path: &shown,
            bytes: Some(if written.complete {
                written.size
            } else {
                written.bytes
            }),
            sha256: written.sha256.as_deref(),
            refused: None,
        },
    );
    let result = WriteFileResult {
        path: shown,
        root: target.root.display().to_string(),
        offset,
        bytes_written: written.bytes,
        next_offset: written.size,
        complete: written.complete,
        sha256: written.sha256.clone(),
        temp_path: (!written.complete).then(|| written.temp_path.clone()),
    };
    let text = if result.complete {
        format!(
            "complete: {} ({} bytes, sha256 {} verified)",
            result.path,
            result.next_offset,
            result.sha256.as_deref().unwrap_or_default()
        )
    } else {
        format!(
            "stored {} bytes at offset {} ({} bytes so far, kept hidden as {}); send the next chunk at offset {}, and sha256 of the whole file with the last one",
            result.bytes_written,
            result.offset,
            result.next_offset,
            written.temp_path,
            result.next_offset
        )
    };
    structured(&result, text)
}

/// Checks that need no file system: rights, hash form, chunk size and encoding.
fn check_write(
    config: &Config,
    who: &ClientIdentity,
    target: &Target,
    req: WriteFileRequest,
) -> Result<Chunk, StagingError> {
    let policy = config.staging.policy(&who.name);
    staging::check_writable(&who.name, &policy, &config.file_roots, target)?;
    let sha256 = req
        .sha256
        .as_deref()
        .map(upload::parse_sha256)
        .transpose()?;
    let data = upload::decode_chunk(&req.content_base64, policy.limits.max_chunk_bytes)?;
    Ok(Chunk {
        offset: req.offset,
        data,
        truncate: req.truncate,
        finish: sha256.map(upload::Finish::Expect),
    })
}
