//! PinterestJobSet → per shard: ConfigMaps from `configTemplates`, PVCs from
//! `volumeClaimTemplates`, and one Job (completions 1) whose pods see literal
//! `SHARD_INDEX` (global) and `SHARD_COUNT`.
//!
//! Which shards get objects: those in `spec.assignedShards` (absent = all), minus those in
//! `status.completedShards` (a completed shard never runs again), and — when the agent
//! enforces `parallelism` — only those [`admit_shards`] lets run now.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, PersistentVolumeClaim,
    PersistentVolumeClaimVolumeSource, PodTemplateSpec, Volume, VolumeMount,
};

use super::names::{self, MAX_NAME};
use super::runtime::{env_literal, force_env};
use super::{BuildError, Ctx, Out, runtime};
use crate::api::common::LABEL_SHARD;
use crate::api::jobset::PinterestJobSet;
use crate::api::ranges::RangeSet;
use crate::api::validate::{self, FieldError, Invalid};

/// Where a config template nobody references is mounted: `<this>/<template name>`.
pub const SHARD_CONFIG_MOUNT_DIR: &str = "/etc/pinterest/shard-config";

/// Shards this JobSet (or slice) should still run: assigned and not completed.
pub fn pending_shards(j: &PinterestJobSet) -> Result<RangeSet, Invalid> {
    let (assigned, completed) = validate::jobset_shards(j)?;
    Ok(assigned.difference(&completed))
}

/// Which pending shards may have a Job now, given `parallelism` (None = unlimited) and the
/// shards whose Jobs exist and have not succeeded (`running`; include failed ones to keep
/// their Jobs). Running shards keep their Jobs even above the limit (lowering parallelism
/// never kills work); free slots go to the lowest pending indices. Deterministic.
pub fn admit_shards(parallelism: Option<u32>, pending: &RangeSet, running: &RangeSet) -> RangeSet {
    let running = running.intersection(pending);
    let Some(p) = parallelism else {
        return pending.clone();
    };
    let free = u64::from(p).saturating_sub(running.len());
    running.union(&pending.difference(&running).take_lowest(free))
}

/// Name of shard `shard`'s Job.
pub fn job_name(jobset: &str, shard: u32) -> String {
    names::child_name(jobset, &shard.to_string(), MAX_NAME, false)
}

/// Name of shard `shard`'s ConfigMap rendered from config template `template`.
pub fn config_map_name(jobset: &str, shard: u32, template: &str) -> String {
    names::child_name(jobset, &format!("{shard}-{template}"), MAX_NAME, false)
}

/// Name of shard `shard`'s PVC from volume claim template `claim`.
pub fn claim_name(jobset: &str, claim: &str, shard: u32) -> String {
    names::child_name(
        &format!("{claim}-{jobset}"),
        &shard.to_string(),
        MAX_NAME,
        false,
    )
}

fn render(s: &str, shard: u32, count: u32) -> String {
    s.replace("{{shard}}", &shard.to_string())
        .replace("{{shardCount}}", &count.to_string())
}

pub(crate) fn expand(ctx: &Ctx<'_>, j: &PinterestJobSet, out: &mut Out) -> Result<(), BuildError> {
    let admitted = ctx.admitted_shards;
    let spec = &j.spec;
    let count = u32::try_from(spec.shards).unwrap_or(0);
    let pending = pending_shards(j).map_err(BuildError::Spec)?;
    let shards = match admitted {
        Some(a) => pending.intersection(a),
        None => pending,
    };
    check_claim_volumes(j).map_err(BuildError::Spec)?;
    for shard in shards.iter() {
        let shard_label = [(LABEL_SHARD, shard.to_string())];
        // Template name → this shard's ConfigMap name.
        let config_names: BTreeMap<&str, String> = spec
            .config_templates
            .iter()
            .map(|t| (t.name.as_str(), config_map_name(ctx.name, shard, &t.name)))
            .collect();
        for t in &spec.config_templates {
            out.push(ConfigMap {
                metadata: ctx.meta(config_names[t.name.as_str()].clone(), &shard_label),
                data: Some(
                    t.data
                        .iter()
                        .map(|(k, v)| (k.clone(), render(v, shard, count)))
                        .collect(),
                ),
                ..Default::default()
            });
        }
        let mut claims = Vec::new();
        for c in &spec.volume_claim_templates {
            let claim = c.metadata.name.clone().unwrap_or_default();
            let pvc_name = claim_name(ctx.name, &claim, shard);
            let mut meta = ctx.meta(pvc_name.clone(), &shard_label);
            // The template's own labels and annotations survive; ours win on a clash.
            if let Some(l) = &c.metadata.labels {
                let labels = meta.labels.get_or_insert_with(Default::default);
                for (k, v) in l {
                    labels.entry(k.clone()).or_insert_with(|| v.clone());
                }
            }
            if let Some(a) = &c.metadata.annotations {
                let ann = meta.annotations.get_or_insert_with(Default::default);
                for (k, v) in a {
                    ann.entry(k.clone()).or_insert_with(|| v.clone());
                }
            }
            out.push(PersistentVolumeClaim {
                metadata: meta,
                spec: c.spec.clone(),
                status: None,
            });
            claims.push((claim, pvc_name));
        }

        let mut pod = ctx.pod_template(&spec.template, &shard_label, Some("Never"));
        shard_pod(&mut pod, shard, count, &config_names, &claims);
        runtime::inject(ctx, &mut pod, "spec.template", None)?;
        out.push(Job {
            metadata: ctx.meta(job_name(ctx.name, shard), &shard_label),
            spec: Some(JobSpec {
                completions: Some(1),
                parallelism: Some(1),
                backoff_limit: spec.backoff_limit_per_shard,
                ttl_seconds_after_finished: spec.ttl_seconds_after_finished,
                template: pod,
                ..Default::default()
            }),
            status: None,
        });
    }
    Ok(())
}

/// A pod volume named like a claim template would shadow the shard's claim.
fn check_claim_volumes(j: &PinterestJobSet) -> Result<(), Invalid> {
    let mut errors = Vec::new();
    let volumes = j
        .spec
        .template
        .spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten());
    for (i, v) in volumes.enumerate() {
        if j.spec
            .volume_claim_templates
            .iter()
            .any(|c| c.metadata.name.as_deref() == Some(v.name.as_str()))
        {
            errors.push(FieldError {
                field: format!("spec.template.spec.volumes[{i}].name"),
                message: format!(
                    "{:?} is also a volumeClaimTemplate; mount the claim by name instead",
                    v.name
                ),
            });
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(Invalid { errors })
    }
}

/// Makes the user's pod template this shard's: literal shard env, config templates pointed
/// at the shard's ConfigMaps, claim templates at the shard's PVCs.
fn shard_pod(
    pod: &mut PodTemplateSpec,
    shard: u32,
    count: u32,
    config_names: &BTreeMap<&str, String>,
    claims: &[(String, String)],
) {
    let Some(spec) = pod.spec.as_mut() else {
        return;
    };
    let shard_env = [
        env_literal("SHARD_INDEX", shard.to_string()),
        env_literal("SHARD_COUNT", count.to_string()),
    ];
    let mut referenced = std::collections::BTreeSet::new();
    let mut point = |name: &mut String| {
        if let Some(n) = config_names.get(name.as_str()) {
            referenced.insert(name.clone());
            *name = n.clone();
        }
    };
    for v in spec.volumes.iter_mut().flatten() {
        if let Some(cm) = v.config_map.as_mut() {
            point(&mut cm.name);
        }
        for src in v
            .projected
            .iter_mut()
            .flat_map(|p| p.sources.iter_mut().flatten())
        {
            if let Some(cm) = src.config_map.as_mut() {
                point(&mut cm.name);
            }
        }
    }
    let containers = spec
        .init_containers
        .iter_mut()
        .flatten()
        .chain(spec.containers.iter_mut());
    let mut all: Vec<&mut Container> = containers.collect();
    for c in all.iter_mut() {
        for ef in c.env_from.iter_mut().flatten() {
            if let Some(r) = ef.config_map_ref.as_mut() {
                point(&mut r.name);
            }
        }
        for e in c.env.iter_mut().flatten() {
            if let Some(r) = e
                .value_from
                .as_mut()
                .and_then(|v| v.config_map_key_ref.as_mut())
            {
                point(&mut r.name);
            }
        }
        force_env(c, &shard_env);
    }
    // Unreferenced templates: mount them where the docs say.
    let mut extra_volumes = Vec::new();
    for (tmpl, cm) in config_names {
        if referenced.contains(*tmpl) {
            continue;
        }
        let vol = names::child_name("pinterest-shard", tmpl, MAX_NAME, false);
        for c in all.iter_mut() {
            c.volume_mounts
                .get_or_insert_with(Default::default)
                .push(VolumeMount {
                    name: vol.clone(),
                    mount_path: format!("{SHARD_CONFIG_MOUNT_DIR}/{tmpl}"),
                    read_only: Some(true),
                    ..Default::default()
                });
        }
        extra_volumes.push(Volume {
            name: vol,
            config_map: Some(ConfigMapVolumeSource {
                name: cm.clone(),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    for (claim, pvc) in claims {
        extra_volumes.push(Volume {
            name: claim.clone(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: pvc.clone(),
                read_only: None,
            }),
            ..Default::default()
        });
    }
    if !extra_volumes.is_empty() {
        spec.volumes
            .get_or_insert_with(Default::default)
            .extend(extra_volumes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(s: &str) -> RangeSet {
        RangeSet::parse(s).unwrap()
    }

    #[test]
    fn admission_is_lowest_index_first_and_keeps_running_shards() {
        let pending = set("0-9");
        assert_eq!(admit_shards(Some(3), &pending, &set("")).to_string(), "0-2");
        assert_eq!(
            admit_shards(Some(3), &pending, &set("5")).to_string(),
            "0-1,5"
        );
        // Lowering parallelism does not stop running shards.
        assert_eq!(
            admit_shards(Some(1), &pending, &set("4,7")).to_string(),
            "4,7"
        );
        // Running shards that are no longer pending (completed) free their slot.
        assert_eq!(
            admit_shards(Some(2), &set("3-9"), &set("1,3")).to_string(),
            "3-4"
        );
        assert_eq!(admit_shards(None, &pending, &set("")).to_string(), "0-9");
        assert_eq!(admit_shards(Some(5), &set(""), &set("")).to_string(), "");
    }
}
