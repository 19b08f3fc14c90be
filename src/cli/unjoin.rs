use std::time::Duration;

use anyhow::Context;
use clap::Args;

use crate::controller::kube_args::KubeArgs;

#[derive(Debug, Args)]
pub struct UnjoinArgs {
    /// The member to remove.
    pub name: String,
    /// Detach a member that is gone for good: do not wait for it, drop its pending
    /// clean-ups (they are listed) and let the hub re-place what ran there.
    #[arg(long)]
    pub force: bool,
    /// The member's admin context, to remove the hub's ServiceAccount and RBAC there.
    #[arg(long, env = "PINFED_MEMBER_CONTEXT")]
    pub member_context: Option<String>,
    /// How long to wait for workloads to move off the member (seconds).
    #[arg(long, default_value = "300")]
    pub timeout_secs: u64,
    #[command(flatten)]
    pub kube: KubeArgs,
}

pub fn run(args: UnjoinArgs) -> anyhow::Result<()> {
    tokio::runtime::Runtime::new()?.block_on(async {
        let hub = args.kube.client().await.context("connecting to the hub")?;
        let member_admin = match (&args.member_context, args.force) {
            (Some(ctx), false) => Some(
                args.kube
                    .client_for(Some(ctx))
                    .await
                    .context("connecting to the member")?,
            ),
            _ => None,
        };
        let done = crate::hub::unjoin::unjoin(
            &hub,
            &args.name,
            args.force,
            Duration::from_secs(args.timeout_secs),
            member_admin.as_ref(),
            &|line| eprintln!("{line}"),
        )
        .await?;
        for d in &done.dropped {
            println!(
                "dropped pending clean-up: {} {}/{} (uid {}) may remain in {}",
                d.kind, d.namespace, d.name, d.hub_uid, args.name
            );
        }
        for w in &done.still_placed {
            println!("re-placed by the hub: {w} had a share on {}", args.name);
        }
        Ok(())
    })
}
