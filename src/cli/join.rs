use std::collections::BTreeMap;

use anyhow::Context;
use clap::Args;

use crate::api::validation::is_dns_label;
use crate::controller::kube_args::KubeArgs;
use crate::hub::join::{
    DEFAULT_AGENT_IMAGE, JoinRequest, check_agent_replacement, check_image_reference,
    installed_agent, join,
};

#[derive(Debug, Args)]
pub struct JoinArgs {
    /// Name of the member (a DNS label); default: the member context's name.
    pub name: Option<String>,
    /// Kubeconfig context of the member to join.
    #[arg(long, env = "PINFED_MEMBER_CONTEXT")]
    pub member_context: String,
    /// Kubeconfig context of the hub (default: --context, then the current context).
    #[arg(long, env = "PINFED_HUB_CONTEXT")]
    pub hub_context: Option<String>,
    /// Region of the member (topology.kubernetes.io/region).
    #[arg(long)]
    pub region: Option<String>,
    /// Zone of the member (topology.kubernetes.io/zone).
    #[arg(long)]
    pub zone: Option<String>,
    /// Labels for cluster selectors, KEY=VALUE (repeatable).
    #[arg(long = "label", value_parser = parse_label)]
    pub labels: Vec<(String, String)>,
    /// Placement weight.
    #[arg(long)]
    pub weight: Option<i32>,
    /// Take region, zone, labels and weight of the member from this topology file.
    #[arg(long, value_name = "FILE")]
    pub from_topology: Option<std::path::PathBuf>,
    /// The member API server URL as the hub reaches it (default: from the member context).
    #[arg(long)]
    pub server: Option<String>,
    /// Also install the agent in the member (deploy/agent: namespace, RBAC, Deployment,
    /// PodDisruptionBudget), named NAME.
    #[arg(long)]
    pub install_agent: bool,
    /// The workload schemas of the CRDs put in the member. full: the member's API server
    /// validates slices as the hub does. open: the workload kinds' spec is left open to it
    /// (the hub validates every spec before it writes a slice, and the agent refuses one
    /// its kind cannot decode as Invalid), which shrinks what a member's API server needs
    /// (~150–190 MiB against ~290): for large fleets where only the hub writes slices.
    #[arg(
        long,
        value_enum,
        env = "PINFED_MEMBER_SCHEMAS",
        default_value = "full"
    )]
    pub member_schemas: crate::hub::join::MemberSchemas,
    /// The agent image for --install-agent (default: what deploy/image/build tags).
    #[arg(long, env = "PINFED_AGENT_IMAGE", default_value = DEFAULT_AGENT_IMAGE)]
    pub agent_image: String,
    /// With --install-agent: replace an agent the member already runs with another image
    /// or member name (without it, join stops before changing anything).
    #[arg(long, requires = "install_agent")]
    pub replace_agent: bool,
    /// push: the hub connects to the member with a ServiceAccount made there. pull: the
    /// hub never connects; the member's agent pulls its slices from the hub with an
    /// identity of the member's own namespace there (docs/federation.md).
    #[arg(long, value_enum, default_value = "push")]
    pub mode: crate::agent::AgentMode,
    /// Write this member policy into the member (what pinfed may run there, see
    /// `pinfed member-policy`); without it an existing policy is left as it is, and a
    /// member without one runs workloads only in namespaces pinfed created, at Pod
    /// Security baseline, no daemons.
    #[arg(long, value_name = "FILE", env = "PINFED_MEMBER_POLICY")]
    pub member_policy: Option<std::path::PathBuf>,
    /// Pull mode: the hub API server URL as the member's agent reaches it (default: from
    /// the hub context).
    #[arg(long)]
    pub hub_server: Option<String>,
    /// Pull mode: how long the agent's credential on the hub lasts from this join
    /// (seconds; default 90 days). Every token the agent renews is bound to it; when it
    /// ends the hub deletes it and the agent is refused until the member is joined again.
    #[arg(long, env = "PINFED_PULL_CREDENTIAL_SECS",
          default_value_t = crate::hub::join_pull::DEFAULT_CREDENTIAL_DAYS * 24 * 3600,
          value_parser = clap::value_parser!(u64).range(10..=10 * 365 * 24 * 3600))]
    pub credential_secs: u64,
    /// Pull mode: make a new credential although the current one lasts (every token of
    /// the old one is refused from then on: the agent reads the new kubeconfig this join
    /// leaves in the member).
    #[arg(long)]
    pub renew_credential: bool,
    #[command(flatten)]
    pub kube: KubeArgs,
}

fn parse_label(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("{s:?} is not KEY=VALUE"))
}

pub fn run(args: JoinArgs) -> anyhow::Result<()> {
    let name = args
        .name
        .clone()
        .unwrap_or_else(|| args.member_context.clone());
    anyhow::ensure!(
        is_dns_label(&name),
        "member name {name:?} is not a DNS label (lower-case a-z, 0-9, '-')"
    );
    if args.install_agent {
        check_image_reference(&args.agent_image)?;
    }
    let policy = args
        .member_policy
        .as_deref()
        .map(super::member::read_policy)
        .transpose()?;
    let mut args = args;
    if let Some(path) = &args.from_topology {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let topology = crate::topology::Topology::from_yaml(&path.display().to_string(), &text)?;
        let m = topology
            .member(&name)
            .with_context(|| format!("{} has no member {name:?}", path.display()))?;
        args.region = args.region.or(m.region.clone());
        args.zone = args.zone.or(m.zone.clone());
        args.weight = args.weight.or(i32::try_from(m.weight).ok());
        if m.mode == crate::api::federation::ClusterMode::Pull {
            args.mode = crate::agent::AgentMode::Pull;
        }
        let mut labels: Vec<(String, String)> = m.labels.clone().into_iter().collect();
        labels.extend(args.labels.clone());
        args.labels = labels;
    }
    tokio::runtime::Runtime::new()?.block_on(async {
        let hub_ctx = args.hub_context.clone().or(args.kube.context.clone());
        let hub = args.kube.client_for(hub_ctx.as_deref()).await.context("connecting to the hub")?;
        let member = args.kube.client_for(Some(&args.member_context)).await.context("connecting to the member")?;
        let pull = args.mode == crate::agent::AgentMode::Pull;
        let (server, ca_pem) = if pull {
            (String::new(), Vec::new())
        } else {
            args.kube.server_and_ca(&args.member_context).await?
        };
        let req = JoinRequest {
            name: name.clone(),
            region: args.region.clone(),
            zone: args.zone.clone(),
            labels: args.labels.iter().cloned().collect::<BTreeMap<_, _>>(),
            weight: args.weight,
            server: args.server.clone().unwrap_or(server),
            ca_pem,
            schemas: args.member_schemas,
        };
        // Checked before anything is written, so a refusal leaves nothing half-installed.
        let existing = if args.install_agent {
            let existing = installed_agent(&member).await?;
            check_agent_replacement(existing.as_ref(), &name, &args.agent_image, args.replace_agent)
                .with_context(|| format!("installing the agent in {name}"))?;
            existing
        } else {
            None
        };
        if let Some((text, policy)) = &policy {
            super::member::set_policy(&member, text).await.context("writing the member policy")?;
            eprintln!("member policy of {name}:");
            eprint!("{}", super::member::describe(policy));
        }
        if pull {
            let hub_ctx = hub_ctx.clone().or_else(|| {
                kube::config::Kubeconfig::read().ok().and_then(|k| k.current_context)
            });
            let hub_ctx = hub_ctx.context("no hub context: pass --hub-context")?;
            let (hub_server, hub_ca) = args.kube.server_and_ca(&hub_ctx).await?;
            let endpoint = crate::hub::join_pull::HubEndpoint {
                server: args.hub_server.clone().unwrap_or(hub_server),
                ca_pem: hub_ca,
            };
            eprintln!("joining {name} to the hub in pull mode: its agent connects to {}", endpoint.server);
            let terms = crate::hub::join_pull::CredentialTerms {
                lifetime: std::time::Duration::from_secs(args.credential_secs),
                renew: args.renew_credential,
            };
            crate::hub::join_pull::join_pull(&hub, &member, &req, &endpoint, &terms).await?;
        } else {
            eprintln!("joining {name} ({}) to the hub", req.server);
            join(&hub, &member, &req).await?;
        }
        if args.install_agent {
            let applied = crate::hub::join::install_agent(&member, &name, &args.agent_image, pull).await?;
            let verb = match &existing {
                Some(e) if e.image != args.agent_image => format!("upgraded from {}", e.image),
                Some(_) => "updated".to_string(),
                None => "installed".to_string(),
            };
            eprintln!("agent {verb} in {name}: image {}, member name {name}", args.agent_image);
            for line in applied {
                eprintln!("  {line}");
            }
        }
        if pull {
            eprintln!(
                "joined: MemberCluster {name} (Pull) created; the hub holds no credential for it. Its agent \
                 (run with --mode pull) connects to the hub as {ns}/pinfed-agent with the kubeconfig in the \
                 member's Secret pinfed-system/pinfed-hub-kubeconfig",
                ns = crate::api::member_slice::pull_namespace(&name)
            );
        } else {
            eprintln!("joined: MemberCluster {name} created; the hub connects with ServiceAccount pinfed-system/pinfed-hub");
        }
        Ok(())
    })
}
