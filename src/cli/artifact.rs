//! `pinfed artifact add|list|verify`: publish reviewed workload definitions into an
//! artifact store directory the JSS reads (see `src/jss/artifacts.rs` for the layout).

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};

use crate::api::parse::{Document, parse_one};
use crate::api::validate;
use crate::jss::artifacts::{ArtifactRef, ArtifactStore};

#[derive(Debug, Args)]
pub struct ArtifactArgs {
    #[command(subcommand)]
    pub command: ArtifactCommand,
}

#[derive(Debug, Subcommand)]
pub enum ArtifactCommand {
    /// Validate a workload file and publish it as NAME/VERSION (immutable once published).
    Add {
        /// The artifact store directory.
        #[arg(long, env = "PINFED_JSS_ARTIFACTS")]
        store: PathBuf,
        /// The reviewed workload (one document).
        #[arg(short = 'f', long)]
        file: PathBuf,
        #[arg(long)]
        name: String,
        #[arg(long)]
        version: String,
    },
    /// List the artifacts of a store.
    List {
        #[arg(long, env = "PINFED_JSS_ARTIFACTS")]
        store: PathBuf,
    },
    /// Verify every artifact's checksum (exit 1 when one does not match).
    Verify {
        #[arg(long, env = "PINFED_JSS_ARTIFACTS")]
        store: PathBuf,
    },
}

pub fn run(args: ArtifactArgs) -> anyhow::Result<()> {
    match args.command {
        ArtifactCommand::Add {
            store,
            file,
            name,
            version,
        } => {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("reading {}", file.display()))?;
            match parse_one(&text).with_context(|| file.display().to_string())? {
                Document::Workload(w) => validate::workload(w.as_ref())
                    .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?,
                other => anyhow::bail!(
                    "{}: a {} is not a workload; only workloads are published",
                    file.display(),
                    other.kind()
                ),
            }
            let r = ArtifactRef { name, version };
            let hex = ArtifactStore::new(&store).publish(&r, &text)?;
            println!("published {r} sha256:{hex} in {}", store.display());
            Ok(())
        }
        ArtifactCommand::List { store } => {
            for r in ArtifactStore::new(&store).list() {
                println!("{}\t{}", r.name, r.version);
            }
            Ok(())
        }
        ArtifactCommand::Verify { store } => {
            let s = ArtifactStore::new(&store);
            let mut bad = 0;
            for r in s.list() {
                match s.read(&r) {
                    Ok(a) => println!("ok\t{r}\tsha256:{}", a.sha256),
                    Err(e) => {
                        bad += 1;
                        println!("FAIL\t{r}\t{e}");
                    }
                }
            }
            anyhow::ensure!(bad == 0, "{bad} artifact(s) failed verification");
            Ok(())
        }
    }
}
