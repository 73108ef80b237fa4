//! Once `serve` is ready: give back the memory only start-up used (docs/PERFORMANCE.md,
//! "Idle memory").
//!
//! Start-up runs code that never runs again (the command line, the YAML parser and the
//! validator, the schemas of every tool) and frees its temporaries. Left alone, the pages of
//! that code stay mapped (the kernel maps file pages 64 KiB around each fault) and mimalloc
//! keeps the freed pages until a later allocation purges them: together about half of the
//! idle resident set. Both are handed back here; pages the server does use come back from the
//! page cache on first use (a minor fault each, once).

use std::ffi::c_void;

// mimalloc's own API (statically linked by the `mimalloc` crate, which declares it only
// under its `extended` feature). Named here so that every binary built from the library,
// its tests included, links the allocator this calls into.
extern crate mimalloc as _;
unsafe extern "C" {
    fn mi_collect(force: bool);
}

/// Unmaps start-up's file pages and returns mimalloc's free pages to the system.
pub(super) fn after_start() {
    let unmapped = unmap_clean_file_pages();
    // SAFETY: `mi_collect` only releases memory mimalloc holds as free; it is the allocator
    // this binary runs on (`#[global_allocator]` in main.rs).
    unsafe { mi_collect(true) };
    tracing::debug!(unmapped_kib = unmapped / 1024, "start-up pages released");
}

/// `madvise(MADV_DONTNEED)` on every private, read-only, file-backed mapping none of whose
/// pages was ever written (smaps' `Anonymous: 0 kB`): the code and constants of the binary
/// and its libraries. For such a mapping the call only drops page-table entries; the next
/// access maps the same page from the file again. Written pages (relocations, a debugger's
/// breakpoints) would be lost, so a mapping that has any is left alone. Returns the bytes
/// unmapped.
fn unmap_clean_file_pages() -> usize {
    let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
        return 0;
    };
    let mut clean = Vec::new();
    let mut current: Option<(usize, usize)> = None;
    for line in smaps.lines() {
        if let Some(range) = mapping(line) {
            clean.extend(current.take());
            current = range;
        } else if let Some(kib) = line.strip_prefix("Anonymous:")
            && kib.trim() != "0 kB"
        {
            current = None;
        }
    }
    clean.extend(current);
    let mut total = 0;
    for (start, len) in clean {
        // SAFETY: the range is a whole mapping of this process that is private, not
        // writable, backed by a file and has no anonymous (written) page: dropping its page
        // table entries loses nothing, and any later access maps the file's page again.
        if unsafe { libc::madvise(start as *mut c_void, len, libc::MADV_DONTNEED) } == 0 {
            total += len;
        }
    }
    total
}

/// For a mapping header line of smaps (`start-end perms offset dev inode path`): `None` when
/// it is not a header, `Some(None)` for a mapping to keep, `Some(Some(range))` for one that
/// may be unmapped if it turns out clean.
fn mapping(line: &str) -> Option<Option<(usize, usize)>> {
    let mut fields = line.split_ascii_whitespace();
    let (start, end) = fields.next()?.split_once('-')?;
    let start = usize::from_str_radix(start, 16).ok()?;
    let end = usize::from_str_radix(end, 16).ok()?;
    let perms = fields.next()?.as_bytes();
    let path = fields.nth(3);
    let eligible = perms.len() == 4
        && perms[1] == b'-'
        && perms[3] == b'p'
        && path.is_some_and(|p| p.starts_with('/'))
        && !line.ends_with("(deleted)");
    Some(eligible.then_some((start, end - start)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_read_only_private_file_mappings_are_candidates() {
        let at = |l: &str| mapping(l);
        assert_eq!(
            at("55d7c0a00000-55d7c0b00000 r-xp 00001000 fd:00 1234   /usr/bin/gatecmd"),
            Some(Some((0x55d7c0a00000, 0x100000)))
        );
        assert_eq!(
            at("7f00-8f00 rw-p 00000000 fd:00 1234 /usr/bin/gatecmd"),
            Some(None)
        );
        assert_eq!(at("7f00-8f00 r--s 00000000 fd:00 9 /dev/shm/x"), Some(None));
        assert_eq!(at("7f00-8f00 r--p 00000000 00:00 0 [vvar]"), Some(None));
        assert_eq!(at("7f00-8f00 rw-p 00000000 00:00 0"), Some(None));
        assert_eq!(at("Rss:                 100 kB"), None);
    }

    #[test]
    fn releasing_keeps_the_process_working() {
        let text = vec![1u8; 1 << 20];
        after_start();
        // Code, constants and the heap still work after the pages were dropped.
        assert_eq!(text.iter().map(|&b| b as usize).sum::<usize>(), 1 << 20);
        assert_eq!(format!("{:?}", Some("still here")), "Some(\"still here\")");
    }
}
