//! What a root holds, as the per-root quota counts it.

use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use super::beneath::{Dir, Kind, RelPath, kind_of};

/// Deepest directory level counted by [`usage`].
const USAGE_MAX_DEPTH: usize = 32;

/// Bytes of the regular files beneath `root` (unfinished uploads included), without
/// following symlinks. Directories deeper than 32 levels are not counted.
pub fn usage(root: &Dir) -> u64 {
    fn walk(dir: &Dir, depth: usize) -> u64 {
        let Ok(names) = dir.names() else {
            return 0;
        };
        let mut total = 0u64;
        for n in names {
            let Ok(Some(st)) = dir.stat(&n) else {
                continue;
            };
            match kind_of(&st) {
                Kind::File => total = total.saturating_add(st.st_size as u64),
                Kind::Dir if depth < USAGE_MAX_DEPTH => {
                    let rel = RelPath::parse(&PathBuf::from(&n)).unwrap_or_default();
                    if rel.is_empty() || n.as_bytes().contains(&b'/') {
                        continue;
                    }
                    if let Ok(sub) = dir.open_dir(&rel) {
                        total = total.saturating_add(walk(&sub, depth + 1));
                    }
                }
                _ => {}
            }
        }
        total
    }
    walk(root, 0)
}
