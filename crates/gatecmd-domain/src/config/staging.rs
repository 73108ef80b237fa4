//! The staging policy: size limits and where each client may write.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::declare::{at_least_one, settings};

settings! {
    /// `staging:` as written: the limits of clients that do not override them, and how
    /// long an unfinished upload is kept.
    #[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    pub struct RawStaging {
        max_file_bytes: u64 {
            default: 8 << 30,
            note: "(8 GiB)",
            check: at_least_one,
            docs: "largest file one upload may produce.",
        },
        max_chunk_bytes: u64 {
            default: 2 << 20,
            note: "(2 MiB)",
            check: at_least_one,
            docs: "largest decoded chunk per `write_file` call. Its base64 form plus 64 KiB of \
                envelope must fit in `limits.max_request_body_bytes` (checked at load; the \
                error gives both fixes). 2 MiB fits the default 4 MiB body; for 8 MiB chunks \
                set `max_request_body_bytes: 16777216`.",
        },
        quota_bytes_per_root: u64 {
            default: 32 << 30,
            note: "(32 GiB)",
            check: at_least_one,
            docs: "a write is refused when the regular files under the root (at every depth, \
                unfinished uploads included, whoever wrote them) would exceed this.",
        },
        quota_entries_per_root: u64 {
            default: 100_000,
            check: at_least_one,
            docs: "a write is refused when the entries under the root — files of any size \
                (empty ones too), directories, anything else; at every depth, whoever made \
                them — would exceed this. The directories a call would create and a new \
                upload's temporary file are counted before anything is created. Empty \
                directories count, and only the operator can remove them (`remove_file` \
                removes files).",
        },
        max_depth: u64 {
            default: 16,
            check: at_least_one,
            docs: "a file may be written at most this many path components below its root, its \
                own name included (`a/b/c.img` is 3). Reading, listing and removing deeper \
                files that exist is not limited.",
        },
        max_new_dirs_per_call: u64 {
            default: 8,
            check: at_least_one,
            docs: "directories one `write_file` call may create (missing directories are \
                created when an upload starts). A deeper new path takes several uploads, \
                each into a directory that exists or is at most this many levels below one.",
        },
        stale_upload_secs: u64 {
            default: 24 * 3600,
            check: at_least_one_second,
            docs: "an unfinished upload not touched for this long is deleted when another \
                upload starts in its directory.",
        },
        max_uploads_per_client: u64 {
            default: 4,
            check: at_least_one,
            docs: "`PUT /upload` requests one client may have in flight at once; one more is \
                refused (429, reason `limit`) before its body is read. Each holds at most \
                3 MiB of its body in memory (docs/SECURITY.md), so one client's uploads hold \
                at most this many times 3 MiB.",
        },
        upload_stall_secs: u64 {
            default: 60,
            check: at_least_one_second,
            docs: "a `PUT /upload` whose body brings fewer than `upload_min_bytes` in any span \
                this long ends as if the connection broke (progress, not silence: a byte now \
                and then does not keep a request alive): what arrived is kept for a later \
                `PUT` at the offset `GET /upload` reports, and its place among the client's \
                uploads, its file and its promise are free.",
        },
        upload_min_bytes: u64 {
            default: 64 << 10,
            note: "(64 KiB)",
            check: at_least_one,
            docs: "bytes a `PUT /upload` body must bring in every `upload_stall_secs` (the \
                default asks about 1 KiB/s); the last span of a body that ends is not counted.",
        },
        upload_promise_bytes: u64 {
            default: 64 << 20,
            note: "(64 MiB)",
            check: at_least_one,
            docs: "the most of a `PUT /upload`'s declared `Content-Length` counted as used \
                by the root's other writes ahead of the bytes it has received; renewed as \
                they arrive. The declared length must fit the quota when the request is \
                admitted, but only this window is held for it, and the promises into one \
                root never add up to more than half its `quota_bytes_per_root`: a request \
                that declares much and sends little holds nobody out (docs/SECURITY.md).",
        },
    }
}

fn at_least_one_second(v: &u64) -> Option<String> {
    (*v == 0).then(|| "must be at least 1 second".into())
}

// File staging (`staging:` and the per-client `write_roots:` / `staging:` keys).
//
// Kept in one block so that it stays apart from the rest of the schema. The per-client
// values live in `StagingConfig::clients` (by client name) rather than in `ClientConfig`,
// so the token table and the identity type do not change.

/// Size limits of file staging. Per client, each may be overridden.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StagingLimits {
    /// Largest file a client may upload.
    pub max_file_bytes: u64,
    /// Largest chunk (decoded bytes) of one `write_file` call. Its base64 form must fit in
    /// `limits.max_request_body_bytes`.
    pub max_chunk_bytes: u64,
    /// A write is refused when the regular files under the root (unfinished uploads
    /// included) would exceed this many bytes.
    pub quota_bytes_per_root: u64,
    /// A write is refused when the entries under the root (files of any size, directories,
    /// anything else; at every depth) would exceed this many.
    pub quota_entries_per_root: u64,
    /// Path components of a written file below its root, its own name included.
    pub max_depth: u64,
    /// Directories one `write_file` call may create.
    pub max_new_dirs_per_call: u64,
}

impl Default for StagingLimits {
    /// The `staging:` section's defaults.
    fn default() -> Self {
        StagingLimits::from(&RawStaging::default())
    }
}

impl From<&RawStaging> for StagingLimits {
    fn from(raw: &RawStaging) -> Self {
        StagingLimits {
            max_file_bytes: raw.max_file_bytes,
            max_chunk_bytes: raw.max_chunk_bytes,
            quota_bytes_per_root: raw.quota_bytes_per_root,
            quota_entries_per_root: raw.quota_entries_per_root,
            max_depth: raw.max_depth,
            max_new_dirs_per_call: raw.max_new_dirs_per_call,
        }
    }
}

/// Where a client may write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteRoots {
    /// Every file root (implicit clients: `default`, `anonymous`, `stdio`).
    All,
    /// Only these roots (each one of `file_roots`); empty: nowhere.
    Only(Vec<PathBuf>),
}

impl WriteRoots {
    /// Whether `root` (an entry of `file_roots`) may be written.
    pub fn allows(&self, root: &Path) -> bool {
        match self {
            WriteRoots::All => true,
            WriteRoots::Only(roots) => roots.iter().any(|r| r == root),
        }
    }
}

/// The staging policy of one client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientStaging {
    pub write_roots: WriteRoots,
    pub limits: StagingLimits,
}

/// The `staging:` section, with each configured client's policy.
#[derive(Debug, Clone, Default)]
pub struct StagingConfig {
    /// Limits of clients that do not override them.
    pub defaults: StagingLimits,
    /// An unfinished upload untouched for this long is deleted (when another upload starts
    /// in its directory).
    pub stale_upload_secs: u64,
    /// `PUT /upload` requests one client may have in flight.
    pub max_uploads_per_client: u64,
    /// A `PUT /upload` body that brings fewer than `upload_min_bytes` in any span this
    /// long ends as a broken one.
    pub upload_stall_secs: u64,
    /// Bytes a `PUT /upload` body must bring in every `upload_stall_secs`.
    pub upload_min_bytes: u64,
    /// The most of a stream's declared length promised ahead of its bytes.
    pub upload_promise_bytes: u64,
    /// Policies of the clients listed under `clients:`, by name.
    pub clients: BTreeMap<String, ClientStaging>,
}

impl StagingConfig {
    /// The policy for the client named `name`.
    ///
    /// A client listed under `clients:` writes only to its `write_roots` (none if absent):
    /// security by default. Identities that are not listed there — `default` (the simple
    /// schema's `auth_token` or the generated token), `anonymous` (`--no-auth` on loopback)
    /// and `stdio` (the local user) — are single-user setups and may write to every root.
    /// An agent acting through a lab peer (`HOST/CLIENT`) has the peer client's policy.
    pub fn policy(&self, name: &str) -> ClientStaging {
        let name = super::peers::configured_client(name);
        self.clients.get(name).cloned().unwrap_or(ClientStaging {
            write_roots: WriteRoots::All,
            limits: self.defaults,
        })
    }
}

/// Bytes of JSON-RPC envelope allowed for around a chunk's base64 text.
pub const CHUNK_ENVELOPE_BYTES: u64 = 64 * 1024;

/// Length of the base64 (padded) text of `n` bytes.
pub fn base64_len(n: u64) -> u64 {
    n.div_ceil(3) * 4
}
