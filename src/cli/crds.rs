//! `pinfed crds`: print every CRD, or write them into a directory (one file each).

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use crate::api::workload::{crd_file_name, crd_yaml, crds, crds_with_open_spec, yaml_stream};

#[derive(Debug, Args)]
pub struct CrdsArgs {
    /// Write one `<plural>.<group>.yaml` file per CRD into this directory (e.g. `crds/`)
    /// instead of printing a multi-document stream. Stale pinfed CRD files there are removed.
    #[arg(long, value_name = "DIR")]
    pub write: Option<PathBuf>,
    /// Only the six workload CRDs, their `spec` schema left open (what a member would hold
    /// if only the hub validated specs): for measuring what the pod-template schemas cost
    /// a member's API server (`e2e/member-memory`). Not for installing.
    #[arg(long)]
    pub open_spec: bool,
}

pub fn run(args: CrdsArgs) -> anyhow::Result<()> {
    let all = if args.open_spec {
        crds_with_open_spec()
    } else {
        crds()
    };
    let Some(dir) = args.write else {
        return super::expand::write_stdout(&yaml_stream(&all));
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let wanted: Vec<String> = all.iter().map(crd_file_name).collect();
    // (The open-spec set is a part: it leaves the other files alone.)
    let entries = if args.open_spec {
        Vec::new()
    } else {
        std::fs::read_dir(&dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .collect::<Result<Vec<_>, _>>()?
    };
    for entry in entries {
        let path = entry.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if name.ends_with(".pinterest.com.yaml") && !wanted.iter().any(|w| w == name) {
            std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
            eprintln!("removed stale {}", path.display());
        }
    }
    for crd in &all {
        let path = dir.join(crd_file_name(crd));
        std::fs::write(&path, crd_yaml(crd))
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
