//! Why an isolated view could not be built.

use std::io;

/// Why an isolated view could not be built. Messages are read by agents and operators.
#[derive(Debug, thiserror::Error)]
pub enum IsolationError {
    #[error(
        "device {device} is not in {listing} (it was unplugged or is re-enumerating); call wait_for_device, then retry"
    )]
    NotInSysfs { device: String, listing: String },
    #[error("cannot read {path} to build the isolated view: {source}")]
    Read { path: String, source: io::Error },
    #[error("device {device} has no usbfs node at {path}; the isolated view would not contain it")]
    NoNode { device: String, path: String },
    #[error("a path for the isolated view contains a NUL byte: {0}")]
    Nul(String),
    #[error("{0}")]
    Setup(String),
}
