//! A board's lease (`lock_board`, and the labgrid bridge's hold for a place): a named
//! board, or the first free board of a match, with the requests for a match queued in
//! arrival order across every matching board (docs/BOARDS.md). A board's lease is
//! `board:NAME`, holding its port key and the key of the device at its port shared
//! (`crate::boards::lease_shared_keys`).
//!
//! This creates the lease that `crate::usecases::take::take_leased_board` later checks and
//! uses; it takes no board under an existing lease. Each surface words a [`LeaseError`].

use std::time::Duration;

use gatecmd_core::refusal::common::UnknownBoard;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Ask, request};
use crate::boards::{BoardMatch, QueueFull, lease_shared_keys};
use crate::config::{BoardConfig, Config};
use crate::locks::{LeaseInfo, LeaseRequest, LockError, LockEvent, LockEventKind, LockKey};
use crate::state::AppState;

/// How often a match waiter looks again when nothing told it to: a device arriving in the
/// asked mode is a registry change, not a lock event.
const RECHECK: Duration = Duration::from_millis(500);

/// Which board: one by name, or the first free one of a match.
#[derive(Debug, Clone, Copy)]
pub enum Which<'a> {
    Named(&'a str),
    Matching(&'a BoardMatch),
}

/// A lease taken: the board, the lease, and what its answer shows of the board now.
#[derive(Debug)]
pub struct Leased {
    pub board: BoardConfig,
    pub info: LeaseInfo,
    /// The device at the board's usb port when the lease was taken, if any.
    pub device: Option<String>,
    /// The keys the lease holds shared.
    pub shared_keys: Vec<LockKey>,
}

/// Who holds a matching board that was not free.
#[derive(Debug)]
pub struct Hold {
    pub board: String,
    /// Its lease, or none when a command or a port lease holds it.
    pub lease: Option<LeaseInfo>,
}

/// Why no lease was taken (the surface words it).
#[derive(Debug)]
pub enum LeaseError {
    UnknownBoard(UnknownBoard),
    /// No configured board has the match's tags (`tags`, described), and no wait.
    NoneTagged {
        tags: String,
    },
    QueueFull(QueueFull),
    /// No matching board came free within `waited`.
    AllBusy {
        what: String,
        waited: Duration,
        holds: Vec<Hold>,
        /// Other match requests queued (the caller's own not counted).
        queued: usize,
    },
    Cancelled,
    Lock(LockError),
}

/// Takes a lease on `which` for `ask`; `cancel` ends a wait.
pub async fn lease_board(
    state: &AppState,
    ask: &Ask<'_>,
    which: Which<'_>,
    cancel: &CancellationToken,
) -> Result<Leased, LeaseError> {
    lease_board_arrived(state, ask, which, cancel, None).await
}

/// [`lease_board`] for a waiter that arrived at `arrived_ms` (Unix ms) on another host of
/// the lab: a match request queues here by that arrival (`boards::queue`), not by when its
/// entry reached this host. `None`: it arrives now.
pub async fn lease_board_arrived(
    state: &AppState,
    ask: &Ask<'_>,
    which: Which<'_>,
    cancel: &CancellationToken,
    arrived_ms: Option<i64>,
) -> Result<Leased, LeaseError> {
    let config = state.config();
    let (board, info) = match which {
        Which::Named(name) => {
            let Some(board) = config.board(name) else {
                return Err(LeaseError::UnknownBoard(UnknownBoard {
                    name: name.to_string(),
                    known: config.board_names(),
                }));
            };
            let lease = lease_request(state, &config, board, ask, ask.wait);
            tokio::select! {
                r = state.locks.lock(lease) => (board.clone(), r.map_err(LeaseError::Lock)?),
                _ = cancel.cancelled() => return Err(LeaseError::Cancelled),
            }
        }
        Which::Matching(m) => {
            let tagged = config
                .boards
                .iter()
                .any(|b| tags_only(m).matches(b, state.registry.get(&b.usb).as_ref()));
            // With a wait, a board without a soc tag may still show one when its device
            // enumerates; without one, say plainly that nothing is configured so.
            if !tagged && ask.wait.is_zero() {
                return Err(LeaseError::NoneTagged {
                    tags: tags_only(m).describe(),
                });
            }
            tokio::select! {
                r = by_match(state, ask, m, arrived_ms) => r?,
                _ = cancel.cancelled() => return Err(LeaseError::Cancelled),
            }
        }
    };
    let config = state.config();
    let dev = state.registry.get(&board.usb);
    Ok(Leased {
        shared_keys: lease_shared_keys(&config, &board, dev.as_ref()),
        device: dev.map(|d| d.id.to_string()),
        board,
        info,
    })
}

/// The lease request for `board`: `board:NAME`, holding its port key and the key of the
/// device at its port shared.
fn lease_request(
    state: &AppState,
    config: &Config,
    board: &BoardConfig,
    ask: &Ask<'_>,
    wait: Duration,
) -> LeaseRequest {
    let shared = lease_shared_keys(config, board, state.registry.get(&board.usb).as_ref());
    request(LockKey::Board(board.name.clone()), shared, ask, wait)
}

/// `m` without its mode and attachment conditions: what the configuration alone decides.
fn tags_only(m: &BoardMatch) -> BoardMatch {
    BoardMatch {
        tags: m.tags.clone(),
        ..BoardMatch::default()
    }
}

/// The first free board of `m`, queueing fairly with other match requests up to the wait.
async fn by_match(
    state: &AppState,
    ask: &Ask<'_>,
    m: &BoardMatch,
    arrived_ms: Option<i64>,
) -> Result<(BoardConfig, LeaseInfo), LeaseError> {
    let deadline = Instant::now() + ask.wait;
    let max_waiters = state.locks.settings().max_waiters_per_client;
    // Joined with what it wants now, so that a request arriving just after it cannot
    // take those boards before its first look.
    let wanted = names(&matching(state, &state.config(), m));
    let ticket = state
        .boards
        .queue
        .join_at(ask.client, wanted, max_waiters.max(1), arrived_ms)
        .map_err(LeaseError::QueueFull)?;
    loop {
        // Subscribed before looking, so that a change in between wakes the wait below.
        let mut events = state.locks.subscribe();
        let changed = ticket.changed();
        tokio::pin!(changed);
        changed.as_mut().enable();
        let config = state.config();
        let matching = matching(state, &config, m);
        let mine = ticket.mine(names(&matching));
        for board in matching.iter().filter(|b| mine.contains(&b.name)) {
            if !looks_free(state, board) {
                continue;
            }
            let lease = lease_request(state, &config, board, ask, Duration::ZERO);
            match state.locks.lock(lease).await {
                Ok(info) => return Ok(((*board).clone(), info)),
                // Taken in between, or this client holds it already: try the next one.
                Err(LockError::Busy(_) | LockError::AlreadyHeld { .. }) => continue,
                Err(e) => return Err(LeaseError::Lock(e)),
            }
        }
        if Instant::now() >= deadline {
            return Err(all_busy(state, &matching, m, ask.wait));
        }
        tokio::select! {
            _ = next_change(&mut events) => {}
            _ = changed => {}
            _ = tokio::time::sleep(RECHECK) => {}
            _ = tokio::time::sleep_until(deadline) => {}
        }
    }
}

/// The boards `m` matches now, in config order.
fn matching<'c>(state: &AppState, config: &'c Config, m: &BoardMatch) -> Vec<&'c BoardConfig> {
    config
        .boards
        .iter()
        .filter(|b| m.matches(b, state.registry.get(&b.usb).as_ref()))
        .collect()
}

fn names(boards: &[&BoardConfig]) -> Vec<String> {
    boards.iter().map(|b| b.name.clone()).collect()
}

/// The next lock event that may have freed something: refusals (ours among them) do not.
async fn next_change(events: &mut gatecmd_core::events::Events<LockEvent>) {
    use gatecmd_core::events::RecvError;
    loop {
        match events.recv().await {
            Ok(ev) if ev.kind == LockEventKind::Refused => continue,
            Ok(_) | Err(RecvError::Lagged(_)) => return,
            // No more events: the periodic look is all there is.
            Err(RecvError::Closed) => return std::future::pending().await,
        }
    }
}

/// Whether `board` can be leased right now as far as the table shows: nobody uses or
/// waits for its key, and nothing holds its port. Trying only such boards keeps a queue
/// of waiters from filling the audit log with refusals at every wake-up.
fn looks_free(state: &AppState, board: &BoardConfig) -> bool {
    let port = state.locks.key_state(&LockKey::Port(board.usb.to_string()));
    state
        .locks
        .key_state(&LockKey::Board(board.name.clone()))
        .is_none()
        && port.is_none_or(|p| p.lease.is_none() && p.running.is_none())
}

/// The failure when no matching board came free in time: who holds each.
fn all_busy(
    state: &AppState,
    matching: &[&BoardConfig],
    m: &BoardMatch,
    wait: Duration,
) -> LeaseError {
    let holds = matching
        .iter()
        .map(|b| Hold {
            board: b.name.clone(),
            lease: state
                .locks
                .key_state(&LockKey::Board(b.name.clone()))
                .and_then(|s| s.lease),
        })
        .collect();
    LeaseError::AllBusy {
        what: m.describe(),
        waited: wait,
        holds,
        // The caller's own request is still in the queue here: not counted.
        queued: state.boards.queue.len().saturating_sub(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(client: &str, wait: Duration) -> Ask<'_> {
        Ask {
            client,
            session: None,
            ttl: None,
            note: Some("  "),
            wait,
        }
    }

    fn state() -> std::sync::Arc<AppState> {
        let text = "boards:\n  - name: b1\n    tags: {soc: rk3588}\n    usb: \"1-2\"\n  - name: b2\n    tags: {soc: rk3588}\n    usb: \"1-3\"\n  - name: other\n    usb: \"1-4\"\n";
        AppState::new(Config::parse(text, "t.yaml").expect("config"))
    }

    fn rk3588() -> BoardMatch {
        BoardMatch {
            tags: [("soc".to_string(), "rk3588".to_string())].into(),
            ..BoardMatch::default()
        }
    }

    /// By name: the board's lease holding its port key shared, a blank note dropped; an
    /// unknown name refused with the names there are; a board leased already refused.
    #[tokio::test]
    async fn a_named_board_is_leased_with_its_port_key() {
        let state = state();
        let cancel = CancellationToken::new();
        let a = ask("a", Duration::ZERO);
        let got = lease_board(&state, &a, Which::Named("b1"), &cancel)
            .await
            .expect("leased");
        assert_eq!(got.info.key, LockKey::Board("b1".into()));
        assert_eq!(got.info.note, None);
        assert_eq!(got.shared_keys, [LockKey::Port("1-2".into())]);
        assert_eq!(got.device, None);
        assert!(matches!(
            lease_board(&state, &a, Which::Named("nope"), &cancel).await,
            Err(LeaseError::UnknownBoard(u)) if u.known == ["b1", "b2", "other"]
        ));
        assert!(matches!(
            lease_board(
                &state,
                &ask("b", Duration::ZERO),
                Which::Named("b1"),
                &cancel
            )
            .await,
            Err(LeaseError::Lock(_))
        ));
    }

    /// By match: the first free matching board, then the next; with both taken, a short
    /// wait ends naming who holds each; a tag no board has is refused at once.
    #[tokio::test]
    async fn a_match_takes_the_first_free_board_and_names_the_holders() {
        let state = state();
        let cancel = CancellationToken::new();
        let m = rk3588();
        let first = lease_board(
            &state,
            &ask("a", Duration::ZERO),
            Which::Matching(&m),
            &cancel,
        )
        .await
        .expect("first");
        let second = lease_board(
            &state,
            &ask("b", Duration::ZERO),
            Which::Matching(&m),
            &cancel,
        )
        .await
        .expect("second");
        assert_eq!(
            (first.board.name.as_str(), second.board.name.as_str()),
            ("b1", "b2")
        );
        let waited = Duration::from_millis(300);
        match lease_board(&state, &ask("c", waited), Which::Matching(&m), &cancel).await {
            Err(LeaseError::AllBusy {
                holds,
                waited: w,
                queued,
                ..
            }) => {
                assert_eq!(w, waited);
                assert_eq!(queued, 0, "the caller's own request is not counted");
                let by: Vec<_> = holds
                    .iter()
                    .map(|h| {
                        (
                            h.board.as_str(),
                            h.lease.as_ref().map(|l| l.holder.0.as_str()),
                        )
                    })
                    .collect();
                assert_eq!(by, [("b1", Some("a")), ("b2", Some("b"))]);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(state.boards.queue.len(), 0, "the waiter left the queue");
        let none = BoardMatch {
            tags: [("soc".to_string(), "rk3399".to_string())].into(),
            ..BoardMatch::default()
        };
        assert!(matches!(
            lease_board(
                &state,
                &ask("c", Duration::ZERO),
                Which::Matching(&none),
                &cancel
            )
            .await,
            Err(LeaseError::NoneTagged { .. })
        ));
    }
}
