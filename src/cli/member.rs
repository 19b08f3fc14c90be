//! The member admin's commands: `pinfed member-policy` (what pinfed may run in a member,
//! `api::member_policy`) and `pinfed adopt` (hand an existing object to a workload). Run
//! with the member's own admin credential: the hub's credential can do neither.

use anyhow::Context;
use clap::{Args, Subcommand};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;

use crate::api::member_policy::{
    ADOPT_ANNOTATION, MemberPolicy, POLICY_CONFIG_MAP, POLICY_KEY, POLICY_NAMESPACE,
};
use crate::controller::kube_args::KubeArgs;

/// Field manager of the member admin's writes through pinfed.
const FIELD_MANAGER: &str = "pinfed-member-admin";

#[derive(Debug, Args)]
pub struct MemberPolicyArgs {
    #[command(subcommand)]
    pub action: PolicyAction,
}

#[derive(Debug, Subcommand)]
pub enum PolicyAction {
    /// Check a policy file offline and print what it allows.
    Check {
        #[arg(short = 'f', long = "file")]
        file: std::path::PathBuf,
    },
    /// Write a policy file into the member (ConfigMap pinfed-system/pinfed-member-policy);
    /// the agent applies it at once to every workload.
    Set {
        #[arg(short = 'f', long = "file")]
        file: std::path::PathBuf,
        #[command(flatten)]
        kube: KubeArgs,
    },
    /// Print the member's policy as the agent reads it.
    Show {
        #[command(flatten)]
        kube: KubeArgs,
    },
}

#[derive(Debug, Args)]
pub struct AdoptArgs {
    /// The existing object, KIND/NAME (e.g. Service/web, Deployment/web).
    pub object: String,
    #[arg(long, short = 'n')]
    pub namespace: String,
    /// The workload that takes it over, KIND/NAME (e.g. PinterestService/web).
    #[arg(long = "to")]
    pub workload: String,
    /// Withdraw the hand-over (before the agent took it over).
    #[arg(long)]
    pub undo: bool,
    #[command(flatten)]
    pub kube: KubeArgs,
}

/// Reads and checks a policy file; errors name the file and the field or line.
pub fn read_policy(path: &std::path::Path) -> anyhow::Result<(String, MemberPolicy)> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let policy = MemberPolicy::parse(&text).with_context(|| format!("{}", path.display()))?;
    Ok((text, policy))
}

/// What a policy allows, one line per rule.
pub fn describe(policy: &MemberPolicy) -> String {
    let line = |who: &str, level, daemons: bool, sas: &[String]| {
        format!(
            "{who}: Pod Security {level}, daemons {}, service accounts: default{}\n",
            if daemons { "allowed" } else { "refused" },
            sas.iter().map(|s| format!(", {s}")).collect::<String>()
        )
    };
    let mut out = String::new();
    for e in &policy.namespaces {
        out += &line(
            &format!("namespaces {}", e.names.join(", ")),
            e.level,
            e.daemons,
            &e.service_accounts,
        );
    }
    out += &line(
        "namespaces pinfed created",
        policy.created.level,
        policy.created.daemons,
        &policy.created.service_accounts,
    );
    out += "any other namespace: refused\n";
    out
}

/// Writes the policy into the member.
pub async fn set_policy(member: &kube::Client, text: &str) -> anyhow::Result<()> {
    crate::controller::apply::ensure_namespace(member, POLICY_NAMESPACE, FIELD_MANAGER).await?;
    let cm = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": POLICY_CONFIG_MAP, "namespace": POLICY_NAMESPACE},
        "data": {POLICY_KEY: text},
    });
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(member.clone(), POLICY_NAMESPACE)
        .patch(
            POLICY_CONFIG_MAP,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&cm),
        )
        .await
        .with_context(|| format!("writing {POLICY_NAMESPACE}/{POLICY_CONFIG_MAP}"))?;
    Ok(())
}

pub fn run_policy(args: MemberPolicyArgs) -> anyhow::Result<()> {
    match args.action {
        PolicyAction::Check { file } => {
            let (_, policy) = read_policy(&file)?;
            print!("{}", describe(&policy));
            Ok(())
        }
        PolicyAction::Set { file, kube } => {
            let (text, policy) = read_policy(&file)?;
            tokio::runtime::Runtime::new()?.block_on(async {
                let member = kube.client().await.context("connecting to the member")?;
                set_policy(&member, &text).await
            })?;
            eprintln!("member policy written:");
            eprint!("{}", describe(&policy));
            Ok(())
        }
        PolicyAction::Show { kube } => tokio::runtime::Runtime::new()?.block_on(async {
            let member = kube.client().await.context("connecting to the member")?;
            let cm =
                Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(member, POLICY_NAMESPACE)
                    .get_opt(POLICY_CONFIG_MAP)
                    .await?;
            let policy = match cm
                .and_then(|c| c.data)
                .and_then(|d| d.get(POLICY_KEY).cloned())
            {
                Some(text) => MemberPolicy::parse(&text)?,
                None => {
                    println!("(no {POLICY_NAMESPACE}/{POLICY_CONFIG_MAP}: the default policy)");
                    MemberPolicy::default()
                }
            };
            print!("{}", describe(&policy));
            Ok(())
        }),
    }
}

/// The API resource of a native kind the agent generates, by its kind name.
fn generated_kind(kind: &str) -> anyhow::Result<ApiResource> {
    let mut all = crate::expand::generated_api_resources();
    // Config copies of the hub's Secrets too.
    all.push(ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&()));
    all.iter()
        .find(|r| r.kind.eq_ignore_ascii_case(kind))
        .cloned()
        .with_context(|| {
            format!(
                "{kind:?} is not a kind pinfed generates ({})",
                all.iter()
                    .map(|r| r.kind.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
}

pub fn run_adopt(args: AdoptArgs) -> anyhow::Result<()> {
    let (kind, name) = args
        .object
        .split_once('/')
        .with_context(|| format!("{:?} is not KIND/NAME", args.object))?;
    let ar = generated_kind(kind)?;
    let (wkind, wname) = args
        .workload
        .split_once('/')
        .with_context(|| format!("--to {:?} is not KIND/NAME", args.workload))?;
    let wkind = crate::api::WorkloadKind::ALL
        .into_iter()
        .find(|k| k.as_str().eq_ignore_ascii_case(wkind))
        .with_context(|| format!("--to {wkind:?} is not a Pinterest kind"))?;
    let value = format!("{}/{wname}", wkind.as_str());
    tokio::runtime::Runtime::new()?.block_on(async {
        let member = args.kube.client().await.context("connecting to the member")?;
        let api: Api<DynamicObject> = Api::namespaced_with(member, &args.namespace, &ar);
        let patch = serde_json::json!({"metadata": {"annotations": {
            ADOPT_ANNOTATION: if args.undo { serde_json::Value::Null } else { value.clone().into() }
        }}});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(|| format!("annotating {}/{name} in {}", ar.kind, args.namespace))?;
        if args.undo {
            eprintln!("{}/{name} in {} is no longer handed over", ar.kind, args.namespace);
        } else {
            eprintln!(
                "{}/{name} in {} handed over to {value}: its agent takes it over at the next apply (Event Adopted)",
                ar.kind, args.namespace
            );
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_description_says_what_is_allowed_and_refused() {
        let p = MemberPolicy::parse(
            "namespaces: [{names: [infra], level: privileged, daemons: true, serviceAccounts: [shipper]}]",
        )
        .unwrap();
        let d = describe(&p);
        assert!(d.contains("namespaces infra: Pod Security privileged, daemons allowed, service accounts: default, shipper"), "{d}");
        assert!(
            d.contains("namespaces pinfed created: Pod Security baseline, daemons refused"),
            "{d}"
        );
        assert!(d.ends_with("any other namespace: refused\n"), "{d}");
    }

    #[test]
    fn only_generated_kinds_can_be_handed_over() {
        assert_eq!(generated_kind("service").unwrap().kind, "Service");
        assert_eq!(generated_kind("Secret").unwrap().kind, "Secret");
        let e = generated_kind("Pod").unwrap_err().to_string();
        assert!(e.contains("not a kind pinfed generates"), "{e}");
    }
}
