//! `pinfed overview`: the federation at a glance from the hub — members with health and
//! room, and every workload with its split and aggregated status. `--watch` refreshes.

use super::table::Table;
use std::fmt::Write as _;
use std::time::Duration;

use clap::Args;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::ApiResource;
use kube::{Client, ResourceExt};

use crate::api::cronjob::PinterestCronJob;
use crate::api::daemon::PinterestDaemon;
use crate::api::federation::MemberCluster;
use crate::api::jobset::PinterestJobSet;
use crate::api::quantity::Milli;
use crate::api::service::PinterestService;
use crate::api::statefulset::PinterestStatefulSet;
use crate::api::training::PinterestTrainingJob;
use crate::controller::kube_args::KubeArgs;

#[derive(Debug, Args)]
pub struct OverviewArgs {
    #[command(flatten)]
    pub kube: KubeArgs,
    /// Refresh every N seconds until interrupted.
    #[arg(long, value_name = "SECONDS")]
    pub watch: Option<u64>,
    /// With --watch: stop after this many refreshes.
    #[arg(long)]
    pub rounds: Option<u64>,
}

fn cond(s: &serde_json::Value, t: &str) -> String {
    s["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == t))
        .and_then(|c| c["status"].as_str())
        .unwrap_or("-")
        .to_string()
}

fn qty(v: &serde_json::Value) -> String {
    v.as_str()
        .and_then(|q| Milli::parse(q).ok())
        .map(|m| m.units().to_string())
        .unwrap_or_else(|| "-".into())
}

/// A cpu or memory quantity as `Milli::format_cpu`/`format_memory` print it everywhere.
fn exact(v: &serde_json::Value, format: fn(Milli) -> String) -> String {
    v.as_str()
        .and_then(|q| Milli::parse(q).ok())
        .map(format)
        .unwrap_or_else(|| "-".into())
}

async fn render(client: &Client) -> anyhow::Result<String> {
    let mut out = String::new();
    let members = Api::<MemberCluster>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    writeln!(out, "MEMBERS")?;
    let mut t = Table::new([
        "NAME", "ZONE", "READY", "VERSION", "NODES", "CPU FREE", "MEM FREE", "GPU",
    ])
    .right(&[4, 5, 6, 7])
    .indent("  ");
    for m in members.items {
        let s = serde_json::to_value(m.status.clone().unwrap_or_default())?;
        t.row([
            m.name_any(),
            m.spec.zone.clone().unwrap_or_default(),
            cond(&s, "Ready"),
            s["kubernetesVersion"].as_str().unwrap_or("-").to_string(),
            s["nodes"]
                .as_i64()
                .map(|n| n.to_string())
                .unwrap_or("-".into()),
            exact(&s["available"]["cpu"], Milli::format_cpu),
            exact(&s["available"]["memory"], Milli::format_memory),
            qty(&s["available"]["gpus"]),
        ]);
    }
    out.push_str(&t.render());
    writeln!(out, "\nWORKLOADS")?;
    let mut t = Table::new([
        "KIND",
        "NAMESPACE/NAME",
        "STRATEGY",
        "SPLIT",
        "PROGRESS",
        "READY",
        "DEGRADED",
    ])
    .indent("  ");
    let kinds = [
        ApiResource::erase::<PinterestService>(&()),
        ApiResource::erase::<PinterestJobSet>(&()),
        ApiResource::erase::<PinterestCronJob>(&()),
        ApiResource::erase::<PinterestDaemon>(&()),
        ApiResource::erase::<PinterestTrainingJob>(&()),
        ApiResource::erase::<PinterestStatefulSet>(&()),
    ];
    for ar in kinds {
        let list = Api::<DynamicObject>::all_with(client.clone(), &ar)
            .list(&ListParams::default())
            .await?;
        for o in list.items {
            let s = &o.data["status"];
            let split: Vec<String> = s["placement"]["placements"]
                .as_array()
                .map(|ps| {
                    ps.iter()
                        .map(|p| {
                            let share = p["replicas"]
                                .as_i64()
                                .map(|r| r.to_string())
                                .or_else(|| p["shards"].as_str().map(|s| format!("[{s}]")));
                            match share {
                                Some(v) => format!("{}:{v}", p["cluster"].as_str().unwrap_or("?")),
                                None => p["cluster"].as_str().unwrap_or("?").to_string(),
                            }
                        })
                        .collect()
                })
                .unwrap_or_default();
            let mut split = if split.is_empty() {
                "-".to_string()
            } else {
                split.join(" ")
            };
            if let Some(u) = s["placement"]["unplaced"].as_i64().filter(|u| *u > 0) {
                split = format!("{split} (+{u} unplaced)");
            }
            let progress = match ar.kind.as_str() {
                "PinterestService" | "PinterestStatefulSet" => {
                    format!(
                        "{}/{} avail",
                        s["availableReplicas"].as_i64().unwrap_or(0),
                        o.data["spec"]["replicas"].as_i64().unwrap_or(0)
                    )
                }
                "PinterestDaemon" => format!(
                    "{}/{} ready",
                    s["ready"].as_i64().unwrap_or(0),
                    s["desired"].as_i64().unwrap_or(0)
                ),
                "PinterestJobSet" => format!(
                    "{}/{} done",
                    s["shardsSucceeded"].as_i64().unwrap_or(0),
                    o.data["spec"]["shards"].as_i64().unwrap_or(0)
                ),
                _ => format!("complete={}", cond(s, "Complete")),
            };
            t.row([
                ar.kind.clone(),
                format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any()),
                s["placement"]["strategy"]
                    .as_str()
                    .unwrap_or("-")
                    .to_string(),
                split,
                progress,
                cond(s, "Ready"),
                cond(s, "Degraded"),
            ]);
        }
    }
    out.push_str(&t.render());
    Ok(out)
}

pub fn run(args: OverviewArgs) -> anyhow::Result<()> {
    tokio::runtime::Runtime::new()?.block_on(async move {
        let client = args.kube.client().await?;
        let Some(every) = args.watch else {
            print!("{}", render(&client).await?);
            return Ok(());
        };
        let mut round = 0;
        loop {
            let text = render(&client)
                .await
                .unwrap_or_else(|e| format!("error: {e:#}\n"));
            // Clear the screen and home the cursor, like `watch`.
            print!(
                "\x1b[2J\x1b[H{}\n(refreshing every {every}s; Ctrl-C to stop)\n",
                text
            );
            round += 1;
            if args.rounds.is_some_and(|r| round >= r) {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_secs(every)).await;
        }
    })
}
