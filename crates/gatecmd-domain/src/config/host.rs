//! What the host provides: whether a command's binary can run, and the default state
//! directory.

use std::path::{Path, PathBuf};

/// Why a binary cannot be run, if it cannot.
pub fn binary_problem(path: &Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Some(format!("{} does not exist on this host", path.display()))
        }
        Err(e) => Some(format!("{} cannot be inspected: {e}", path.display())),
        Ok(m) if !m.is_file() => Some(format!("{} is not a regular file", path.display())),
        Ok(m) if m.permissions().mode() & 0o111 == 0 => {
            Some(format!("{} is not executable", path.display()))
        }
        Ok(_) => None,
    }
}

pub(crate) fn default_state_dir() -> PathBuf {
    // systemd's StateDirectory= sets this; elsewhere fall back to the XDG location.
    if let Some(d) = std::env::var_os("STATE_DIRECTORY").filter(|v| !v.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(d).join("gatecmd");
    }
    if let Some(h) = std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(h).join(".local/state/gatecmd");
    }
    PathBuf::from("/var/lib/gatecmd")
}
