//! The `gatecmd` command line.

fn main() -> std::process::ExitCode {
    gatecmd::cli::main()
}
