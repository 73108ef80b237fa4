//! A lab waiter another host queued here (`gatecmd_domain::lab::waits`): the arrival and
//! the wait id its host sent (put into the request by the transport, for a `peer: true`
//! client acting for its agent only), and the wait registered so that its host can
//! withdraw it (`DELETE /lab/waits/ID`).

use rmcp::RoleServer;
use rmcp::service::RequestContext;
use tokio_util::sync::CancellationToken;

use gatecmd_core::refusal::{Refusal, RefusalReason};
use gatecmd_domain::lab::LabWait;
use gatecmd_domain::lab::waits::Registered;
use gatecmd_domain::state::AppState;

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
