//! [`StagingError`]: every refusal of the file tools, written for the agent reading it.

use nix::errno::Errno;

/// Why a file operation was refused; every message tells the agent what to do next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StagingError {
    #[error(
        "no file_roots are configured on this server, so there is nowhere to keep files; ask the operator to add file_roots"
    )]
    NoRoots,
    #[error(
        "{path:?} is not inside a file root ({roots}); give a path relative to a root or an absolute path under one (list_files shows the roots)"
    )]
    OutsideRoots { path: String, roots: String },
    #[error("{path:?}: {reason}")]
    BadPath { path: String, reason: &'static str },
    #[error(
        "there is no file root {given:?}; give its index (from 0) or its path, one of: {roots}"
    )]
    UnknownRoot { given: String, roots: String },
    #[error("client {client:?} may not write under {root}; {hint}")]
    NotWritable {
        client: String,
        root: String,
        hint: String,
    },
    #[error(
        "{path}: {link} is a symbolic link; gatecmd never follows symlinks inside file roots: use the real directory or file"
    )]
    Symlink { path: String, link: String },
    #[error("{path}: {component} is not a directory")]
    NotADirectory { path: String, component: String },
    #[error("{path}: {missing} does not exist{hint}")]
    NotFound {
        path: String,
        missing: String,
        hint: String,
    },
    #[error(
        "{path} is a {kind}, not a regular file; only regular files can be read, written or removed here"
    )]
    NotRegular { path: String, kind: &'static str },
    #[error("{path} is a directory; {what}")]
    IsDirectory { path: String, what: &'static str },
    #[error(
        "{path} has {links} hard links; an upload is only written through a file with one link (remove it and start again at offset 0)"
    )]
    HardLinked { path: String, links: u64 },
    #[error(
        "this chunk is {bytes} bytes; at most {max} bytes per write_file call: split the file into chunks of at most {max} bytes"
    )]
    ChunkTooLarge { bytes: u64, max: u64 },
    #[error("the file would grow to {size} bytes, more than the {max} bytes allowed for one file")]
    FileTooLarge { size: u64, max: u64 },
    #[error(
        "{root} has no room for this write within its quota of {quota} bytes (staging.quota_bytes_per_root; {used} in use by files at every depth, unfinished uploads included, besides what the uploads being received now are promised); remove files you no longer need with remove_file, or retry when the uploads in flight end"
    )]
    /// `reserved` and `would` are for the server's own checks and tests, never in the
    /// message: what other clients' uploads were promised is theirs (issue 46).
    QuotaExceeded {
        root: String,
        used: u64,
        reserved: u64,
        would: u64,
        quota: u64,
    },
    #[error(
        "{root} would hold {would} files and directories, more than its quota of {quota} (staging.quota_entries_per_root; {used} in use, at every depth, empty files and unfinished uploads included); remove files you no longer need with remove_file, then retry (empty directories count too and only the operator can remove them)"
    )]
    EntryQuotaExceeded {
        root: String,
        used: u64,
        would: u64,
        quota: u64,
    },
    #[error(
        "{path} is {depth} path components below its root; at most {max} are allowed (staging.max_depth): choose a shallower path"
    )]
    TooDeep {
        path: String,
        depth: usize,
        max: u64,
    },
    #[error(
        "writing {path} would create {count} directories; one write_file call creates at most {max} (staging.max_new_dirs_per_call): write into a directory that exists or is at most {max} levels below one (list_files shows what exists)"
    )]
    TooManyNewDirs {
        path: String,
        count: usize,
        max: u64,
    },
    #[error(
        "offset {given} does not continue the upload of {path}: {have} bytes are stored so far; send the chunk at offset {have}, or restart at offset 0 with truncate: true"
    )]
    WrongOffset { path: String, given: u64, have: u64 },
    #[error(
        "no upload of {path} is in progress (never started, completed, discarded or expired); start it with a chunk at offset 0"
    )]
    NoUpload { path: String },
    #[error(
        "an upload of {path} is already in progress with {have} bytes stored; continue at offset {have}, or restart at offset 0 with truncate: true"
    )]
    UploadInProgress { path: String, have: u64 },
    #[error("truncate: true restarts an upload and needs offset 0 (got offset {0})")]
    TruncateNeedsZeroOffset(u64),
    #[error("content_base64 is not valid base64: {0}")]
    BadBase64(String),
    #[error("sha256 must be 64 hex digits: the SHA-256 of the whole file, e.g. from `sha256sum`")]
    BadSha256,
    #[error(
        "SHA-256 mismatch for {path}: expected {expected}, but the {size} bytes received hash to {actual}; the upload was discarded: send the file again from offset 0"
    )]
    HashMismatch {
        path: String,
        expected: String,
        actual: String,
        size: u64,
    },
    #[error(
        "{name:?} is reserved for unfinished uploads (`.<name>.gatecmd-upload`); no file or directory may be made under that name, nor reached through it: choose another name"
    )]
    ReservedName { name: String },
    #[error(
        "{temp} is a {kind} with content, in the place of the temporary file of an upload of {path}; gatecmd removes an empty one (or a link, FIFO or device node) there, but never a directory's content: ask the operator to remove it, or upload under another name"
    )]
    TempNameTaken {
        path: String,
        temp: String,
        kind: &'static str,
    },
    #[error(
        "{path} is being received now by another PUT /upload{by}; one request at a time per file: wait for it to end (GET /upload?path=… says how far it got) and continue at the offset it reports"
    )]
    UploadReceiving { path: String, by: String },
    #[error(
        "client {client:?} already has {max} PUT /upload requests in flight (staging.max_uploads_per_client); wait for one to end, then retry"
    )]
    TooManyUploads { client: String, max: u64 },
    #[error("{op} {path} failed: {reason}")]
    Io {
        op: &'static str,
        path: String,
        reason: String,
    },
}

impl StagingError {
    pub(crate) fn io(op: &'static str, path: &str, e: Errno) -> Self {
        StagingError::Io {
            op,
            path: path.to_string(),
            reason: e.desc().to_lowercase(),
        }
    }
}
