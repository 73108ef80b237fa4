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
/// it stops at the next MiB instead of reading the rest of the file. Or one already
/// taken (an approval's), which the flash does not take again.
pub struct FileHash(
    Option<JoinHandle<Option<String>>>,
    Arc<AtomicBool>,
    Option<String>,
);

impl FileHash {
    /// A hash taken before the flash (an approval's SHA-256 of the same open file).
    pub fn known(sha256: String) -> FileHash {
        FileHash(None, Arc::new(AtomicBool::new(false)), Some(sha256))
    }

    /// The hash already taken, else a new one of `file`.
    pub fn known_or_spawn(known: Option<String>, file: &File) -> FileHash {
        match known {
            Some(sha) => FileHash::known(sha),
            None => FileHash::spawn(file),
        }
    }

    /// Taken before the flash, not beside it.
    pub fn taken_before(&self) -> bool {
        self.2.is_some()
    }

    /// Starts hashing `file` (read with `pread` on a duplicate: the caller's offset is
    /// neither used nor moved).
    pub fn spawn(file: &File) -> FileHash {
        let stop = Arc::new(AtomicBool::new(false));
        counted(file);
        let Ok(dup) = file.try_clone() else {
            return FileHash(None, stop, None);
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
        FileHash(handle, stop, None)
    }

    /// The hash, once taken (`None` if the file could not be read).
    pub fn finish(mut self) -> Option<String> {
        if let Some(known) = self.2.take() {
            return Some(known);
        }
        self.0.take().and_then(|h| h.join().ok().flatten())
    }
}

impl Drop for FileHash {
    fn drop(&mut self) {
        self.1.store(true, Ordering::Relaxed);
    }
}

/// Notes a whole-file hash of `file` about to start (every one a flash_board call takes:
/// beside the flash, or for an approval). Counted per file in tests (`hashes_of`), so that
/// a test proves how often one call reads an image through; nothing in production.
pub(crate) fn counted(file: &File) {
    #[cfg(test)]
    if let Some(path) = path_of(file) {
        let mut started = STARTED.lock().unwrap_or_else(|e| e.into_inner());
        *started.entry(path).or_default() += 1;
    }
    #[cfg(not(test))]
    let _ = file;
}

/// Where an open file is (by its descriptor: a tempdir's random path is never reused,
/// an inode number is).
#[cfg(test)]
fn path_of(file: &File) -> Option<std::path::PathBuf> {
    use std::os::fd::AsRawFd;
    std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()
}

#[cfg(test)]
static STARTED: std::sync::Mutex<std::collections::BTreeMap<std::path::PathBuf, u32>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

/// Whole-file hashes of `file` started so far in this test process.
#[cfg(test)]
pub(crate) fn hashes_of(file: &File) -> u32 {
    let Some(path) = path_of(file) else { return 0 };
    let started = STARTED.lock().unwrap_or_else(|e| e.into_inner());
    started.get(&path).copied().unwrap_or(0)
}
