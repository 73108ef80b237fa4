//! Per-board isolation: an isolated command runs in its own mount namespace in which
//! the USB view holds only the chosen board, so a tool with no device selector (upstream
//! `rkdeveloptool`, vendor tools that take "the first device") can only find that board.
//!
//! The view, built between fork and exec of the child (docs/ISOLATION.md has the long
//! form):
//! - `<sysfs_root>/bus/usb/devices` (what libudev and libusb enumerate) is covered by a
//!   read-only tmpfs holding only the board's entry and its interfaces' entries, as the
//!   same relative symlinks the kernel made, so they resolve to the real device
//!   directories (parents, port numbers, attributes all real);
//! - `<devfs_root>/bus/usb` is covered by a read-only tmpfs holding only
//!   `BBB/DDD`, the board's usbfs node, bind-mounted from the real one.
//!
//! Everything the child needs is computed and allocated here, before the fork
//! ([`Plan::new`]); [`Setup::apply`] only makes raw syscalls, as the child of a
//! multithreaded process must (no allocation, no locks). As root the child unshares a
//! mount namespace; as any other user it first unshares a user namespace mapping only
//! its own uid and gid (where the kernel allows unprivileged user namespaces).
//!
//! Layout: [`host`] (where the real trees are, what rights this process has), [`plan`]
//! (the view, read from sysfs before the fork), [`setup`] (the syscall-ready steps the
//! child takes, and how a failed step is reported), [`confinement`] (why an unshare was
//! refused, read from `/proc` in the server to name the cause), `sys` (the raw syscalls), `error`.
//! Nothing here spawns a process: the executor (`src/exec.rs`) forks, runs
//! [`Setup::apply`] in the child, and probes the host with an empty view.

pub mod confinement;
mod error;
pub mod host;
pub mod plan;
pub mod setup;
mod sys;

pub use error::IsolationError;
pub use host::{Privilege, Roots};
pub use plan::{Plan, View};
pub use setup::{Setup, report_pipe};
