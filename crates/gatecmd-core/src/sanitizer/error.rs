//! Why a slot value or a file argument was refused, as values: the tools layer classifies
//! them (a file argument through a symbolic link is `symlink`, as in file staging), and
//! the messages say what was wrong.

use nix::errno::Errno;

/// Why a file argument could not be opened beneath a file root.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileArgError {
    #[error("'..' is not allowed in file arguments")]
    ParentDir,
    #[error("no file_roots are configured")]
    NoRoots,
    #[error("{value:?}: {why}")]
    BadPath { value: String, why: &'static str },
    #[error("{value} is outside the file roots ({roots})")]
    OutsideRoots { value: String, roots: String },
    #[error("cannot open the file root {root}: {}", errno.desc())]
    RootUnopenable { root: String, errno: Errno },
    /// `what` is "" or "the directory " (an output's parent).
    #[error(
        "{what}{path} resolves to somewhere outside the file roots (through a symbolic \
         link that leaves its root, or an absolute one: only relative links that stay \
         beneath the root are followed)"
    )]
    Escapes { what: &'static str, path: String },
    #[error("{path} is a symbolic link")]
    Symlink { path: String },
    #[error("{path} is not a directory")]
    NotDir { path: String },
    #[error("cannot resolve {what}{path}: no such file or directory")]
    NotFound { what: &'static str, path: String },
    #[error("cannot resolve {path}")]
    Unresolvable { path: String },
    #[error("cannot resolve {path}: {}", errno.desc())]
    Io { path: String, errno: Errno },
    /// The open file could not be duplicated or looked at.
    #[error("{why}")]
    Descriptor { why: String },
    #[error("cannot stat {path}: {why}")]
    Stat { path: String, why: String },
    #[error("{path} is not a regular file")]
    NotRegular { path: String },
    #[error(
        "{path} has {links} hard links; an input with more than one link may be a file from outside \
         the file roots, so it is refused (copy the file instead; the operator may set \
         allow_hardlinked_inputs: true)"
    )]
    HardLinked { path: String, links: u64 },
    #[error("an output needs a file name")]
    NoOutputName,
    #[error("{path} is a symbolic link; outputs must be plain files")]
    OutputSymlink { path: String },
    #[error("{path} exists and is not a regular file")]
    OutputNotRegular { path: String },
}

impl FileArgError {
    /// Whether the path was refused because of a symbolic link: one that leaves its root,
    /// one the resolver does not follow, or an output that is one.
    pub fn is_symlink(&self) -> bool {
        matches!(
            self,
            FileArgError::Escapes { .. }
                | FileArgError::Symlink { .. }
                | FileArgError::OutputSymlink { .. }
        )
    }
}

/// Why one slot value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlotError {
    #[error("empty value")]
    Empty,
    #[error("does not match the allowed form /{regex}/")]
    Form { regex: String },
    #[error("starts with '-' (options cannot be passed through a slot)")]
    Dash,
    #[error("{0}")]
    File(#[from] FileArgError),
}

/// A slot's `params` regex that does not compile.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid regex {pattern:?}: {error}")]
pub struct SlotRegexError {
    pub pattern: String,
    pub error: regex::Error,
}
