//! `pinfed crds`: print every CRD, or write them into a directory (one file each).

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use crate::api::workload::{crd_file_name, crd_yaml, crds, crds_yaml};

#[derive(Debug, Args)]
pub struct CrdsArgs {
    /// Write one `<plural>.<group>.yaml` file per CRD into this directory (e.g. `crds/`)
    /// instead of printing a multi-document stream. Stale pinfed CRD files there are removed.
    #[arg(long, value_name = "DIR")]
    pub write: Option<PathBuf>,
}

pub fn run(args: CrdsArgs) -> anyhow::Result<()> {
    let Some(dir) = args.write else {
        return super::expand::write_stdout(&crds_yaml());
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let all = crds();
    let wanted: Vec<String> = all.iter().map(crd_file_name).collect();
    for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
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
