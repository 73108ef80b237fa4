//! A lab waiter another host queued here (`gatecmd_domain::lab::waits`): the arrival and
//! the wait id its host sent (put into the request by the transport, for a `peer: true`
//! client acting for its agent only), and the wait registered so that its host can
//! withdraw it (`DELETE /lab/waits/ID`); and a lease taken for it settled with its host
//! before it is answered (`settle`: the host says whether the waiter still wants a board).

use rmcp::RoleServer;
use rmcp::service::RequestContext;
use tokio_util::sync::CancellationToken;

use gatecmd_core::identity::ClientIdentity;
use gatecmd_core::refusal::{Refusal, RefusalReason};
use gatecmd_domain::lab::LabWait;
use gatecmd_domain::lab::waits::Registered;
use gatecmd_domain::state::AppState;
use gatecmd_domain::usecases::lease::board::Leased;
use gatecmd_domain::usecases::unlock::end_lease;

/// The lab wait a request names, if the transport admitted one.
pub fn lab_wait(ctx: &RequestContext<RoleServer>) -> Option<LabWait> {
    ctx.extensions
        .get::<http::request::Parts>()?
        .extensions
        .get::<LabWait>()
        .cloned()
}

/// `who`'s lab wait registered under its id (for a request that waits and names one);
/// its token ends the wait when the other host withdraws it.
pub fn register<'s>(
    state: &'s AppState,
    who: &str,
    wait: Option<&LabWait>,
    call: &CancellationToken,
) -> Result<Option<Registered<'s>>, Refusal> {
    let Some(w) = wait else { return Ok(None) };
    state
        .lab
        .waits
        .register(who, &w.id, call)
        .map(Some)
        .map_err(|e| Refusal::new(RefusalReason::Limit, e.to_string()))
}

/// A lease just taken for a lab waiter of another host, before it is answered: the
/// waiter's own host is asked whether it still wants a board (`peer_link::claim`). Told
/// no (served elsewhere, or another host claimed it a moment ago), the lease ends at once
/// and the board goes to this host's next waiter; the answer is then a refusal the other
/// host discards. Not asked (the waiter's host is not among this host's `labgrid.peers`, or
/// did not answer within 3 s), the lease stands: that host releases it if it is not needed.
pub async fn settle(
    state: &AppState,
    who: &ClientIdentity,
    wait: Option<&LabWait>,
    leased: Leased,
) -> Result<Leased, Refusal> {
    let Some(w) = wait else { return Ok(leased) };
    let Some((host, _)) = who.name.split_once('/') else {
        return Ok(leased);
    };
    let Some(peer) = gatecmd_domain::config::peer(&state.config().lab_peers, host).cloned() else {
        return Ok(leased);
    };
    match super::wait_link::claim(&peer, &w.id).await {
        Ok(false) => {
            let _ = end_lease(state, who, &leased.info.lease_id, None);
            Err(Refusal::new(
                RefusalReason::Cancelled,
                format!(
                    "lab wait {} is served elsewhere (its host {host} said so when board {} came free here); the board went to the next in this host's queue",
                    w.id, leased.board.name
                ),
            ))
        }
        Ok(true) | Err(_) => Ok(leased),
    }
}
