//! Command-line interface: clap definitions and dispatch. Each subcommand lives in its
//! own module; `main.rs` only parses and calls [`run`].

use clap::{Parser, Subcommand};

mod topology;

#[derive(Debug, Parser)]
#[command(
    name = "pinfed",
    version,
    about = "Multi-cluster federation for Pinterest-style Kubernetes workloads"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Validate a topology file (clusters/*.yaml) and summarize its clusters and capacity.
    Topology(topology::TopologyArgs),
}

pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Topology(args) => topology::run(args),
    }
}
