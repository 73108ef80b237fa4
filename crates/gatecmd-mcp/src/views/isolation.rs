//! An isolated command's view of its board (docs/ISOLATION.md), in words for people: what
//! `execute_command`'s results, dry runs and stored job answers show.

use gatecmd_domain::exec::isolation::{Privilege, View};

/// The isolated view, for people (dry runs and results).
pub fn render_view(v: &View) -> String {
    let mut s = format!(
        "isolated view of board {} (bus {:03} device {:03}; {}):\n  {} holds only: {}\n",
        v.device,
        v.busnum,
        v.devnum,
        match v.privilege {
            Privilege::Root => "mount namespace",
            Privilege::UserNamespace => "user + mount namespace",
        },
        v.sysfs_listing,
        v.sysfs_entries.join(", ")
    );
    s.push_str(&format!(
        "  {} holds only: {}\n",
        v.usbfs_dir,
        v.device_nodes.join(", ")
    ));
    s
}
