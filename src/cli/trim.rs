//! Once `serve` is ready: give back the memory only start-up used (docs/PERFORMANCE.md,
//! "Idle memory").
//!
//! Start-up runs code that never runs again (the command line, the YAML parser and the
//! validator, the schemas of every tool) and frees its temporaries. Left alone, the pages of
//! that code stay mapped (the kernel maps file pages 64 KiB around each fault) and glibc's
//! malloc, which start-up runs on (src/allocator.rs), keeps freed pages until a later free
//! trims them: together about half of the idle resident set. Both are handed back here, and
//! the main thread's stack pages below the running server's frames (start-up's deepest
//! calls wrote them). Pages the server does use come back on first use (a minor fault each,
//! once: from the page cache, or zeroed for the stack).

use std::ffi::c_void;

/// Unmaps start-up's file pages and returns glibc's free heap pages to the system.
// Never inlined: scripts/hot-code.py starts recording the serving server's functions when
// this one is entered (callgrind's `--zero-before`), so it needs its own symbol.
#[inline(never)]
pub(super) fn after_start() {
    let unmapped = unmap_clean_file_pages();
    // Start-up allocated on glibc's malloc (src/allocator.rs) and freed its temporaries
    // there; their pages go back here (free chunks inside the heap too, not only its top).
    // SAFETY: `malloc_trim` only releases memory malloc holds as free.
    unsafe { libc::malloc_trim(0) };
    let (stack, depth) = drop_stack_below_here();
    tracing::debug!(
        unmapped_kib = unmapped / 1024,
        stack_dropped_kib = stack / 1024,
        stack_depth_kib = depth / 1024,
        "start-up pages released"
    );
}

/// Room left below this function's frame: the calls it makes, the ones the server makes
/// from the same depth, and a signal handler's frame reuse these pages without a fault.
const STACK_KEPT_BELOW: usize = 16 * 1024;

/// `madvise(MADV_DONTNEED)` on the main thread's stack below the caller's frame and
/// [`STACK_KEPT_BELOW`]: memory below the stack pointer belongs to no live frame, so its
/// pages can go; one touched again comes back zeroed, as a new stack page does. Start-up's
/// deepest calls (parsing the configuration, building the tools' schemas) ran far below
/// where the server then waits. Off the main thread (a runtime worker) it does nothing.
/// Returns the bytes dropped and how deep in the stack this frame is.
#[inline(never)]
fn drop_stack_below_here() -> (usize, usize) {
    let marker = 0u8;
    let here = std::hint::black_box(&marker) as *const u8 as usize;
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return (0, 0);
    };
    let Some((start, end)) = maps.lines().find_map(|l| {
        let range = l.strip_suffix("[stack]")?.split_ascii_whitespace().next()?;
        let (a, b) = range.split_once('-')?;
        Some((
            usize::from_str_radix(a, 16).ok()?,
            usize::from_str_radix(b, 16).ok()?,
        ))
    }) else {
        return (0, 0);
    };
    if !(start..end).contains(&here) {
        return (0, 0);
    }
    let depth = end - here;
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let top = here.saturating_sub(STACK_KEPT_BELOW) & !(page - 1);
    if top <= start {
        return (0, depth);
    }
    // SAFETY: [start, top) is this process's main stack below the current stack pointer
    // (and the kept room): no live frame or value lies there, and an anonymous private
    // page dropped by MADV_DONTNEED reads as zero if it is touched again.
    let dropped =
        unsafe { libc::madvise(start as *mut c_void, top - start, libc::MADV_DONTNEED) } == 0;
    (if dropped { top - start } else { 0 }, depth)
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
