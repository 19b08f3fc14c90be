use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use crate::api::quantity::Milli;
use crate::topology::Topology;

#[derive(Debug, Args)]
pub struct TopologyArgs {
    /// Topology file, e.g. clusters/local-3.yaml.
    pub file: PathBuf,
    /// Print the validated topology as JSON instead of a summary.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: TopologyArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("reading {}", args.file.display()))?;
    let topology = Topology::from_yaml(&args.file.display().to_string(), &text)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&topology)?);
        return Ok(());
    }
    println!("hub {}", topology.hub.name);
    for m in &topology.members {
        let nodes = Topology::nodes(m);
        let cpu = nodes.iter().fold(Milli::ZERO, |a, n| a + n.cpu);
        let mem = nodes.iter().fold(Milli::ZERO, |a, n| a + n.memory);
        let gpu: u32 = nodes.iter().map(|n| n.gpu).sum();
        let pods: u32 = nodes.iter().map(|n| n.pods).sum();
        println!(
            "member {} zone={} nodes={} cpu={} memory={} pods={} gpu={} mode={}",
            m.name,
            m.zone.as_deref().unwrap_or("-"),
            nodes.len(),
            cpu.format_cpu(),
            mem.format_memory(),
            pods,
            gpu,
            match m.mode {
                crate::api::federation::ClusterMode::Push => "push",
                crate::api::federation::ClusterMode::Pull => "pull",
            }
        );
    }
    Ok(())
}
