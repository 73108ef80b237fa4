//! The view an isolated command gets, read from sysfs right before the fork.

use std::io;
use std::path::Path;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::Serialize;

use super::error::IsolationError;
use super::host::{Privilege, Roots};
use super::setup::Setup;
use gatecmd_devices::DeviceId;

/// The view an isolated command gets, as dry runs and results show it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct View {
    /// The board (its port path).
    pub device: String,
    /// Bus and device number of the board when the view was built.
    pub busnum: u16,
    pub devnum: u16,
    /// The directory replaced by the view's listing.
    pub sysfs_listing: String,
    /// Entries of that listing in the view (the board and its interfaces).
    pub sysfs_entries: Vec<String>,
    /// The directory replaced by the view's usbfs tree.
    pub usbfs_dir: String,
    /// Device nodes in the view (bind-mounted from the real ones).
    pub device_nodes: Vec<String>,
    /// How the namespace is created.
    pub privilege: Privilege,
}

/// A view and the syscall-ready setup that builds it.
#[derive(Debug, Clone)]
pub struct Plan {
    pub view: View,
    pub setup: Arc<Setup>,
}

impl Plan {
    /// Reads the board's current state (entries, bus and device number) from sysfs and
    /// prepares the setup. Call it right before spawning: a board that re-enumerated
    /// since the last command gets a view of it as it is now.
    pub fn new(
        roots: &Roots,
        device: &DeviceId,
        privilege: Privilege,
    ) -> Result<Plan, IsolationError> {
        let listing = roots.listing();
        let id = device.as_str();
        let read_err = |path: &Path, source: io::Error| IsolationError::Read {
            path: path.display().to_string(),
            source,
        };
        let entries = std::fs::read_dir(&listing).map_err(|e| read_err(&listing, e))?;
        let interface_prefix = format!("{id}:");
        let mut links = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name != id && !name.starts_with(&interface_prefix) {
                continue;
            }
            let target =
                std::fs::read_link(entry.path()).map_err(|e| read_err(&entry.path(), e))?;
            links.push((name.to_owned(), target));
        }
        links.sort();
        if !links.iter().any(|(n, _)| n == id) {
            return Err(IsolationError::NotInSysfs {
                device: id.to_owned(),
                listing: listing.display().to_string(),
            });
        }
        let attr = |name: &str| -> Result<u16, IsolationError> {
            let path = listing.join(id).join(name);
            let text = std::fs::read_to_string(&path).map_err(|e| read_err(&path, e))?;
            text.trim().parse().map_err(|_| {
                read_err(
                    &path,
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("not a number: {text:?}"),
                    ),
                )
            })
        };
        let (busnum, devnum) = (attr("busnum")?, attr("devnum")?);
        let bus_dir = roots.usbfs().join(format!("{busnum:03}"));
        let node = bus_dir.join(format!("{devnum:03}"));
        if std::fs::symlink_metadata(&node).is_err() {
            return Err(IsolationError::NoNode {
                device: id.to_owned(),
                path: node.display().to_string(),
            });
        }
        let setup = Setup::new(roots, privilege, &links, Some((&bus_dir, &node)))?;
        Ok(Plan {
            view: View {
                device: id.to_owned(),
                busnum,
                devnum,
                sysfs_listing: listing.display().to_string(),
                sysfs_entries: links.into_iter().map(|(n, _)| n).collect(),
                usbfs_dir: roots.usbfs().display().to_string(),
                device_nodes: vec![node.display().to_string()],
                privilege,
            },
            setup: Arc::new(setup),
        })
    }
}
