//! The lab beyond this host, as the labgrid coordinator shows it (docs/LAB.md, "One lab for
//! agents"):
//!
//! - `directory`: every exporter's gatecmd boards and the places over them (tags,
//!   acquisitions, reservations), fed by the labgrid bridge's client stream and read by
//!   `list_boards {scope: "lab"}` and `lock_board {scope: "lab"}`; and whether the
//!   coordinator is reachable now.

pub mod directory;

pub use directory::{Directory, DirectoryStatus, LabBoard, PlaceSeen, ResourceSeen, Taken};
