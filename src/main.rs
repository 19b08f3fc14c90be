use std::process::ExitCode;

use clap::Parser;

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
