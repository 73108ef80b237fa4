//! The refusals several tool families share, each worded once: every family embeds these
//! types (or renders them through [`UnknownBoard::text`] and [`WaitTooLong::text`] where
//! its variant keeps its own fields), so an agent reads the same sentence whichever tool
//! refused it.

use super::{Classified, RefusalReason};

/// A board name that is not configured.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", UnknownBoard::text(name, known))]
pub struct UnknownBoard {
    /// The name asked for.
    pub name: String,
    /// The configured boards' names, in config order.
    pub known: Vec<String>,
}

impl UnknownBoard {
    /// The one wording, for a variant that keeps the name and the list as its own fields.
    pub fn text(name: &str, known: &[String]) -> String {
        let known = if known.is_empty() {
            "none (the server's config has no boards: section)".to_string()
        } else {
            known.join(", ")
        };
        format!(
            "no board is named {name:?}; configured boards: {known}. list_boards shows each board and its tags"
        )
    }
}

impl Classified for UnknownBoard {
    fn reason(&self) -> RefusalReason {
        RefusalReason::NotFound
    }
}

/// `wait_secs` above the maximum a call may queue.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", WaitTooLong::text(*wait, *max))]
pub struct WaitTooLong {
    pub wait: u64,
    pub max: u64,
}

impl WaitTooLong {
    /// `wait` as a duration, or the refusal when it is above `max`.
    pub fn check(wait: u64, max: u64) -> Result<std::time::Duration, WaitTooLong> {
        if wait > max {
            return Err(WaitTooLong { wait, max });
        }
        Ok(std::time::Duration::from_secs(wait))
    }

    /// The one wording, for a variant that keeps the numbers as its own fields.
    pub fn text(wait: u64, max: u64) -> String {
        format!(
            "wait_secs {wait} is more than the maximum of {max}; pass at most {max} (and call again to wait longer)"
        )
    }
}

impl Classified for WaitTooLong {
    fn reason(&self) -> RefusalReason {
        RefusalReason::Limit
    }
}

/// A board tool called without the lease it needs (`lease_missing`). (A lease that is
/// unknown, ended or another client's is the lock manager's `LockError`, `lease_invalid`.)
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaseMissing {
    /// Nobody holds the board.
    #[error(
        "{tool} needs your lease on board {board:?}: call lock_board {{board: {board:?}}} first and pass its lease_id as lease"
    )]
    Missing { tool: String, board: String },
    /// The caller holds it but did not pass it (and has no session that took it).
    #[error("you hold the lease on {key}: pass lease: \"{lease_id}\" with {tool}")]
    NotPassed {
        key: String,
        lease_id: String,
        tool: String,
    },
}

impl Classified for LeaseMissing {
    fn reason(&self) -> RefusalReason {
        RefusalReason::LeaseMissing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_board_names_the_configured_ones_or_says_there_are_none() {
        let none = UnknownBoard {
            name: "b9".into(),
            known: vec![],
        };
        assert!(
            none.to_string()
                .contains("configured boards: none (the server's config has no boards: section)")
        );
        let two = UnknownBoard {
            name: "b9".into(),
            known: vec!["b1".into(), "b2".into()],
        };
        assert!(
            two.to_string()
                .starts_with("no board is named \"b9\"; configured boards: b1, b2.")
        );
        assert_eq!(two.reason(), RefusalReason::NotFound);
    }

    #[test]
    fn a_wait_within_the_maximum_passes() {
        assert_eq!(
            WaitTooLong::check(5, 5),
            Ok(std::time::Duration::from_secs(5))
        );
        let e = WaitTooLong::check(6, 5).expect_err("above the maximum");
        assert_eq!(e.reason(), RefusalReason::Limit);
        assert!(
            e.to_string()
                .starts_with("wait_secs 6 is more than the maximum of 5;")
        );
    }
}
