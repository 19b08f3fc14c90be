//! `pinfed plan`: offline placement of one workload on a topology file, as JSON.

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Args;

use crate::api::federation::{Amounts, FederatedQuota};
use crate::api::parse::{Document, parse_one};
use crate::api::validate;
use crate::expand::select_profile;
use crate::placement::model::{ClusterView, Limits, QuotaUse, QuotaView, Resources};
use crate::placement::{Decision, PlanInput, from_workload, plan};
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
    /// A FederatedQuota file.
    #[arg(long, value_name = "FILE")]
    pub quota: Option<PathBuf>,
}

fn read(p: &PathBuf) -> anyhow::Result<String> {
    std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))
}

fn limits(a: &Amounts) -> Limits {
    Limits {
        cpu: a.cpu,
        memory: a.memory,
        gpu: a.gpus.map(|g| i64::try_from(g.units()).unwrap_or(i64::MAX)),
        pods: a.pods.map(|p| i64::try_from(p.units()).unwrap_or(i64::MAX)),
    }
}

fn used(a: &Amounts) -> Resources {
    Resources {
        cpu: a.cpu.unwrap_or_default(),
        memory: a.memory.unwrap_or_default(),
        gpu: a
            .gpus
            .map(|g| i64::try_from(g.units()).unwrap_or(0))
            .unwrap_or(0),
        pods: a
            .pods
            .map(|p| i64::try_from(p.units()).unwrap_or(0))
            .unwrap_or(0),
    }
}

/// The engine's view of a FederatedQuota: hard totals and per-cluster caps, minus usage.
pub fn quota_view(q: &FederatedQuota) -> anyhow::Result<QuotaView> {
    let name = q.metadata.name.clone().unwrap_or_default();
    let hard = q.spec.hard.parse().context("spec.hard")?;
    let status = q.status.clone().unwrap_or_default();
    let used_total = status
        .used
        .as_ref()
        .map(|u| u.parse())
        .transpose()
        .context("status.used")?
        .unwrap_or_default();
    let mut clusters = std::collections::BTreeMap::new();
    for (c, caps) in &q.spec.per_cluster {
        let h = caps
            .parse()
            .with_context(|| format!("spec.perCluster.{c}"))?;
        let u = status
            .used_per_cluster
            .get(c)
            .map(|u| u.parse())
            .transpose()
            .with_context(|| format!("status.usedPerCluster.{c}"))?
            .unwrap_or_default();
        clusters.insert(
            c.clone(),
            QuotaUse {
                hard: limits(&h),
                used: used(&u),
            },
        );
    }
    Ok(QuotaView {
        name,
        total: QuotaUse {
            hard: limits(&hard),
            used: used(&used_total),
        },
        clusters,
    })
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
    let quota = match &args.quota {
        None => None,
        Some(p) => {
            let q: FederatedQuota =
                serde_yaml::from_str(&read(p)?).with_context(|| p.display().to_string())?;
            Some(quota_view(&q).with_context(|| p.display().to_string())?)
        }
    };
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
