//! What the file staging tools (`list_files`, `stat_file`, `write_file`, `remove_file`)
//! share: file work run off the async workers, a refusal audited and answered, and file
//! times as text. The file work itself is [`gatecmd_domain::staging`]'s.

use rmcp::model::CallToolResult;

use crate::calls::answer::refusal;
use crate::calls::reasons::staging_reason;
use gatecmd_core::identity::ClientIdentity;
use gatecmd_core::refusal::Refusal;
use gatecmd_domain::staging::{self, AuditRecord, StagingError};

/// A file time (seconds and nanoseconds since the epoch) as RFC 3339 UTC, to the second.
pub fn rfc3339((secs, nanos): (i64, i64)) -> String {
    chrono::DateTime::from_timestamp(secs, nanos.clamp(0, 999_999_999) as u32)
        .map(|d| d.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_default()
}

/// Runs blocking file work off the async workers.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StagingError> + Send + 'static,
) -> Result<T, StagingError> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        Err(StagingError::Io {
            op: "file operation",
            path: String::new(),
            reason: format!("internal error: {e}"),
        })
    })
}

/// Audits and renders a refusal.
pub fn refused(
    log: &gatecmd_domain::audit::Audit,
    who: &ClientIdentity,
    action: &'static str,
    path: &str,
    e: &StagingError,
) -> CallToolResult {
    let r = Refusal::from_error(staging_reason(e), e);
    staging::audit(
        log,
        &AuditRecord {
            client: &who.name,
            action,
            path,
            bytes: None,
            sha256: None,
            refused: Some(&r.message),
        },
    );
    refusal(r)
}
