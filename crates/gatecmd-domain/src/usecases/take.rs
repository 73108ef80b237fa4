//! Taking a leased board: its configuration looked up once on one snapshot, the caller's
//! lease checked once, and the board's key taken under that lease for the whole call (no
//! waiting: another call on the board is refused, so two never interleave). The one way
//! `board_run`, `uboot_run`, `boot_board` and `flash_board` take a board; each words a
//! failure as its own refusal.

use std::time::Duration;

use gatecmd_core::refusal::common::LeaseMissing;

use crate::config::{BoardConfig, Config};
use crate::console::Console;
use crate::limits::permits::Permit;
use crate::locks::{
    ClientName, CommandGuard, CommandLockRequest, LeaseId, LockError, LockKey, Retake, SessionId,
};
use crate::state::AppState;

/// A board taken: its configuration (from the snapshot the caller holds), its console,
/// its key and the guard that holds it.
pub struct Taken {
    pub board: BoardConfig,
    pub console: Option<Console>,
    pub key: LockKey,
    pub guard: CommandGuard,
}

/// Why a board was not taken.
#[derive(Debug)]
pub enum TakeError {
    /// No board of that name in the configuration (the caller words the refusal, with
    /// the names there are).
    UnknownBoard,
    /// The caller holds no lease on it, or holds one and did not pass it.
    Lease(LeaseMissing),
    /// The lock manager refused the key (someone else's lease, a call running on it).
    Lock(LockError),
}

/// Who asks, and under which lease, for which tool (named in a lease refusal).
pub struct Caller<'a> {
    pub client: &'a str,
    pub session: Option<SessionId>,
    pub lease: Option<&'a str>,
    pub tool: &'a str,
}

/// Why a call that runs as a job (`flash_board`, `run_test_plan`) got neither its command
/// slot nor its board; each words it as its own refusal.
#[derive(Debug)]
pub enum SlotTakeError {
    /// The client's command slots are all taken (`limits.max_concurrent_per_client`).
    TooManyRunning {
        max: usize,
    },
    /// No board of that name: the boards there are.
    UnknownBoard {
        known: Vec<String>,
    },
    Lease(LeaseMissing),
    Lock(LockError),
}

/// One of the client's command slots (a job counts as a command), then `board` taken for
/// `caller` as [`take_leased_board`] takes it: what a job-backed call holds for its run.
pub async fn take_with_slot(
    state: &AppState,
    config: &Config,
    caller: Caller<'_>,
    board: &str,
) -> Result<(Permit, Taken), SlotTakeError> {
    let Some(slot) = state.client_slot(caller.client) else {
        return Err(SlotTakeError::TooManyRunning {
            max: config.limits.max_concurrent_per_client,
        });
    };
    let taken = take_leased_board(state, config, caller, board)
        .await
        .map_err(|e| match e {
            TakeError::UnknownBoard => SlotTakeError::UnknownBoard {
                known: config.board_names(),
            },
            TakeError::Lease(e) => SlotTakeError::Lease(e),
            TakeError::Lock(e) => SlotTakeError::Lock(e),
        })?;
    Ok((slot, taken))
}

/// Takes `board` for `caller` on `config` (the snapshot the whole call uses).
pub async fn take_leased_board(
    state: &AppState,
    config: &Config,
    caller: Caller<'_>,
    board: &str,
) -> Result<Taken, TakeError> {
    let command = caller.tool.to_string();
    take_leased_board_as(state, config, caller, board, command).await
}

/// [`take_leased_board`], the key's running command named `command` (what the lock table
/// and a busy refusal show, e.g. `power_board cycle`) rather than the tool alone.
pub async fn take_leased_board_as(
    state: &AppState,
    config: &Config,
    caller: Caller<'_>,
    board: &str,
    command: String,
) -> Result<Taken, TakeError> {
    let b = config.board(board).ok_or(TakeError::UnknownBoard)?;
    let key = LockKey::Board(b.name.clone());
    check_lease(state, &key, &caller)?;
    let req = CommandLockRequest {
        keys: vec![key.clone()],
        shared: vec![],
        client: ClientName(caller.client.to_string()),
        session: caller.session,
        lease: caller.lease.map(|l| LeaseId(l.to_string())),
        command,
    };
    let guard = state
        .locks
        .acquire_for_command_wait(req, Duration::ZERO)
        .await
        .map_err(TakeError::Lock)?;
    Ok(Taken {
        console: state.consoles.get(&b.name),
        board: b.clone(),
        key,
        guard,
    })
}

/// The lease half of taking a board, without its key: refused when nobody leased the
/// board's `key` (`lease_missing`; `lease_invalid` naming lock_board when the caller passed
/// a lease that has ended), or when the caller holds the lease and did not pass it. Someone
/// else's lease passes here: the lock manager words who holds it, since when and for how
/// long when the key is taken. What a call checks before it waits for an approval, holding
/// nothing while a person decides.
pub fn check_lease(state: &AppState, key: &LockKey, caller: &Caller<'_>) -> Result<(), TakeError> {
    let board = match key {
        LockKey::Board(n) => n.clone(),
        other => other.to_string(),
    };
    match state.locks.key_state(key).and_then(|s| s.lease) {
        None => match caller.lease {
            // A lease that has ended (or was never one): not a missing lease.
            Some(id) if state.locks.lease(&LeaseId(id.to_string())).is_none() => {
                Err(TakeError::Lock(LockError::UnknownLease {
                    lease_id: LeaseId(id.to_string()),
                    retake: Retake::for_keys([key]),
                }))
            }
            _ => Err(TakeError::Lease(LeaseMissing::Missing {
                tool: caller.tool.to_string(),
                board,
            })),
        },
        Some(l)
            if l.holder.0 == caller.client
                && caller.lease.is_none()
                && caller.session.is_none() =>
        {
            Err(TakeError::Lease(LeaseMissing::NotPassed {
                key: key.to_string(),
                lease_id: l.lease_id.0.clone(),
                tool: caller.tool.to_string(),
            }))
        }
        // Someone else's lease: the lock manager words who, since when, time left.
        Some(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::locks::LeaseRequest;

    fn caller<'a>(client: &'a str, lease: Option<&'a str>) -> Caller<'a> {
        Caller {
            client,
            session: None,
            lease,
            tool: "board_run",
        }
    }

    /// Unknown board, no lease, a lease not passed, someone else's lease, a call already
    /// running on the board: each refused; the holder passing its lease takes it.
    #[tokio::test]
    async fn a_leased_board_is_taken_once_under_its_lease() {
        let config =
            Config::parse("boards:\n  - name: b1\n    usb: \"1-2\"\n", "t.yaml").expect("config");
        let state = AppState::new(config.clone());
        let key = LockKey::Board("b1".into());
        let take = |c| take_leased_board(&state, &config, c, "b1");
        assert!(matches!(
            take_leased_board(&state, &config, caller("a", None), "nope").await,
            Err(TakeError::UnknownBoard)
        ));
        assert!(matches!(
            take(caller("a", None)).await,
            Err(TakeError::Lease(LeaseMissing::Missing { .. }))
        ));
        let lease = state
            .locks
            .lock(LeaseRequest {
                key: key.clone(),
                client: ClientName("a".into()),
                session: None,
                ttl: None,
                note: None,
                wait: Duration::ZERO,
                shared: vec![],
            })
            .await
            .expect("lease");
        let id = lease.lease_id.0.clone();
        assert!(matches!(
            take(caller("a", None)).await,
            Err(TakeError::Lease(LeaseMissing::NotPassed { .. }))
        ));
        assert!(matches!(
            take(caller("b", Some("not-theirs"))).await,
            Err(TakeError::Lock(_))
        ));
        let Ok(taken) = take(caller("a", Some(&id))).await else {
            panic!("the holder passing its lease did not take the board");
        };
        assert_eq!((taken.board.name.as_str(), &taken.key), ("b1", &key));
        assert!(
            matches!(take(caller("a", Some(&id))).await, Err(TakeError::Lock(_))),
            "a second call on the board is refused while the first holds its key"
        );
        drop(taken);
        assert!(take(caller("a", Some(&id))).await.is_ok());
    }
}
