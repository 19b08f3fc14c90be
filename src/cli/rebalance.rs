//! `pinfed rebalance KIND NAME | --all [--dry-run]`: place workloads again from scratch
//! through the JSS (`POST .../rebalance`), with the rights of `pinfed delete`. A member's
//! new weight, room freed or a member back do not move running work on their own; this
//! asks for it. The hub moves surge first, as every move (never below target).

use clap::Args;

use super::client::{ServerArgs, kind_segment, list_workloads, print, runtime};
use crate::jss::request::kind_path;
use crate::jss::wire::RebalanceReply;

#[derive(Debug, Args)]
pub struct RebalanceArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    /// The workload's kind (service, jobset, …); with NAME, or neither with --all.
    pub kind: Option<String>,
    pub name: Option<String>,
    #[arg(short, long, env = "PINFED_NAMESPACE")]
    pub namespace: String,
    /// Every workload of the namespace you may change.
    #[arg(long, conflicts_with_all = ["kind", "name"])]
    pub all: bool,
    /// Show the moves it would make; ask for nothing.
    #[arg(long)]
    pub dry_run: bool,
}

pub fn run(args: RebalanceArgs) -> anyhow::Result<()> {
    let client = args.server.client()?;
    let rt = runtime()?;
    let targets: Vec<(String, String)> = match (&args.kind, &args.name, args.all) {
        (Some(k), Some(n), false) => vec![(kind_segment(k)?, n.clone())],
        (_, _, true) => {
            let path = format!("/v1/workloads/{}", args.namespace);
            let listed = rt.block_on(list_workloads(&client, &path))?;
            listed
                .items
                .into_iter()
                .filter(|w| !w.deleting)
                .map(|w| (kind_path(w.kind), w.name))
                .collect()
        }
        _ => anyhow::bail!("give KIND NAME, or --all for every workload of the namespace"),
    };
    let query = if args.dry_run { "?dryRun=true" } else { "" };
    let mut replies = Vec::new();
    for (kind, name) in targets {
        let path = format!(
            "/v1/workloads/{}/{kind}/{name}/rebalance{query}",
            args.namespace
        );
        let reply: RebalanceReply = rt
            .block_on(client.post_json(&path, &serde_json::json!({})))?
            .decode()?;
        replies.push(reply);
    }
    print(args.server.output, &replies, |rs| {
        if rs.is_empty() {
            return format!("no workload in {}\n", args.namespace);
        }
        rs.iter().map(|r| format!("{}\n", r.message)).collect()
    })
}
