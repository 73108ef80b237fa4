//! Why a tool said no, as a value: a stable machine-readable [`RefusalReason`] and the
//! message for the agent, together a [`Refusal`].
//!
//! The reason names are an interface (docs/TOOLS.md lists them; tests/server/refusals.rs pins
//! them): a client may branch on `refusal.reason` without parsing the text, which stays
//! free to improve. This module sits below the tools and the audit log and imports
//! nothing from either, so both can carry the same reason.
//!
//! Every refusal is a typed error first: each tool family has its own enum (beside the
//! code that produces it) that implements [`Classified`], mapping each variant to its
//! reason in one exhaustive match, and [`Refusal::of`] renders any of them. The refusals
//! several families share (an unknown board, `wait_secs` above the maximum, a missing
//! lease) live in [`common`], so their wording is the same wherever they appear.

pub mod common;

use std::fmt;

use schemars::JsonSchema;
use serde::Serialize;

/// Declares [`RefusalReason`] from one list: each variant with its stable name beside it.
/// [`RefusalReason::ALL`] and [`RefusalReason::as_str`] are generated from that list, so a
/// new reason is written once (its serialised form is serde's, checked equal to the name by
/// a unit test below).
macro_rules! reasons {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[doc = $doc:literal])* $variant:ident => $wire:literal, )*
        }
    ) => {
        $(#[$meta])*
        pub enum $name {
            $( $(#[doc = $doc])* $variant, )*
        }

        impl $name {
            /// Every reason, in declaration order: docs/TOOLS.md's table is checked against
            /// this list (tests/server/docs_truth.rs).
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            /// The stable name, as serialised (`forbidden_character`).
            pub fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $wire, )*
                }
            }
        }
    };
}

reasons! {
    /// The class of a refusal. Serialised in snake_case; never renamed once published.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, JsonSchema)]
    #[serde(rename_all = "snake_case")]
    pub enum RefusalReason {
        /// The request itself is malformed or contradictory (both `device` and `key`, a bad
        /// id or key syntax, `timeout_secs: 0`, bad base64 or hash form, …).
        InvalidRequest => "invalid_request",
        /// The command is not configured, or not one this client may run (the two are not
        /// told apart, so a client cannot probe for commands it may not see).
        UnknownCommand => "unknown_command",
        /// The command is configured but its binary is missing or not executable on the host.
        CommandUnavailable => "command_unavailable",
        /// The command is a board's power action: only `power_board` runs it, under the
        /// board's lease.
        PowerCommand => "power_command",
        /// Something the request needs is not configured (a device class, file roots).
        NotConfigured => "not_configured",
        /// An argument contains a shell metacharacter, quote, backslash or control character.
        ForbiddenCharacter => "forbidden_character",
        /// The arguments match none of the command's allowed patterns (including a file
        /// argument that resolves outside the file roots).
        NoPatternMatched => "no_pattern_matched",
        /// `timeout_secs` is above the command's (or its pattern's) timeout.
        TimeoutTooLong => "timeout_too_long",
        /// A configured maximum: `wait_secs`, `ttl_secs`, commands running at once per
        /// client, chunk or file size, a root's quota, lease counts.
        Limit => "limit",
        /// The device or key is locked by someone else (or the caller's own running command).
        DeviceBusy => "device_busy",
        /// No matching device is attached (the named one, or any of the command's class).
        DeviceAbsent => "device_absent",
        /// The named device is not of the command's device class.
        DeviceMismatch => "device_mismatch",
        /// Several boards fit an isolated command and none was named.
        DeviceAmbiguous => "device_ambiguous",
        /// The lease presented is unknown, ended, or another client's.
        LeaseInvalid => "lease_invalid",
        /// The call needs a lease and none was presented (nobody holds the board, or the
        /// caller holds it and did not pass its id).
        LeaseMissing => "lease_missing",
        /// The client already holds a lease on that key.
        AlreadyHeld => "already_held",
        /// The isolated view of the board could not be built; nothing ran.
        IsolationUnavailable => "isolation_unavailable",
        /// A path is outside every file root, or names no file root.
        OutsideRoots => "outside_roots",
        /// A path is not acceptable as written (`..`, a reserved upload name, …).
        InvalidPath => "invalid_path",
        /// A path goes through a symbolic link; none is followed inside file roots.
        Symlink => "symlink",
        /// The path exists but is the wrong kind (a directory, a special file, a hard link).
        WrongFileType => "wrong_file_type",
        /// The path (or a directory on it) does not exist.
        NotFound => "not_found",
        /// The client may not do this here (write under a root it has no write right to).
        NotPermitted => "not_permitted",
        /// The chunk does not fit the upload's state (wrong offset, none in progress, one
        /// already in progress).
        UploadState => "upload_state",
        /// The whole file's SHA-256 differs from the one given; the upload was discarded.
        HashMismatch => "hash_mismatch",
        /// The file system said no (permissions, disk full, …).
        IoError => "io_error",
        /// The client cancelled the call before anything ran.
        Cancelled => "cancelled",
        /// gatecmd (or one of its parts) is stopping; retry once it is back.
        ShuttingDown => "shutting_down",
        /// The command was allowed but could not be started (or its task failed).
        StartFailed => "start_failed",
        /// What a board_run, uboot_run or boot_board waited for did not come in time; the
        /// message names what was awaited and what the console showed last.
        Timeout => "timeout",
        /// The board is not in the state the tool needs (e.g. not at U-Boot's prompt for
        /// uboot_run); the message says what it shows and which tool gets it there.
        WrongState => "wrong_state",
        /// The board refused the configured login.
        LoginFailed => "login_failed",
        /// The board shows a login prompt (or asks a password) and neither the operator's
        /// configuration nor the call says who logs in; the message names both ways in
        /// (board_run's `login`, or console_write).
        LoginNeeded => "login_needed",
        /// An approver said no (the message carries who and their note); nothing ran.
        ApprovalDenied => "approval_denied",
        /// Nobody decided within the rule's `approve.timeout_secs`; nothing ran.
        ApprovalExpired => "approval_expired",
        /// The request ended without a decision: its requester withdrew it (cancel_job) or
        /// the lease it was made under ended; nothing ran.
        ApprovalEnded => "approval_ended",
        /// The caller may not decide this approval request (not one of its rule's approvers,
        /// or the requester itself).
        NotAnApprover => "not_an_approver",
        /// What was approved changed before it ran (a file argument's content, the argv, the
        /// board); nothing ran.
        ChangedSinceApproval => "changed_since_approval",
        /// The rule asks the requesting client's own user (`by: requester`) and the client
        /// did not declare MCP elicitation, or its user declined to answer.
        ApprovalUnavailable => "approval_unavailable",
        /// The lab host that has the board (a `HOST/BOARD` name, `scope: "lab"`) did not
        /// answer in time or refused this host's peer token; the message names the host.
        HostUnreachable => "host_unreachable",
        /// A lab-wide allocation (`lock_board {scope: "lab"}`) found no free board here and
        /// cannot look at the rest of the lab: the lab's labgrid coordinator, where its boards,
        /// acquisitions and reservations are listed, is not reachable from this host.
        CoordinatorUnreachable => "coordinator_unreachable",
    }
}

impl fmt::Display for RefusalReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A typed refusal: an error whose every variant has a stable reason. Implemented by each
/// tool family's error enum with one exhaustive match, so a new variant must be classified
/// before it builds; rendered by [`Refusal::of`] (or `.into()`).
pub trait Classified: fmt::Display {
    /// The stable class of this refusal.
    fn reason(&self) -> RefusalReason;
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

    /// The one rendering of a typed refusal: its reason and its message.
    pub fn of(e: &(impl Classified + ?Sized)) -> Refusal {
        Refusal::new(e.reason(), e.to_string())
    }
}

impl<E: Classified> From<E> for Refusal {
    fn from(e: E) -> Refusal {
        Refusal::of(&e)
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
        for r in RefusalReason::ALL {
            assert_eq!(
                serde_json::to_value(r).expect("serialise"),
                serde_json::Value::String(r.as_str().into())
            );
        }
    }

    /// `ALL` is every variant: the derived schema enumerates them from the type itself.
    #[test]
    fn all_lists_every_variant_once() {
        let schema = serde_json::to_value(schemars::schema_for!(RefusalReason)).expect("schema");
        let mut derived: Vec<String> = schema["enum"]
            .as_array()
            .or_else(|| schema["oneOf"].as_array())
            .expect("an enum schema")
            .iter()
            .map(|v| {
                v.as_str()
                    .or_else(|| v["const"].as_str())
                    .or_else(|| v["enum"][0].as_str())
                    .expect("a variant name")
                    .to_string()
            })
            .collect();
        let mut listed: Vec<String> = RefusalReason::ALL
            .iter()
            .map(|r| r.as_str().to_string())
            .collect();
        derived.sort();
        listed.sort();
        assert_eq!(listed, derived);
        listed.dedup();
        assert_eq!(
            listed.len(),
            RefusalReason::ALL.len(),
            "a reason listed twice"
        );
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
