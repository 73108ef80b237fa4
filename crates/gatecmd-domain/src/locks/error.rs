//! Refusals. Each message is read by an agent: it names who or what is in the
//! way and says what to do next. The wording is an interface (docs/LOCKS.md
//! lists it, tests pin it); change both together.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use schemars::JsonSchema;
use serde::Serialize;

use super::ids::{ClientName, LeaseId, LockKey};

/// Why the lock manager said no.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LockError {
    /// Someone else holds the key (or the caller's own command still runs on
    /// it). The structured details are in [`BusyInfo`].
    #[error("{0}")]
    Busy(Box<BusyInfo>),

    /// The presented lease exists but belongs to another client. Never
    /// waits: queueing would not make the lease yours.
    #[error(
        "lease {lease_id} belongs to client \"{owner}\", not \"{client}\"; take your own lease with {retake}."
    )]
    NotYourLease {
        /// The lease presented.
        lease_id: LeaseId,
        /// Its holder.
        owner: ClientName,
        /// The client that presented it.
        client: ClientName,
        /// The call that takes a lease for what was asked.
        retake: Retake,
    },

    /// The presented lease does not exist (never did, or it ended).
    #[error(
        "lease {lease_id} is unknown or has ended (unlocked, expired, or its session closed); take a new lease with {retake}."
    )]
    UnknownLease {
        /// The lease presented.
        lease_id: LeaseId,
        /// The call that takes a lease for what was asked.
        retake: Retake,
    },

    /// The client asked for a lease on a key it already leases; no second
    /// lease is created.
    #[error(
        "client \"{client}\" already holds device {key} with lease {lease_id} (expires {}); pass that lease with your commands, or unlock_device it first.",
        rfc3339(expires_at)
    )]
    AlreadyHeld {
        /// The key.
        key: LockKey,
        /// The client (holder and requester).
        client: ClientName,
        /// The existing lease.
        lease_id: LeaseId,
        /// When the existing lease expires.
        expires_at: DateTime<Utc>,
    },

    /// The requested TTL is above the configured maximum.
    #[error(
        "ttl_secs {} exceeds the maximum of {}; ask for at most {} seconds.",
        requested.as_secs(), max.as_secs(), max.as_secs()
    )]
    TtlTooLong {
        /// What was asked for.
        requested: Duration,
        /// The configured maximum.
        max: Duration,
    },

    /// A TTL of zero was asked for.
    #[error(
        "ttl_secs must be at least 1; omit it for the default of {} seconds.",
        default.as_secs()
    )]
    ZeroTtl {
        /// The configured default TTL.
        default: Duration,
    },

    /// The client holds, or waits for, as many leases as one client may
    /// (`leases.max_leases_per_client`).
    #[error(
        "client \"{client}\" already holds or waits for {held} leases, the limit (leases.max_leases_per_client) is {max}; release a lease with unlock_device first (list_locks shows yours)."
    )]
    TooManyLeases {
        /// The client.
        client: ClientName,
        /// Its leases plus its lease requests still waiting.
        held: usize,
        /// The configured limit.
        max: usize,
    },

    /// The client has as many requests waiting in lock queues as one client
    /// may (`leases.max_waiters_per_client`).
    #[error(
        "client \"{client}\" already has {waiting} requests waiting for locks, the limit (leases.max_waiters_per_client) is {max}; let one of them finish or give up first, or retry without wait_secs to be answered at once."
    )]
    TooManyWaiters {
        /// The client.
        client: ClientName,
        /// Its requests waiting now.
        waiting: usize,
        /// The configured limit.
        max: usize,
    },

    /// The lease note is longer than allowed (`leases.max_note_bytes`). It is
    /// refused rather than cut, so the holder knows what others will read.
    #[error(
        "the note is {bytes} bytes, the limit (leases.max_note_bytes) is {max}; shorten it to at most {max} bytes (others see it when they find the device busy)."
    )]
    NoteTooLong {
        /// Length of the note given.
        bytes: usize,
        /// The configured limit.
        max: usize,
    },

    /// The manager stopped while the request waited.
    #[error("the lock manager has shut down (gatecmd is stopping); retry once it is back.")]
    ShutDown,
}

/// The call that takes a new lease on what a refused request was for, named in the
/// caller's own family of tools: `lock_board` for a board (a `board:` key), `lock_device`
/// for a device key, both when the request named no key (`unlock_device` of a lease that
/// is gone serves either).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Retake {
    /// `lock_board {board: NAME}`.
    Board(String),
    /// `lock_device`.
    Device,
    /// Either, whichever took the lease.
    Either,
}

impl Retake {
    /// The call for a request on `keys`: a board's when one of them is a board.
    pub fn for_keys<'a>(keys: impl IntoIterator<Item = &'a LockKey>) -> Retake {
        let mut any = false;
        for k in keys {
            if let LockKey::Board(name) = k {
                return Retake::Board(name.clone());
            }
            any = true;
        }
        if any { Retake::Device } else { Retake::Either }
    }
}

impl fmt::Display for Retake {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Retake::Board(name) => write!(f, "lock_board {{board: {name:?}}}"),
            Retake::Device => f.write_str("lock_device"),
            Retake::Either => f.write_str(
                "the tool that took it (lock_board for a board, lock_device for a device)",
            ),
        }
    }
}

impl LockError {
    /// The busy details, when this is [`LockError::Busy`].
    pub fn busy(&self) -> Option<&BusyInfo> {
        match self {
            LockError::Busy(info) => Some(info),
            _ => None,
        }
    }
}

/// How a busy key is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HeldBy {
    /// A lease (possibly with one of its commands running).
    Lease,
    /// A command running without a lease.
    Command,
}

/// Who is in the way on a busy key: the structured form of
/// [`LockError::Busy`], for tool output. Never contains the holder's lease id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct BusyInfo {
    /// The key that is busy.
    pub key: LockKey,
    /// The client holding it.
    pub holder: ClientName,
    /// Whether it is held by a lease or by a command.
    pub held_by: HeldBy,
    /// The lease's note, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The command running on the key right now, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Since when the holder has it: the lease's start, or the command's.
    #[schemars(with = "String")]
    pub since: DateTime<Utc>,
    /// When the lease expires (lease only). While a command of the lease
    /// runs the lease cannot expire; see `ttl_secs`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub expires_at: Option<DateTime<Utc>>,
    /// Whole seconds (rounded up) until the lease expires (lease only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_in_secs: Option<u64>,
    /// The lease's TTL, which restarts when its running command ends (lease
    /// only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_secs: Option<u64>,
    /// How many requests wait in the key's queue.
    pub queue_len: usize,
    /// How long this request waited before giving up (0 when it did not
    /// wait).
    pub waited_secs: u64,
    /// When the key is held shared through a board: that board's key
    /// (`port:1-2`). The lease or command is on that key; look there for
    /// its expiry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub via: Option<LockKey>,
}

impl fmt::Display for BusyInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "device {} is locked by client \"{}\" (",
            self.key, self.holder
        )?;
        let mut parts = Vec::new();
        if self.held_by == HeldBy::Lease {
            parts.push("lease".to_owned());
            if let Some(note) = &self.note {
                parts.push(format!("note: {note:?}"));
            }
        }
        if let Some(command) = &self.command {
            parts.push(format!("running {command:?}"));
        }
        if let Some(via) = &self.via {
            parts.push(format!("through board {via}"));
        }
        write!(f, "{}) since {}", parts.join(", "), rfc3339(&self.since))?;
        if self.held_by == HeldBy::Lease {
            match (&self.command, self.ttl_secs, self.expires_in_secs) {
                (Some(_), Some(ttl), _) => write!(
                    f,
                    ", expires {} after the running command ends",
                    human_secs(ttl)
                )?,
                (_, _, Some(left)) => write!(f, ", expires in {}", human_secs(left))?,
                _ => {}
            }
        }
        write!(f, "; {} waiting", self.queue_len)?;
        if self.waited_secs > 0 {
            write!(f, "; waited {}", human_secs(self.waited_secs))?;
        }
        // A board is queued for by lock_board, whichever board tool found it busy (flash_board,
        // board_run, power_board… take no wait_secs: they need the caller's own lease).
        match (&self.key, self.held_by) {
            (LockKey::Board(name), _) => write!(
                f,
                ". Queue for it with lock_board {{board: {name:?}, wait_secs: …}}, or try later."
            ),
            (_, HeldBy::Lease) => f.write_str(
                ". Retry with wait_secs (up to the lease's remaining time) to queue for it, or try later.",
            ),
            (_, HeldBy::Command) => {
                f.write_str(". Retry with wait_secs to queue for it, or try later.")
            }
        }
    }
}

/// `2026-11-30T09:00:00Z`: RFC 3339, UTC, whole seconds.
pub(crate) fn rfc3339(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// `9m 58s`, or `58s` under a minute. Minutes are not folded into hours: the
/// longest TTL is configured in minutes and reads better that way.
pub(crate) fn human_secs(secs: u64) -> String {
    if secs < 60 {
        format!("{secs}s")
    } else {
        format!("{}m {}s", secs / 60, secs % 60)
    }
}

/// Whole seconds, rounded up so that a lease that is still alive never
/// reads as expiring in 0s.
pub(crate) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}
