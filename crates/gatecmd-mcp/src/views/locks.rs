//! The lock table as every surface shows it: `list_locks` and the `gatecmd://locks`
//! resource render this.

use schemars::JsonSchema;
use serde::Serialize;

use super::devices::LockView;
use gatecmd_domain::state::AppState;

/// Result of `list_locks`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct LockList {
    /// Keys that are leased, in use or waited for.
    pub locks: Vec<LockView>,
    /// Keys in use beyond the listing limit (`leases.max_listed`), not in `locks`.
    #[serde(skip_serializing_if = "is_zero")]
    pub omitted: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The lock table as `caller` may see it: a lease's id only for its holder, or for an
/// `admin` caller, who may end any lease (`unlock_device`, `gatecmd leases end`) and needs
/// its id for that. (A lease id lets nobody but its holder's client use the lease.)
pub fn locks_view(state: &AppState, caller: &str, admin: bool) -> LockList {
    let snapshot = state.locks.snapshot();
    LockList {
        locks: snapshot
            .keys
            .iter()
            .map(|k| {
                let mut v = LockView::from_state(&k.key, Some(k), caller);
                if admin && v.lease_id.is_none() {
                    v.lease_id = k.lease.as_ref().map(|l| l.lease_id.0.clone());
                }
                v
            })
            .collect(),
        omitted: snapshot.omitted,
    }
}
