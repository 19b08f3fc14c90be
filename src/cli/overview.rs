//! `pinfed overview`: the federation at a glance from the hub — members with health and
//! room, and every workload with its split and aggregated status. `--watch` refreshes.

use super::client::{clusters_table, workloads_table};
use std::fmt::Write as _;
use std::time::Duration;

use clap::Args;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};

use crate::api::federation::MemberCluster;
use crate::api::kind::api_resource;
use crate::api::workload::WorkloadKind;
use crate::controller::kube_args::KubeArgs;
use crate::jss::views;
use crate::placement::model::Resources;

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

/// The members and the workloads as the hub sees them: the tables of `pinfed clusters` and
/// `pinfed get`, built from the same typed views the JSS serves, read straight from the
/// hub (no JSS needed).
async fn render(client: &Client) -> anyhow::Result<String> {
    let mut out = String::new();
    let members = crate::hub::members::member_clusters(client)
        .list(&ListParams::default())
        .await?;
    // One another pinfed version wrote that this one cannot read is named under the
    // table, not a table that fails as a whole.
    let (mut clusters, mut unreadable) = (Vec::new(), Vec::new());
    for o in members.items {
        match crate::controller::mirror::decode_object::<MemberCluster>(o) {
            Ok((mc, _)) => clusters.push(views::cluster(&mc)),
            Err(e) => unreadable.push(format!("{e:#}")),
        }
    }
    writeln!(out, "MEMBERS")?;
    out.push_str(&indent(&clusters_table(&clusters)));
    for u in unreadable {
        writeln!(out, "  ! {u}")?;
    }
    let mut workloads = Vec::new();
    for kind in WorkloadKind::ALL {
        let list = Api::<DynamicObject>::all_with(client.clone(), &api_resource(kind))
            .list(&ListParams::default())
            .await?;
        workloads.extend(
            list.items
                .iter()
                .map(|o| views::workload(kind, o, &Resources::ZERO)),
        );
    }
    writeln!(out, "\nWORKLOADS")?;
    out.push_str(&indent(&workloads_table(&workloads)));
    Ok(out)
}

fn indent(table: &str) -> String {
    table.lines().map(|l| format!("  {l}\n")).collect()
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
