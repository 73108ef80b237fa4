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
    if let Some(d) = std::env::var_os("STATE_DIRECTORY").and_then(|v| first_state_directory(&v)) {
        return d;
    }
    if let Some(d) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(d).join("gatecmd");
    }
    if let Some(h) = std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(h).join(".local/state/gatecmd");
    }
    PathBuf::from("/var/lib/gatecmd")
}

/// The state directory in `$STATE_DIRECTORY`: systemd sets it to a colon-separated list
/// when the unit names several directories (`StateDirectory=gatecmd gatecmd/images` gives
/// `/var/lib/gatecmd:/var/lib/gatecmd/images`), in the order the unit names them; the
/// first is gatecmd's own. `None` when the value is empty or its first entry is.
fn first_state_directory(value: &std::ffi::OsStr) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = value.as_bytes();
    let first = bytes.split(|b| *b == b':').next().unwrap_or_default();
    (!first.is_empty()).then(|| PathBuf::from(std::ffi::OsStr::from_bytes(first)))
}

#[cfg(test)]
mod tests {
    use super::first_state_directory;
    use std::ffi::OsStr;
    use std::path::PathBuf;

    #[test]
    fn state_directory_takes_the_first_of_systemds_list() {
        // What systemd sets for the packaged unit's `StateDirectory=gatecmd gatecmd/images`.
        assert_eq!(
            first_state_directory(OsStr::new("/var/lib/gatecmd:/var/lib/gatecmd/images")),
            Some(PathBuf::from("/var/lib/gatecmd"))
        );
        assert_eq!(
            first_state_directory(OsStr::new("/var/lib/gatecmd")),
            Some(PathBuf::from("/var/lib/gatecmd"))
        );
        assert_eq!(first_state_directory(OsStr::new("")), None);
        assert_eq!(first_state_directory(OsStr::new(":/var/lib/x")), None);
    }
}
