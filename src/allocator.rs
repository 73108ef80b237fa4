//! The binary's global allocator: glibc's malloc while the server starts, mimalloc once it
//! serves (docs/PERFORMANCE.md, "Idle RSS beside the peer"; docs/DECISIONS.md).
//!
//! Two allocators because the two phases want different things:
//!
//! - **Start-up** builds what lives as long as the process (the configuration and its
//!   compiled patterns, the tools' schemas, the runtime, the routes) in a few hundred
//!   allocations of many sizes. mimalloc gives each size class its own 64 KiB page per
//!   thread, so these few long-lived blocks pin ~0.9 MiB of partly used pages at idle;
//!   glibc's malloc packs them next to each other in about a third of that.
//! - **Serving** allocates and frees JSON values per request on two busy workers, where
//!   mimalloc's small-object paths cost a fraction of glibc's (the reason it was chosen).
//!
//! A block is freed by the allocator that gave it: mimalloc's page map answers whether a
//! pointer is its own (`mi_is_in_heap_region`, the same lookup `mi_free` makes), and
//! every other pointer is glibc's. A start-up block that grows after the switch moves to
//! mimalloc. Until `start_serving` (in `serve`, once ready) nothing goes to mimalloc, so
//! short-lived commands (`check`, `devices`) never touch it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};

use mimalloc::MiMalloc;

unsafe extern "C" {
    // mimalloc's API (statically linked by the `mimalloc` crate, which declares it only
    // under its `extended` feature). Safe on any pointer, before mimalloc's first
    // allocation too: its page map then holds nothing and the answer is `false`.
    fn mi_is_in_heap_region(p: *const c_void) -> bool;
}

/// Set once, when the server is ready; never cleared.
static SERVING: AtomicBool = AtomicBool::new(false);

/// From now on new blocks come from mimalloc. Blocks already given out stay where they are.
pub fn start_serving() {
    SERVING.store(true, Ordering::Release);
}

/// glibc's malloc until [`start_serving`], mimalloc after; each block freed by its own.
pub struct StartThenMimalloc(&'static AtomicBool);

impl StartThenMimalloc {
    /// The binary's allocator, switched by [`start_serving`].
    pub const fn new() -> Self {
        Self(&SERVING)
    }

    fn serving(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

impl Default for StartThenMimalloc {
    fn default() -> Self {
        Self::new()
    }
}

fn mimallocs(ptr: *mut u8) -> bool {
    // SAFETY: a read-only lookup in mimalloc's page map, defined for every address.
    unsafe { mi_is_in_heap_region(ptr.cast()) }
}

// SAFETY: every block is allocated by exactly one of two sound allocators and returned to
// that one (`mimallocs` tells them apart: mimalloc's page map holds exactly the addresses
// of its own live pages, which glibc's blocks never share); layouts are passed through.
unsafe impl GlobalAlloc for StartThenMimalloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        unsafe {
            if self.serving() {
                MiMalloc.alloc(layout)
            } else {
                System.alloc(layout)
            }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        unsafe {
            if self.serving() {
                MiMalloc.alloc_zeroed(layout)
            } else {
                System.alloc_zeroed(layout)
            }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator with `layout`, so from exactly one of the two.
        unsafe {
            if mimallocs(ptr) {
                MiMalloc.dealloc(ptr, layout)
            } else {
                System.dealloc(ptr, layout)
            }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as `dealloc`; a moved block is copied within both blocks' sizes and the
        // old one freed only once the copy exists.
        unsafe {
            if mimallocs(ptr) {
                return MiMalloc.realloc(ptr, layout, new_size);
            }
            if !self.serving() {
                return System.realloc(ptr, layout, new_size);
            }
            // A start-up block growing (or shrinking) while serving: into mimalloc.
            let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
            let new = MiMalloc.alloc(new_layout);
            if !new.is_null() {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                System.dealloc(ptr, layout);
            }
            new
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The test binary's own global allocator is the default one, so this calls an instance
    // directly, with a switch of its own (`serve`'s tests may flip the global one): a block
    // from each phase, freed and grown across the switch.
    #[test]
    fn blocks_from_either_phase_are_freed_and_grown_by_their_own_allocator() {
        static SWITCH: AtomicBool = AtomicBool::new(false);
        let a = StartThenMimalloc(&SWITCH);
        let small = Layout::from_size_align(24, 8).unwrap();
        let aligned = Layout::from_size_align(256, 64).unwrap();
        // SAFETY: each block is used within its layout and freed once, by this allocator.
        unsafe {
            let before = a.alloc(small);
            let before_aligned = a.alloc(aligned);
            let grows = a.alloc(small);
            assert!(!before.is_null() && !before_aligned.is_null() && !grows.is_null());
            assert!(!mimallocs(before), "before the switch, blocks are glibc's");
            std::ptr::write_bytes(grows, 7, small.size());
            SWITCH.store(true, Ordering::Release);
            let after = a.alloc(small);
            let after_aligned = a.alloc(aligned);
            assert!(mimallocs(after), "after the switch, blocks are mimalloc's");
            assert_eq!(after_aligned as usize % 64, 0);
            // A start-up block grown after the switch keeps its bytes and moves.
            let grown = a.realloc(grows, small, 4096);
            assert!(mimallocs(grown));
            assert!(
                std::slice::from_raw_parts(grown, small.size())
                    .iter()
                    .all(|&b| b == 7)
            );
            a.dealloc(grown, Layout::from_size_align(4096, 8).unwrap());
            a.dealloc(before, small);
            a.dealloc(before_aligned, aligned);
            a.dealloc(after, small);
            a.dealloc(after_aligned, aligned);
        }
    }
}
