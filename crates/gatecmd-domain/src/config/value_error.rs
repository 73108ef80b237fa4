//! Why one configuration value was refused, as a value: the parse helpers in `raw.rs` and
//! `shell.rs` return it and the validator records it with the file, line and field.

/// A refused configuration value; the message says what would be valid.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ValueError {
    #[error("invalid name {0:?}: use 1 to 64 letters, digits, '_', '-' or '.'")]
    BadName(String),
    #[error("{0:?} is not an absolute path: write the full path, e.g. /usr/bin/{0}")]
    NotAbsolute(String),
    #[error("{0:?} contains '..': write the path without parent-directory components")]
    ParentDir(String),
    #[error("{0:?} is not an address:port; write e.g. \"127.0.0.1:9222\" or \"[::1]:9222\"")]
    NotAddress(String),
    #[error("{0:?} is not a USB id: write 4 hex digits in quotes, e.g. \"2207\"")]
    NotUsbId(String),
    #[error(
        "expected the SHA-256 of the token as 64 hex digits (e.g. from `printf %s \"$TOKEN\" | sha256sum`)"
    )]
    NotSha256,
    #[error("invalid regex {pattern:?}: {error}")]
    BadRegex {
        pattern: String,
        error: regex::Error,
    },
    #[error(
        "progress regex {0:?} has no capture group: wrap the percentage in (...), e.g. \"\\\\((\\\\d+)%\\\\)\""
    )]
    NoCaptureGroup(String),
    /// A prompt regex (`shell:` settings) over its length limit.
    #[error("the regex is longer than {0} characters")]
    PromptTooLong(usize),
    /// A prompt regex that does not compile (within its size limits).
    #[error("{pattern:?} is not a valid regex: {error}")]
    BadPrompt {
        pattern: String,
        error: regex::Error,
    },
}
