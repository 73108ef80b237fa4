//! A leased board, its console and its key: what `board_run`, `uboot_run` and `boot_board`
//! take before they talk to the board. The key is taken under the caller's lease and held
//! for the whole call, so two calls never interleave on one console.

use gatecmd_core::identity::ClientIdentity;
use gatecmd_core::refusal::Refusal;
use gatecmd_domain::config::{BoardConfig, Config};
use gatecmd_domain::console::Console;
use gatecmd_domain::console::session::TalkError;
use gatecmd_domain::console::shell::Prompts;
use gatecmd_domain::locks::{CommandGuard, SessionId};
use gatecmd_domain::state::AppState;
use gatecmd_domain::usecases::take::{Caller, TakeError, Taken, take_leased_board};

use super::refusal::TalkRefusal;
use crate::calls::reasons::unknown_board;

/// The board, its console and prompts, and the held board key: what every console
/// conversation starts with.
pub struct Leased {
    pub board: BoardConfig,
    pub console: Option<Console>,
    pub prompts: Prompts,
    pub guard: CommandGuard,
}

/// Looks the board up and takes its key under the caller's lease (refusing at once when
/// another call holds it: no waiting, no interleaving), through the domain's use case;
/// then its prompts, which only a conversation needs.
pub async fn take_board(
    state: &AppState,
    config: &Config,
    who: &ClientIdentity,
    session: Option<SessionId>,
    board: &str,
    lease: Option<&str>,
    what: &str,
) -> Result<Leased, Refusal> {
    let taken = take_leased(state, config, who, session, board, lease, what).await?;
    let prompts = Prompts::new(&taken.board.shell).map_err(|why| TalkRefusal::BadPrompts {
        board: board.to_string(),
        why,
    })?;
    Ok(Leased {
        board: taken.board,
        console: taken.console,
        prompts,
        guard: taken.guard,
    })
}

/// The board and its key without its prompts (`flash_board` talks to no prompt).
pub async fn take_leased(
    state: &AppState,
    config: &Config,
    who: &ClientIdentity,
    session: Option<SessionId>,
    board: &str,
    lease: Option<&str>,
    what: &str,
) -> Result<Taken, Refusal> {
    let caller = Caller {
        client: &who.name,
        session,
        lease,
        tool: what,
    };
    take_leased_board(state, config, caller, board)
        .await
        .map_err(|e| {
            match e {
                TakeError::UnknownBoard => TalkRefusal::from(unknown_board(config, board)),
                TakeError::Lease(e) => TalkRefusal::from(e),
                TakeError::Lock(e) => TalkRefusal::from(e),
            }
            .into()
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
