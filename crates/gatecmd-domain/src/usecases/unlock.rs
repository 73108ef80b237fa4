//! Ending a lease, the one way every surface ends one by its id (`unlock_device`, `gatecmd
//! leases end`): the holder ends its own; an `admin` client may end anyone's, recorded as
//! released by that operator (`force_released`), which the audit log and `on_release` see
//! like any lease end.

use gatecmd_core::identity::ClientIdentity;

use crate::locks::{ClientName, LeaseId, LeaseInfo, LockError};
use crate::state::AppState;

/// Ends `lease` for `who`; `via` names the surface in an operator's release (`gatecmd
/// leases`), or `None` for the client's own tool call.
pub fn end_lease(
    state: &AppState,
    who: &ClientIdentity,
    lease: &LeaseId,
    via: Option<&str>,
) -> Result<LeaseInfo, LockError> {
    let r = state.locks.unlock(lease, &ClientName(who.name.clone()));
    if who.admin && matches!(r, Err(LockError::NotYourLease { .. })) {
        let operator = match via {
            Some(v) => format!("{} ({v})", who.name),
            None => who.name.clone(),
        };
        return state.locks.force_unlock(lease, &operator);
    }
    r
}
