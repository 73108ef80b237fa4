//! The lab beyond this host (docs/LAB.md, "One lab for agents"):
//!
//! - `directory`: every exporter's gatecmd boards and the places over them (tags,
//!   acquisitions, reservations), fed by the labgrid bridge's client stream and read by
//!   `list_boards {scope: "lab"}` and `lock_board {scope: "lab"}`; and whether the
//!   coordinator is reachable now.
//! - `waits`: the lab waiters another host queued here (`lock_board {match, wait_secs}`
//!   for its agent, sent with their lab-wide arrival time), so that the other host can
//!   withdraw one the moment its agent is served elsewhere.
//! - `claims`: this host's own agents' lab waits as the other hosts ask about them: the
//!   first host that frees a board for one is told yes, the others no at once.

pub mod claims;
pub mod directory;
pub mod waits;

pub use directory::{Directory, DirectoryStatus, LabBoard, PlaceSeen, ResourceSeen, Taken};
pub use waits::{LabWait, Waits};

/// The lab's parts of the shared state.
#[derive(Default)]
pub struct Lab {
    pub directory: Directory,
    pub waits: Waits,
    pub claims: claims::Claims,
}
