//! PinterestTrainingJob → a headless Service for addressing, then one single-pod Job per
//! replica in rank order (PyTorch: Master is rank 0, then Workers; TensorFlow: Chief, PS,
//! Worker, Evaluator). PyTorch pods get literal `MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE`
//! and `RANK`; TensorFlow pods their own `TF_CONFIG`. Pod hostnames plus the Service's
//! subdomain give every replica a stable DNS name `<job>-<role>-<i>.<service>`.
//!
//! TensorFlow's cluster spec names every replica, so it is written once, into a ConfigMap
//! `<job>-tf-cluster`; each pod's `TF_CONFIG` refers to it through a dependent environment
//! variable (`$(PINFED_TF_CLUSTER)`, expanded by the kubelet), so no pod grows with the
//! gang. A cluster spec larger than one environment variable may be (Linux: 128 KiB per
//! string of a process's environment) could never start, and is refused with its size.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapKeySelector, EnvVar, EnvVarSource, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::json;

use super::names::{self, MAX_NAME};
use super::runtime::{env_literal, force_env};
use super::{BuildError, Ctx, Out, runtime};
use crate::api::common::{LABEL_REPLICA_INDEX, LABEL_REPLICA_TYPE};
use crate::api::training::{Framework, PinterestTrainingJob};
use crate::api::validate::Invalid;

/// The environment variable carrying the cluster spec from the ConfigMap, and its key.
pub const TF_CLUSTER_ENV: &str = "PINFED_TF_CLUSTER";
pub const TF_CLUSTER_KEY: &str = "cluster";
/// Largest `TF_CONFIG` a process can be started with: Linux refuses an environment string
/// over 128 KiB (MAX_ARG_STRLEN); the task and the variable's name need the rest.
pub const MAX_TF_CLUSTER_BYTES: usize = 128 * 1024 - 512;

/// Kubeflow's names for the port replicas talk on; a container port with this name
/// overrides the framework default.
fn port_name(f: Framework) -> &'static str {
    match f {
        Framework::PyTorch => "pytorchjob-port",
        Framework::TensorFlow => "tfjob-port",
    }
}

/// Name (and pod hostname) of one replica: `<job>-<role>-<index>`.
pub fn replica_name(job: &str, role: &str, index: i32) -> String {
    names::child_name(
        job,
        &format!("{}-{index}", role.to_lowercase()),
        MAX_NAME,
        false,
    )
}

pub(crate) fn expand(
    ctx: &Ctx<'_>,
    t: &PinterestTrainingJob,
    out: &mut Out,
) -> Result<(), BuildError> {
    let spec = &t.spec;
    let fw = spec.framework;
    let svc = names::child_name(ctx.name, "", MAX_NAME, true);
    let port = spec
        .replica_specs
        .values()
        .flat_map(|r| r.template.spec.iter().flat_map(|p| &p.containers))
        .flat_map(|c| c.ports.iter().flatten())
        .find(|p| p.name.as_deref() == Some(port_name(fw)))
        .map(|p| p.container_port)
        .unwrap_or_else(|| fw.default_port());

    // Every replica in rank order: (role, index within role, hostname).
    let mut replicas = Vec::new();
    for role in fw.roles() {
        if let Some(r) = spec.replica_specs.get(*role) {
            for i in 0..r.replicas.max(0) {
                replicas.push((*role, i, replica_name(ctx.name, role, i)));
            }
        }
    }
    let world_size = replicas.len();
    let address = |host: &str| format!("{host}.{svc}");

    out.push(Service {
        metadata: ctx.meta(svc.clone(), &[]),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".to_string()),
            selector: Some(ctx.selector.clone()),
            ports: Some(vec![ServicePort {
                name: Some(port_name(fw).to_string()),
                port,
                target_port: Some(IntOrString::Int(port)),
                protocol: Some("TCP".to_string()),
                ..Default::default()
            }]),
            publish_not_ready_addresses: Some(true),
            ..Default::default()
        }),
        status: None,
    });

    // TensorFlow's cluster spec: every role but the evaluator, which is not part of it.
    let mut tf_cluster: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (role, _, host) in &replicas {
        if *role != "Evaluator" {
            tf_cluster
                .entry(role.to_lowercase())
                .or_default()
                .push(format!("{}:{port}", address(host)));
        }
    }
    let master = replicas
        .first()
        .map(|(_, _, h)| address(h))
        .unwrap_or_default();
    let tf_cluster_map = if fw == Framework::TensorFlow {
        let cluster = serde_json::to_string(&tf_cluster).unwrap_or_default();
        if cluster.len() > MAX_TF_CLUSTER_BYTES {
            return Err(BuildError::Spec(Invalid::one(
                "spec.replicaSpecs",
                format!(
                    "a TensorFlow cluster of {world_size} replicas needs a {}-byte cluster spec in \
                     TF_CONFIG; a process's environment variable holds at most {} bytes, so no \
                     replica could start (fewer replicas, or a shorter name)",
                    cluster.len(),
                    MAX_TF_CLUSTER_BYTES
                ),
            )));
        }
        let name = names::child_name(ctx.name, "tf-cluster", MAX_NAME, false);
        out.push(ConfigMap {
            metadata: ctx.meta(name.clone(), &[]),
            data: Some(BTreeMap::from([(TF_CLUSTER_KEY.to_string(), cluster)])),
            ..Default::default()
        });
        Some(name)
    } else {
        None
    };

    for (rank, (role, index, host)) in replicas.iter().enumerate() {
        let Some(rs) = spec.replica_specs.get(*role) else {
            continue;
        };
        let extra = [
            (LABEL_REPLICA_TYPE, role.to_lowercase()),
            (LABEL_REPLICA_INDEX, index.to_string()),
        ];
        let mut pod = ctx.pod_template(&rs.template, &extra, Some("Never"));
        let env = match fw {
            Framework::PyTorch => vec![
                env_literal("MASTER_ADDR", master.clone()),
                env_literal("MASTER_PORT", port.to_string()),
                env_literal("WORLD_SIZE", world_size.to_string()),
                env_literal("RANK", rank.to_string()),
            ],
            Framework::TensorFlow => {
                let task = json!({"type": role.to_lowercase(), "index": index});
                vec![
                    EnvVar {
                        name: TF_CLUSTER_ENV.to_string(),
                        value_from: Some(EnvVarSource {
                            config_map_key_ref: Some(ConfigMapKeySelector {
                                name: tf_cluster_map.clone().unwrap_or_default(),
                                key: TF_CLUSTER_KEY.to_string(),
                                optional: Some(false),
                            }),
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                    env_literal(
                        "TF_CONFIG",
                        format!(
                            "{{\"cluster\":$({TF_CLUSTER_ENV}),\"task\":{task},\"environment\":\"cloud\"}}"
                        ),
                    ),
                ]
            }
        };
        if let Some(p) = pod.spec.as_mut() {
            p.hostname = Some(host.clone());
            p.subdomain = Some(svc.clone());
            for c in p
                .init_containers
                .iter_mut()
                .flatten()
                .chain(p.containers.iter_mut())
            {
                force_env(c, &env);
            }
        }
        runtime::inject(
            ctx,
            &mut pod,
            &format!("spec.replicaSpecs.{role}.template"),
            None,
        )?;
        out.push(Job {
            metadata: ctx.meta(host.clone(), &extra),
            spec: Some(JobSpec {
                completions: Some(1),
                parallelism: Some(1),
                backoff_limit: Some(spec.backoff_limit.unwrap_or(0)),
                ttl_seconds_after_finished: spec.ttl_seconds_after_finished,
                template: pod,
                ..Default::default()
            }),
            status: None,
        });
    }
    Ok(())
}
