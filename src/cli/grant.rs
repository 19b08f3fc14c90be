//! `pinfed grant-secrets`: lets the hub read named Secrets of a namespace on the hub
//! cluster, so workloads there may reference them and get them propagated
//! (`hub::secret_grant`). Run with the team's own credential.

use anyhow::Context;
use clap::Args;
use kube::api::{Api, DeleteParams, DynamicObject};
use kube::core::ApiResource;

use crate::controller::apply::apply_json;
use crate::controller::kube_args::KubeArgs;
use crate::hub::secret_grant::{
    FIELD_MANAGER, SECRET_GRANT_ROLE, grant_objects, granted_names, names_after,
};

#[derive(Debug, Args)]
pub struct GrantArgs {
    /// The namespace on the hub cluster the Secrets are in.
    #[arg(long, short = 'n')]
    pub namespace: String,
    /// Secrets the hub may read (and propagate to the members that run a workload
    /// referencing them).
    #[arg(required = true)]
    pub names: Vec<String>,
    /// Take the grant back for these names instead.
    #[arg(long)]
    pub revoke: bool,
    /// Pull members these Secrets may also go to (comma-separated, `*` for all): a pull
    /// member's copy is readable on the hub with its agent's token, so none gets one
    /// unless named. Written on the Secrets (annotation federation.pinterest.com/members).
    #[arg(long, value_name = "MEMBERS", conflicts_with = "revoke")]
    pub members: Option<String>,
    #[command(flatten)]
    pub kube: KubeArgs,
}

fn role_resource() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::rbac::v1::Role>(&())
}

pub fn run(args: GrantArgs) -> anyhow::Result<()> {
    tokio::runtime::Runtime::new()?.block_on(async {
        let hub = args.kube.client().await.context("connecting to the hub")?;
        let roles: Api<DynamicObject> =
            Api::namespaced_with(hub.clone(), &args.namespace, &role_resource());
        let current = roles
            .get_opt(SECRET_GRANT_ROLE)
            .await
            .with_context(|| format!("reading Role {}/{SECRET_GRANT_ROLE}", args.namespace))?
            .map(|r| granted_names(&serde_json::to_value(r).unwrap_or_default()))
            .unwrap_or_default();
        let names = names_after(&current, &args.names, args.revoke);
        if names.is_empty() {
            let bindings: Api<DynamicObject> = Api::namespaced_with(
                hub.clone(),
                &args.namespace,
                &ApiResource::erase::<k8s_openapi::api::rbac::v1::RoleBinding>(&()),
            );
            for api in [&bindings, &roles] {
                match api
                    .delete(SECRET_GRANT_ROLE, &DeleteParams::default())
                    .await
                {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(e) => return Err(e).context("removing the grant"),
                }
            }
            println!("the hub may read no Secret of {}", args.namespace);
            return Ok(());
        }
        for obj in grant_objects(&args.namespace, &names) {
            apply_json(&hub, &obj, FIELD_MANAGER)
                .await
                .with_context(|| {
                    format!(
                        "writing {} {}/{SECRET_GRANT_ROLE} (you need `get` on these Secrets \
                     yourself, and rights to write Roles in the namespace)",
                        obj["kind"].as_str().unwrap_or_default(),
                        args.namespace
                    )
                })?;
        }
        if let Some(members) = &args.members {
            let secrets: Api<k8s_openapi::api::core::v1::Secret> =
                Api::namespaced(hub.clone(), &args.namespace);
            let patch = serde_json::json!({"metadata": {"annotations": {
                crate::hub::secret_grant::MEMBERS_ANNOTATION: members}}});
            for name in &args.names {
                secrets
                    .patch(
                        name,
                        &kube::api::PatchParams::apply(FIELD_MANAGER),
                        &kube::api::Patch::Merge(&patch),
                    )
                    .await
                    .with_context(|| {
                        format!(
                            "naming the pull members on Secret {}/{name}",
                            args.namespace
                        )
                    })?;
            }
            println!("pull members they may go to: {members}");
        }
        println!(
            "the hub may read these Secrets of {}: {}",
            args.namespace,
            names.into_iter().collect::<Vec<_>>().join(", ")
        );
        Ok(())
    })
}
