//! The one place file staging reports to the audit trail.

/// One line of the audit trail.
#[derive(Debug, Clone)]
pub struct AuditRecord<'a> {
    pub client: &'a str,
    /// `write` (a chunk), `finalize`, `remove`, `expire`, `list`, `stat`.
    pub action: &'static str,
    pub path: &'a str,
    pub bytes: Option<u64>,
    pub sha256: Option<&'a str>,
    /// `None`: allowed; `Some(reason)`: refused.
    pub refused: Option<&'a str>,
}

/// Records a staging decision in the audit log (and the service log): the one place file
/// staging reports to the audit trail.
pub fn audit(log: &crate::audit::Audit, r: &AuditRecord<'_>) {
    log.record(&crate::audit::FileRecord::new(
        r.client, r.action, r.path, r.bytes, r.sha256, r.refused,
    ));
    tracing::info!(
        target: "gatecmd::audit",
        client = %r.client,
        action = r.action,
        path = %r.path,
        bytes = r.bytes,
        sha256 = r.sha256,
        verdict = if r.refused.is_some() { "refused" } else { "allowed" },
        reason = r.refused,
        "file staging"
    );
}
