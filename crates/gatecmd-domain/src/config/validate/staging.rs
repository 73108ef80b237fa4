//! `staging:` and the per-client `write_roots:` / `staging:` keys.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::super::raw::RawClientStaging;
use super::super::staging::{
    CHUNK_ENVELOPE_BYTES, ClientStaging, RawStaging, StagingConfig, StagingLimits, WriteRoots,
    base64_len,
};
use super::super::values::parse_abs;
use super::validator::Validator;

impl Validator {
    pub(super) fn staging(
        &mut self,
        raw: RawStaging,
        clients: Vec<RawClientStaging>,
        file_roots: &[PathBuf],
        max_body: usize,
    ) -> StagingConfig {
        self.declared(&raw, "staging");
        let defaults = StagingLimits::from(&raw);
        self.chunk_fits(&defaults, "staging", file_roots, max_body);
        let mut out = BTreeMap::new();
        for c in clients {
            let i = c.index;
            let mut roots = Vec::new();
            for (j, r) in c.write_roots.iter().flatten().enumerate() {
                let field = format!("clients[{i}].write_roots[{j}]");
                let at = self.at(&field);
                let Some(p) = self.value(parse_abs(r), at, field.clone()) else {
                    continue;
                };
                // Compared by components, so "/srv/img/" and "/srv/img" are the same root.
                match file_roots.iter().find(|f| f.components().eq(p.components())) {
                    Some(root) => roots.push(root.clone()),
                    None => self.err(
                        at,
                        field,
                        format!(
                            "{r:?} is not one of file_roots ({}); write_roots lists file roots this client may write",
                            if file_roots.is_empty() {
                                "none are configured".to_string()
                            } else {
                                file_roots
                                    .iter()
                                    .map(|f| f.display().to_string())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            }
                        ),
                    ),
                }
            }
            let o = c.overrides;
            let limits = StagingLimits {
                max_file_bytes: o.max_file_bytes.unwrap_or(defaults.max_file_bytes),
                max_chunk_bytes: o.max_chunk_bytes.unwrap_or(defaults.max_chunk_bytes),
                quota_bytes_per_root: o
                    .quota_bytes_per_root
                    .unwrap_or(defaults.quota_bytes_per_root),
                quota_entries_per_root: o
                    .quota_entries_per_root
                    .unwrap_or(defaults.quota_entries_per_root),
                max_depth: o.max_depth.unwrap_or(defaults.max_depth),
                max_new_dirs_per_call: o
                    .max_new_dirs_per_call
                    .unwrap_or(defaults.max_new_dirs_per_call),
            };
            let prefix = format!("clients[{i}].staging");
            // The section's declared bounds hold for a client's overrides too.
            // `stale_upload_secs`, `max_uploads_per_client` and the `upload_*` keys are not
            // per client: valid stand-ins, so that their refusal
            // (reported for the section) is not repeated for every client.
            let overridden = RawStaging {
                max_file_bytes: limits.max_file_bytes,
                max_chunk_bytes: limits.max_chunk_bytes,
                quota_bytes_per_root: limits.quota_bytes_per_root,
                quota_entries_per_root: limits.quota_entries_per_root,
                max_depth: limits.max_depth,
                max_new_dirs_per_call: limits.max_new_dirs_per_call,
                stale_upload_secs: raw.stale_upload_secs.max(1),
                max_uploads_per_client: raw.max_uploads_per_client.max(1),
                upload_stall_secs: raw.upload_stall_secs.max(1),
                upload_min_bytes: raw.upload_min_bytes.max(1),
                upload_promise_bytes: raw.upload_promise_bytes.max(1),
            };
            self.declared(&overridden, &prefix);
            self.chunk_fits(&limits, &prefix, file_roots, max_body);
            out.insert(
                c.name,
                ClientStaging {
                    write_roots: WriteRoots::Only(roots),
                    limits,
                },
            );
        }
        StagingConfig {
            defaults,
            stale_upload_secs: raw.stale_upload_secs,
            max_uploads_per_client: raw.max_uploads_per_client,
            upload_stall_secs: raw.upload_stall_secs,
            upload_min_bytes: raw.upload_min_bytes,
            upload_promise_bytes: raw.upload_promise_bytes,
            clients: out,
        }
    }

    /// A chunk of `l.max_chunk_bytes` fits in one request body; `prefix` is the limits'
    /// section (`staging`, `clients[2].staging`).
    pub(super) fn chunk_fits(
        &mut self,
        l: &StagingLimits,
        prefix: &str,
        file_roots: &[PathBuf],
        max_body: usize,
    ) {
        let locate = |v: &Self, key: &str| v.at(&format!("{prefix}.{key}"));
        // A chunk travels as base64 inside one JSON-RPC request: without file roots no
        // chunk is ever sent, so the relation only matters when there are roots.
        let need = base64_len(l.max_chunk_bytes) + CHUNK_ENVELOPE_BYTES;
        if !file_roots.is_empty() && need > max_body as u64 {
            let fits = (max_body as u64).saturating_sub(CHUNK_ENVELOPE_BYTES) / 4 * 3;
            let at = locate(self, "max_chunk_bytes");
            self.err(
                at,
                format!("{prefix}.max_chunk_bytes"),
                format!(
                    "a chunk of {} bytes needs a request body of {need} bytes (base64 plus envelope), \
                     more than limits.max_request_body_bytes ({max_body}); lower max_chunk_bytes to at \
                     most {fits} or raise limits.max_request_body_bytes to at least {need}",
                    l.max_chunk_bytes
                ),
            );
        }
    }
}
