//! A host of the lab as `list_boards {scope: "lab"}` shows it.

use schemars::JsonSchema;
use serde::Serialize;

/// A host of the lab as `list_boards {scope: "lab"}` found it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct HostView {
    /// The host's exporter name (`labgrid.name` here, `labgrid.peers[].name` for a peer).
    pub host: String,
    /// Whether it answered now.
    pub reachable: bool,
    /// Why not, when it did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// How many boards it has (as last seen when it did not answer).
    pub boards: usize,
}
