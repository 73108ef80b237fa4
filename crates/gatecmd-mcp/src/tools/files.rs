//! `list_files`, `stat_file`, `write_file`, `remove_file`: request and result types, text
//! renderings, and the glue to [`gatecmd_domain::staging`] (which does the file work, on a blocking
//! thread). Every write, remove and refusal goes through [`staging::audit`].

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::CallToolResult;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::answer::structured;
use crate::file_staging::{blocking, refused, rfc3339};
use gatecmd_core::identity::ClientIdentity;
use gatecmd_domain::config::Config;
use gatecmd_domain::staging::upload::{self, Chunk};
use gatecmd_domain::staging::{self, AuditRecord, RootSel, StagingError, Target};
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

/// Arguments of `stat_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatFileRequest {
    /// File path: relative to the first root, or absolute inside a root.
    pub path: String,
}

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

/// Arguments of `remove_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RemoveFileRequest {
    /// File path: relative to the first root, or absolute inside a root. Files only.
    pub path: String,
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
#[schemars(transform = crate::answer::or_refusal)]
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

/// Result of `stat_file`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(transform = crate::answer::or_refusal)]
pub struct StatFileResult {
    /// Absolute path (usable as a command's file argument).
    pub path: String,
    pub root: String,
    pub size: u64,
    pub modified: String,
    /// SHA-256 of the content, lowercase hex.
    pub sha256: String,
}

/// Result of `write_file`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(transform = crate::answer::or_refusal)]
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

/// Result of `remove_file`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(transform = crate::answer::or_refusal)]
pub struct RemoveFileResult {
    pub path: String,
    pub root: String,
    /// Size of the removed file.
    pub removed_bytes: u64,
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
        sha256,
    })
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
