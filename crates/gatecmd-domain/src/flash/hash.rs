//! An input file's SHA-256 for the result and the audit line, taken on a thread of its
//! own at the lowest CPU priority, beside the flash: on a real host it costs nothing
//! visible (SHA-NI, 1.8 GB/s); on a loaded one it yields to the USB work.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use sha2::{Digest, Sha256};

/// A hash being taken; dropped before [`finish`](FileHash::finish) (a flash that stopped),
/// it stops at the next MiB instead of reading the rest of the file.
pub struct FileHash(Option<JoinHandle<Option<String>>>, Arc<AtomicBool>);

impl FileHash {
    /// Starts hashing `file` (read with `pread` on a duplicate: the caller's offset is
    /// neither used nor moved).
    pub fn spawn(file: &File) -> FileHash {
        let stop = Arc::new(AtomicBool::new(false));
        let Ok(dup) = file.try_clone() else {
            return FileHash(None, stop);
        };
        let stopped = stop.clone();
        let handle = std::thread::Builder::new()
            .name("flash-hash".into())
            .spawn(move || {
                // Linux's nice value is per thread: this one yields to every other.
                // SAFETY: setpriority on the calling thread's id; no memory is involved.
                unsafe {
                    libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 19);
                }
                let mut h = Sha256::new();
                let mut buf = vec![0u8; 1 << 20];
                let mut at = 0u64;
                loop {
                    if stopped.load(Ordering::Relaxed) {
                        return None;
                    }
                    let n = dup.read_at(&mut buf, at).ok()?;
                    if n == 0 {
                        break;
                    }
                    h.update(&buf[..n]);
                    at += n as u64;
                }
                Some(hex::encode(h.finalize()))
            })
            .ok();
        FileHash(handle, stop)
    }

    /// The hash, once taken (`None` if the file could not be read).
    pub fn finish(mut self) -> Option<String> {
        self.0.take().and_then(|h| h.join().ok().flatten())
    }
}

impl Drop for FileHash {
    fn drop(&mut self) {
        self.1.store(true, Ordering::Relaxed);
    }
}
