//! The hidden temporary name of an unfinished upload: `.<name>.gatecmd-upload`, in the
//! directory of the final file.

use std::ffi::{OsStr, OsString};

/// Suffix of the hidden temporary file of an unfinished upload.
pub const TEMP_SUFFIX: &str = ".gatecmd-upload";

/// Longest file name (bytes) on Linux file systems.
const NAME_MAX: usize = 255;

/// The temporary name for `name`, or `None` when it would be longer than a file name may be.
pub fn temp_name(name: &OsStr) -> Option<OsString> {
    let mut t = OsString::from(".");
    t.push(name);
    t.push(TEMP_SUFFIX);
    (t.len() <= NAME_MAX).then_some(t)
}

/// For a temporary name, the final name it belongs to.
pub fn final_name_of(name: &str) -> Option<&str> {
    name.strip_prefix('.')?
        .strip_suffix(TEMP_SUFFIX)
        .filter(|n| !n.is_empty())
}
