//! A leased board, its console and its key: what `board_run`, `uboot_run` and `boot_board`
//! take before they talk to the board. The key is taken under the caller's lease and held
//! for the whole call, so two calls never interleave on one console.

use std::time::Duration;

use gatecmd_core::identity::ClientIdentity;
use gatecmd_core::refusal::Refusal;
use gatecmd_core::refusal::common::LeaseInvalid;
use gatecmd_domain::config::{BoardConfig, Config};
use gatecmd_domain::console::Console;
use gatecmd_domain::console::session::TalkError;
use gatecmd_domain::console::shell::Prompts;
use gatecmd_domain::locks::{
    ClientName, CommandGuard, CommandLockRequest, LeaseId, LockKey, SessionId,
};
use gatecmd_domain::state::AppState;

use super::refusal::TalkRefusal;
use crate::reasons::unknown_board;

/// The board, its console and prompts, and the held board key: what every console
/// conversation starts with.
pub struct Leased {
    pub board: BoardConfig,
    pub console: Option<Console>,
    pub prompts: Prompts,
    pub guard: CommandGuard,
}

/// Looks the board up and takes its key under the caller's lease (refusing at once when
/// another call holds it: no waiting, no interleaving).
pub async fn take_board(
    state: &AppState,
    config: &Config,
    who: &ClientIdentity,
    session: Option<SessionId>,
    board: &str,
    lease: Option<&str>,
    what: &str,
) -> Result<Leased, Refusal> {
    let Some(b) = config.board(board) else {
        return Err(TalkRefusal::from(unknown_board(config, board)).into());
    };
    let prompts = Prompts::new(&b.shell).map_err(|why| TalkRefusal::BadPrompts {
        board: board.to_string(),
        why,
    })?;
    let key = LockKey::Board(b.name.clone());
    match state.locks.key_state(&key).and_then(|s| s.lease) {
        None => {
            let e = LeaseInvalid::Missing {
                tool: what.to_string(),
                board: board.to_string(),
            };
            return Err(TalkRefusal::from(e).into());
        }
        Some(l) if l.holder.0 == who.name && lease.is_none() && session.is_none() => {
            let e = LeaseInvalid::NotPassed {
                key: key.to_string(),
                lease_id: l.lease_id.0.clone(),
                tool: what.to_string(),
            };
            return Err(TalkRefusal::from(e).into());
        }
        // Someone else's lease: the lock manager words who, since when, time left.
        Some(_) => {}
    }
    let req = CommandLockRequest {
        keys: vec![key],
        shared: vec![],
        client: ClientName(who.name.clone()),
        session,
        lease: lease.map(|l| LeaseId(l.to_string())),
        command: what.to_string(),
    };
    let guard = state
        .locks
        .acquire_for_command_wait(req, Duration::ZERO)
        .await
        .map_err(TalkRefusal::from)?;
    Ok(Leased {
        console: state.consoles.get(&b.name),
        board: b.clone(),
        prompts,
        guard,
    })
}

/// The refusal for a conversation error before the command ran.
pub fn talk_refusal(board: &str, error: TalkError) -> Refusal {
    TalkRefusal::Talk {
        board: board.to_string(),
        error,
    }
    .into()
}
