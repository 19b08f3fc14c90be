//! Command-line interface: clap definitions and dispatch. Each subcommand lives in its
//! own module; `main.rs` only parses and calls [`run`].

use clap::{Parser, Subcommand};

mod artifact;
pub mod client;
mod crds;
mod expand;
mod grant;
mod join;
mod member;
mod overview;
mod plan;
mod rebalance;
mod rollout;
mod table;
mod topology;
mod unjoin;

#[derive(Debug, Parser)]
#[command(
    name = "pinfed",
    version,
    about = "Multi-cluster federation for Pinterest-style Kubernetes workloads"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print every CRD as YAML (with --write DIR: one file per CRD, as in crds/).
    Crds(crds::CrdsArgs),
    /// Offline: print the native objects a member cluster runs for a Pinterest resource
    /// (multi-document YAML on stdout).
    Expand(expand::ExpandArgs),
    /// Validate a topology file (clusters/*.yaml) and summarize its clusters and capacity.
    Topology(topology::TopologyArgs),
    /// Register a member cluster with the hub (ServiceAccount, RBAC and CRDs in the member;
    /// kubeconfig Secret and MemberCluster on the hub).
    Join(join::JoinArgs),
    /// A member's policy: which namespaces pinfed may act in there, at which Pod Security
    /// level (check a file, set it in a member, show it). Run with the member's admin
    /// credential.
    MemberPolicy(member::MemberPolicyArgs),
    /// Hand an existing object in a member to a workload (KIND/NAME -n NS --to
    /// PinterestService/NAME): the agent takes over nothing else. Run as the member's admin.
    Adopt(member::AdoptArgs),
    /// Remove a member: move its workloads off first (or, with --force, detach a member
    /// that is gone for good).
    Unjoin(unjoin::UnjoinArgs),
    /// Run the federation hub controller.
    Hub(crate::hub::HubArgs),
    /// Let the hub read named Secrets of a namespace (to propagate them to the members
    /// that run workloads referencing them); --revoke takes it back.
    GrantSecrets(grant::GrantArgs),
    /// Offline: the placement decision for one workload on a topology (JSON on stdout).
    Plan(plan::PlanArgs),
    /// Members and workloads as the hub sees them: health, room, splits, status.
    Overview(overview::OverviewArgs),
    /// Run the member-cluster agent (expands and reconciles Pinterest workloads).
    Agent(crate::agent::AgentArgs),
    /// Run the Job Submission Service: the authenticated, quota-checking gateway to the hub.
    Jss(crate::jss::JssArgs),
    /// Publish, list or verify reviewed workload artifacts in a JSS artifact store.
    Artifact(artifact::ArtifactArgs),
    /// Submit a reviewed artifact (NAME --version V) or a file (-f) through the JSS.
    Submit(client::SubmitArgs),
    /// List workloads through the JSS, with the per-cluster breakdown.
    Get(client::GetArgs),
    /// One workload in detail: placement, per-cluster status, conditions, submitter.
    Describe(client::ObjectArgs),
    /// Delete a workload through the JSS (its slices are removed from every member).
    Delete(client::ObjectArgs),
    /// A workload's staged rollout through the JSS: status, history, approve, pause,
    /// resume, undo.
    Rollout(rollout::RolloutArgs),
    /// Place a workload (or --all of a namespace) again from scratch through the JSS:
    /// after a weight change, or room freed, which move nothing on their own.
    /// --dry-run shows the moves.
    Rebalance(rebalance::RebalanceArgs),
    /// Member clusters: health and capacity.
    Clusters(client::ListArgs),
    /// FederatedQuotas of your namespaces: hard, used (placed) and requested, per cluster.
    Quota(client::ListArgs),
    /// The hub's queue: the waiting workloads you may see, first in line first, with their
    /// priority, class, how long they wait and what for.
    Queue(client::QueueArgs),
    /// The governance report: what each team runs where, with requested cpu, memory, GPUs
    /// and when it expires (`--expired`: only what is past its expiry).
    Owners(client::OwnersArgs),
}

pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Crds(args) => crds::run(args),
        Command::Expand(args) => expand::run(args),
        Command::Topology(args) => topology::run(args),
        Command::Join(args) => join::run(args),
        Command::Unjoin(args) => unjoin::run(args),
        Command::MemberPolicy(args) => member::run_policy(args),
        Command::Adopt(args) => member::run_adopt(args),
        Command::Hub(args) => crate::hub::run(args),
        Command::GrantSecrets(args) => grant::run(args),
        Command::Agent(args) => crate::agent::run(args),
        Command::Overview(args) => overview::run(args),
        Command::Plan(args) => plan::run(args),
        Command::Jss(args) => crate::jss::run(args),
        Command::Artifact(args) => artifact::run(args),
        Command::Submit(args) => client::submit(args),
        Command::Get(args) => client::get(args),
        Command::Describe(args) => client::describe(args),
        Command::Delete(args) => client::delete(args),
        Command::Rollout(args) => rollout::run(args),
        Command::Rebalance(args) => rebalance::run(args),
        Command::Clusters(args) => client::clusters(args),
        Command::Quota(args) => client::quota(args),
        Command::Queue(args) => client::queue(args),
        Command::Owners(args) => client::owners(args),
    }
}
