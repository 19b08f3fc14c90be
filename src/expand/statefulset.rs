//! PinterestStatefulSet → headless Service, StatefulSet (with PVC templates),
//! PodDisruptionBudget.

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Service, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::names::{self, MAX_NAME, MAX_STATEFULSET_NAME};
use super::{BuildError, Ctx, Out, runtime, service};
use crate::api::statefulset::PinterestStatefulSet;

pub(crate) fn expand(
    ctx: &Ctx<'_>,
    s: &PinterestStatefulSet,
    out: &mut Out,
) -> Result<(), BuildError> {
    let spec = &s.spec;
    let svc_name = names::child_name(ctx.name, "", MAX_NAME, true);
    let name = names::child_name(ctx.name, "", MAX_STATEFULSET_NAME, false);

    // Headless Service giving each pod a stable DNS name; ports are informational.
    let ports = service::declared_ports(&spec.template, |p, protocol| {
        format!("{}-{}", protocol.to_lowercase(), p.container_port)
    });
    out.push(Service {
        metadata: ctx.meta(svc_name.clone(), &[]),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".to_string()),
            selector: Some(ctx.selector.clone()),
            ports: if ports.is_empty() { None } else { Some(ports) },
            publish_not_ready_addresses: Some(true),
            ..Default::default()
        }),
        status: None,
    });

    let mut pod = ctx.pod_template(&spec.template, &[], None);
    runtime::inject(ctx, &mut pod, "spec.template", None)?;
    let claims: Vec<PersistentVolumeClaim> = spec
        .volume_claim_templates
        .iter()
        .map(|c| {
            let mut labels = c.metadata.labels.clone().unwrap_or_default();
            labels.extend(ctx.labels.clone());
            PersistentVolumeClaim {
                metadata: ObjectMeta {
                    name: c.metadata.name.clone(),
                    labels: Some(labels),
                    annotations: c.metadata.annotations.clone(),
                    ..Default::default()
                },
                spec: c.spec.clone(),
                status: None,
            }
        })
        .collect();
    out.push(StatefulSet {
        metadata: ctx.meta(name.clone(), &[]),
        spec: Some(StatefulSetSpec {
            replicas: Some(spec.replicas),
            selector: ctx.label_selector(),
            service_name: Some(svc_name),
            template: pod,
            volume_claim_templates: if claims.is_empty() {
                None
            } else {
                Some(claims)
            },
            ..Default::default()
        }),
        status: None,
    });

    let disruption = spec.disruption.as_ref();
    super::budget::add(out, ctx, name, disruption, spec.replicas, &spec.overrides);
    Ok(())
}
