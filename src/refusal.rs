//! Why a tool said no, as a value: a stable machine-readable [`RefusalReason`] and the
//! message for the agent, together a [`Refusal`].
//!
//! The reason names are an interface (docs/TOOLS.md lists them; tests/refusals.rs pins
//! them): a client may branch on `refusal.reason` without parsing the text, which stays
//! free to improve. This module sits below the tools and the audit log and imports
//! nothing from either, so both can carry the same reason.

use std::fmt;

use schemars::JsonSchema;
use serde::Serialize;

/// The class of a refusal. Serialised in snake_case; never renamed once published.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RefusalReason {
    /// The request itself is malformed or contradictory (both `device` and `key`, a bad
    /// id or key syntax, `timeout_secs: 0`, bad base64 or hash form, …).
    InvalidRequest,
    /// The command is not configured, or not one this client may run (the two are not
    /// told apart, so a client cannot probe for commands it may not see).
    UnknownCommand,
    /// The command is configured but its binary is missing or not executable on the host.
    CommandUnavailable,
    /// The command is a board's power action: only `power_board` runs it, under the
    /// board's lease.
    PowerCommand,
    /// Something the request needs is not configured (a device class, file roots).
    NotConfigured,
    /// An argument contains a shell metacharacter, quote, backslash or control character.
    ForbiddenCharacter,
    /// The arguments match none of the command's allowed patterns (including a file
    /// argument that resolves outside the file roots).
    NoPatternMatched,
    /// `timeout_secs` is above the command's (or its pattern's) timeout.
    TimeoutTooLong,
    /// A configured maximum: `wait_secs`, `ttl_secs`, commands running at once per
    /// client, chunk or file size, a root's quota, lease counts.
    Limit,
    /// The device or key is locked by someone else (or the caller's own running command).
    DeviceBusy,
    /// No matching device is attached (the named one, or any of the command's class).
    DeviceAbsent,
    /// The named device is not of the command's device class.
    DeviceMismatch,
    /// Several boards fit an isolated command and none was named.
    DeviceAmbiguous,
    /// The lease presented is unknown, ended, or another client's.
    LeaseInvalid,
    /// The client already holds a lease on that key.
    AlreadyHeld,
    /// The isolated view of the board could not be built; nothing ran.
    IsolationUnavailable,
    /// A path is outside every file root, or names no file root.
    OutsideRoots,
    /// A path is not acceptable as written (`..`, a reserved upload name, …).
    InvalidPath,
    /// A path goes through a symbolic link; none is followed inside file roots.
    Symlink,
    /// The path exists but is the wrong kind (a directory, a special file, a hard link).
    WrongFileType,
    /// The path (or a directory on it) does not exist.
    NotFound,
    /// The client may not do this here (write under a root it has no write right to).
    NotPermitted,
    /// The chunk does not fit the upload's state (wrong offset, none in progress, one
    /// already in progress).
    UploadState,
    /// The whole file's SHA-256 differs from the one given; the upload was discarded.
    HashMismatch,
    /// The file system said no (permissions, disk full, …).
    IoError,
    /// The client cancelled the call before anything ran.
    Cancelled,
    /// gatecmd (or one of its parts) is stopping; retry once it is back.
    ShuttingDown,
    /// The command was allowed but could not be started (or its task failed).
    StartFailed,
    /// What a board_run, uboot_run or boot_board waited for did not come in time; the
    /// message names what was awaited and what the console showed last.
    Timeout,
    /// The board is not in the state the tool needs (e.g. not at U-Boot's prompt for
    /// uboot_run); the message says what it shows and which tool gets it there.
    WrongState,
    /// The board refused the configured login.
    LoginFailed,
}

impl RefusalReason {
    /// The stable name, as serialised (`forbidden_character`).
    pub fn as_str(self) -> &'static str {
        use RefusalReason::*;
        match self {
            InvalidRequest => "invalid_request",
            UnknownCommand => "unknown_command",
            CommandUnavailable => "command_unavailable",
            PowerCommand => "power_command",
            NotConfigured => "not_configured",
            ForbiddenCharacter => "forbidden_character",
            NoPatternMatched => "no_pattern_matched",
            TimeoutTooLong => "timeout_too_long",
            Limit => "limit",
            DeviceBusy => "device_busy",
            DeviceAbsent => "device_absent",
            DeviceMismatch => "device_mismatch",
            DeviceAmbiguous => "device_ambiguous",
            LeaseInvalid => "lease_invalid",
            AlreadyHeld => "already_held",
            IsolationUnavailable => "isolation_unavailable",
            OutsideRoots => "outside_roots",
            InvalidPath => "invalid_path",
            Symlink => "symlink",
            WrongFileType => "wrong_file_type",
            NotFound => "not_found",
            NotPermitted => "not_permitted",
            UploadState => "upload_state",
            HashMismatch => "hash_mismatch",
            IoError => "io_error",
            Cancelled => "cancelled",
            ShuttingDown => "shutting_down",
            StartFailed => "start_failed",
            Timeout => "timeout",
            WrongState => "wrong_state",
            LoginFailed => "login_failed",
        }
    }
}

impl fmt::Display for RefusalReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refusal: its class and the message for the agent (what is in the way, what to do).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Refusal {
    pub reason: RefusalReason,
    pub message: String,
}

impl Refusal {
    pub fn new(reason: RefusalReason, message: impl Into<String>) -> Refusal {
        Refusal {
            reason,
            message: message.into(),
        }
    }

    /// A typed error rendered to its message, classified by `reason`.
    pub fn from_error(reason: RefusalReason, e: &impl fmt::Display) -> Refusal {
        Refusal::new(reason, e.to_string())
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_serialised_form() {
        use RefusalReason::*;
        for r in [
            InvalidRequest,
            UnknownCommand,
            CommandUnavailable,
            PowerCommand,
            NotConfigured,
            ForbiddenCharacter,
            NoPatternMatched,
            TimeoutTooLong,
            Limit,
            DeviceBusy,
            DeviceAbsent,
            DeviceMismatch,
            DeviceAmbiguous,
            LeaseInvalid,
            AlreadyHeld,
            IsolationUnavailable,
            OutsideRoots,
            InvalidPath,
            Symlink,
            WrongFileType,
            NotFound,
            NotPermitted,
            UploadState,
            HashMismatch,
            IoError,
            Cancelled,
            ShuttingDown,
            StartFailed,
            Timeout,
            WrongState,
            LoginFailed,
        ] {
            assert_eq!(
                serde_json::to_value(r).expect("serialise"),
                serde_json::Value::String(r.as_str().into())
            );
        }
    }

    #[test]
    fn a_refusal_serialises_as_reason_and_message() {
        let r = Refusal::new(RefusalReason::DeviceBusy, "device usb:2207:350b is locked");
        assert_eq!(
            serde_json::to_value(&r).expect("serialise"),
            serde_json::json!({"reason": "device_busy", "message": "device usb:2207:350b is locked"})
        );
        assert_eq!(r.to_string(), "device usb:2207:350b is locked");
    }
}
