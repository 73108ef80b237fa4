//! The bytes an approval covers: each file argument hashed through the open file the
//! child will be handed, when the request is made and again just before the run.
//!
//! Hashing the open file (not the path) is what binds: a file renamed over the path after
//! the check is not what the child gets, and a file rewritten in place is seen as changed.

use std::io::{Read, Seek, SeekFrom};
use std::os::fd::{AsFd, BorrowedFd};

use sha2::{Digest, Sha256};

/// SHA-256 (lowercase hex) and size of what `fd` holds, read from its start; the offset is
/// put back at the start, where the child expects it. `None` for a directory (an output
/// argument's parent: there is nothing yet to approve in it).
pub fn digest_fd(fd: BorrowedFd<'_>) -> std::io::Result<Option<(String, u64)>> {
    let owned = fd.try_clone_to_owned()?;
    let mut file = std::fs::File::from(owned);
    if !file.metadata()?.is_file() {
        return Ok(None);
    }
    // A dup shares the offset: read from the start, and leave it there for the child.
    file.seek(SeekFrom::Start(0))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        size += n as u64;
    }
    file.seek(SeekFrom::Start(0))?;
    Ok(Some((hex::encode(hasher.finalize()), size)))
}

/// [`digest_fd`] of anything holding a descriptor.
pub fn digest(f: &impl AsFd) -> std::io::Result<Option<(String, u64)>> {
    digest_fd(f.as_fd())
}
