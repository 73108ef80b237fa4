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

/// The lock table as `caller` may see it.
pub fn locks_view(state: &AppState, caller: &str) -> LockList {
    let snapshot = state.locks.snapshot();
    LockList {
        locks: snapshot
            .keys
            .iter()
            .map(|k| LockView::from_state(&k.key, Some(k), caller))
            .collect(),
        omitted: snapshot.omitted,
    }
}
