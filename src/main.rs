//! The `gatecmd` command line.

// Answers are JSON values built and freed per request; mimalloc's small-object paths
// are much cheaper than glibc malloc's under two busy worker threads (docs/PERFORMANCE.md).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    gatecmd::cli::main()
}
