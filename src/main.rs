use std::process::ExitCode;

use clap::Parser;

// Expansion and the watch caches make many small, short-lived allocations; mimalloc
// serves them faster than the system allocator: 29.2k PinterestService expansions per
// CPU-second against 17.0k (benches/expansion.rs, docs/benchmarks.md).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = pinfed::cli::Cli::parse();
    match pinfed::cli::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
