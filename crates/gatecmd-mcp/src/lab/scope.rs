//! The `scope` argument of `list_boards` and `lock_board`: this host (the default), or the
//! whole lab (this host and every `labgrid.peers` host).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where to look for boards.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// This host's boards only.
    #[default]
    Host,
    /// This host's boards and every lab peer's (`labgrid.peers`), remote ones as `HOST/BOARD`.
    Lab,
}
