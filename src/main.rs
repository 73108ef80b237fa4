//! The `gatecmd` command line.

// Start-up's long-lived data on glibc's malloc (compact at idle), requests' JSON values on
// mimalloc (cheap under two busy workers): src/allocator.rs says why.
#[global_allocator]
static ALLOC: gatecmd::allocator::StartThenMimalloc = gatecmd::allocator::StartThenMimalloc::new();

/// mimalloc's options for a small idle footprint (docs/PERFORMANCE.md, "Idle RSS beside the
/// peer"). Set as defaults, so `MIMALLOC_*` environment variables still override them.
mod allocator_options {
    use std::ffi::{c_int, c_long};

    // Indices into mimalloc's `mi_option_t` (v3, as vendored by libmimalloc-sys 0.1.49, which
    // Cargo.lock pins; its Rust bindings name neither). `option_indices_are_mimallocs` below
    // checks them against the table's defaults.
    pub const PURGE_DELAY: c_int = 15;
    pub const ARENA_RESERVE: c_int = 23;

    /// Free pages go back to the system when freed (default: 1 s later, and only when some
    /// thread next calls the allocator, which an idle server does not).
    pub const PURGE_DELAY_MS: c_long = 0;
    /// The first arena reserves 32 MiB of address space instead of 1 GiB: its bitmaps,
    /// written at start, are sized by it. More arenas are reserved as the heap grows.
    pub const ARENA_RESERVE_KIB: c_long = 32 * 1024;

    unsafe extern "C" {
        fn mi_option_set_default(option: c_int, value: c_long);
    }

    pub extern "C" fn set() {
        // SAFETY: sets two entries of mimalloc's option table (both in range); it takes no
        // lock and allocates nothing, so it is sound before `main`.
        unsafe {
            mi_option_set_default(PURGE_DELAY, PURGE_DELAY_MS);
            mi_option_set_default(ARENA_RESERVE, ARENA_RESERVE_KIB);
        }
    }

    // Run from the ELF constructors, before Rust's runtime makes its first allocation (which
    // reserves the first arena): set at the top of `main`, the arena is already 1 GiB.
    #[used]
    #[unsafe(link_section = ".init_array")]
    static SET_BEFORE_MAIN: extern "C" fn() = set;

    #[cfg(test)]
    mod tests {
        use super::*;

        unsafe extern "C" {
            fn mi_option_get(option: c_int) -> c_long;
        }

        #[test]
        fn option_indices_are_mimallocs() {
            // SAFETY: reads entries of mimalloc's option table; all indices are in range.
            let at = |i| unsafe { mi_option_get(i) };
            // Neighbours with distinctive defaults: a shifted table moves them.
            assert_eq!(at(PURGE_DELAY - 1), 1, "deprecated_eager_commit_delay (=1)");
            assert_eq!(at(18), 100, "os_tag (=100)");
            assert_eq!(at(19), 32, "max_errors (=32)");
            assert_eq!(at(ARENA_RESERVE + 1), 1, "arena_purge_mult (=1)");
            // Ours, set before main in this test binary too (unless the environment says).
            if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
                assert_eq!(at(PURGE_DELAY), PURGE_DELAY_MS);
            }
            if std::env::var_os("MIMALLOC_ARENA_RESERVE").is_none() {
                assert_eq!(at(ARENA_RESERVE), ARENA_RESERVE_KIB);
            }
        }
    }
}

fn main() -> std::process::ExitCode {
    gatecmd::cli::main()
}
