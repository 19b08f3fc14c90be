//! `pinfed plan`: offline placement of one workload on a topology file, as JSON.

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Args;

use crate::api::federation::FederatedQuota;
use crate::api::parse::{Document, parse_documents, parse_one};
use crate::api::validate;
use crate::expand::select_profile;
use crate::placement::model::{ClusterView, QuotaView};
use crate::placement::{Decision, PlanInput, from_workload, plan, quota};
use crate::topology::Topology;

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The workload (one Pinterest resource).
    #[arg(short = 'f', long = "file", value_name = "WORKLOAD")]
    pub file: PathBuf,
    /// The topology whose members and node pools are the capacity (clusters/*.yaml).
    #[arg(long, value_name = "FILE")]
    pub topology: PathBuf,
    /// A RuntimeProfile file; its sidecars count in each replica's size.
    #[arg(long, value_name = "FILE")]
    pub runtime: Option<PathBuf>,
    /// The previous decision (JSON, as printed by this command), for minimal movement.
    #[arg(long, value_name = "PLAN.json")]
    pub current: Option<PathBuf>,
    /// FederatedQuota files (repeatable; a file may hold several): every one holds, the
    /// tightest wins, as at the hub and the JSS.
    #[arg(long, value_name = "FILE")]
    pub quota: Vec<PathBuf>,
}

fn read(p: &PathBuf) -> anyhow::Result<String> {
    std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))
}

/// The engine's view of a FederatedQuota file: hard totals and per-cluster caps, minus
/// the usage its status records.
pub fn quota_view(q: &FederatedQuota) -> anyhow::Result<QuotaView> {
    Ok(quota::quota_view(q, None)?)
}

pub fn run(args: PlanArgs) -> anyhow::Result<()> {
    let wfile = args.file.display().to_string();
    let Document::Workload(w) = parse_one(&read(&args.file)?).with_context(|| wfile.clone())?
    else {
        bail!(
            "{wfile}: plan takes one Pinterest workload (PinterestService, PinterestJobSet, ...)"
        );
    };
    let topology =
        Topology::from_yaml(&args.topology.display().to_string(), &read(&args.topology)?)?;
    let profile = match &args.runtime {
        None => None,
        Some(p) => match parse_one(&read(p)?).with_context(|| p.display().to_string())? {
            Document::RuntimeProfile(rp) => {
                validate::runtime_profile(&rp)
                    .with_context(|| format!("{}: invalid RuntimeProfile", p.display()))?;
                Some(rp)
            }
            other => bail!(
                "{}: --runtime expects a RuntimeProfile, not a {}",
                p.display(),
                other.kind()
            ),
        },
    };
    let current = match &args.current {
        None => None,
        Some(p) => Some(Decision::from_json(&read(p)?).with_context(|| {
            format!(
                "{}: not a plan (JSON as printed by pinfed plan)",
                p.display()
            )
        })?),
    };
    let mut quotas = Vec::new();
    for p in &args.quota {
        let at = || p.display().to_string();
        for doc in parse_documents(&read(p)?).with_context(at)? {
            let Document::FederatedQuota(q) = doc else {
                bail!(
                    "{}: --quota expects FederatedQuotas, not a {}",
                    at(),
                    doc.kind()
                );
            };
            quotas.push(quota_view(&q).with_context(at)?);
        }
    }
    let quota = quota::tightest(quotas);
    let w = w.as_ref();
    let chosen = select_profile(profile.as_slice(), w.runtime_version())
        .with_context(|| format!("{wfile}: {} {:?}", w.kind(), w.name()))?;
    let demand = from_workload::demand_for(w, Some(chosen)).with_context(|| wfile.clone())?;
    let policy = from_workload::policy_for(w);
    let clusters = ClusterView::from_topology(&topology);
    let outcome = plan(&PlanInput {
        clusters: &clusters,
        policy: &policy,
        demand: &demand,
        quota: quota.as_ref(),
        current: current.as_ref(),
    });
    let mut json = serde_json::to_string_pretty(&outcome.decision)?;
    json.push('\n');
    super::expand::write_stdout(&json)
}
