//! PinterestService → ConfigMap (if `config`), Deployment, Service (if it has ports),
//! Ingress (if `ingress`), PodDisruptionBudget (where it protects something: `budget`).

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, ContainerPort, PodTemplateSpec, Service, ServicePort,
    ServiceSpec, Volume, VolumeMount,
};
use k8s_openapi::api::networking::v1::{
    HTTPIngressPath, HTTPIngressRuleValue, Ingress, IngressBackend, IngressRule,
    IngressServiceBackend, IngressSpec, ServiceBackendPort,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::names::{self, MAX_NAME};
use super::{BuildError, Ctx, Out, runtime};
use crate::api::common::ANNOTATION_CONFIG_HASH;
use crate::api::service::PinterestService;

/// Where `spec.config` is mounted in every application container.
pub const CONFIG_MOUNT_PATH: &str = "/etc/pinterest/config";
const CONFIG_VOLUME: &str = "pinterest-app-config";

pub(crate) fn expand(ctx: &Ctx<'_>, s: &PinterestService, out: &mut Out) -> Result<(), BuildError> {
    let spec = &s.spec;
    let name = names::object_name(ctx.name);
    let svc_name = names::child_name(ctx.name, "", MAX_NAME, true);
    let ports = service_ports(s);

    let mut pod = ctx.pod_template(&spec.template, &[], None);
    if !spec.config.is_empty() {
        let cm_name = names::child_name(ctx.name, "config", MAX_NAME, false);
        let p = pod.spec.get_or_insert_with(Default::default);
        p.volumes.get_or_insert_with(Default::default).push(Volume {
            name: CONFIG_VOLUME.to_string(),
            config_map: Some(ConfigMapVolumeSource {
                name: cm_name.clone(),
                ..Default::default()
            }),
            ..Default::default()
        });
        for c in &mut p.containers {
            c.volume_mounts
                .get_or_insert_with(Default::default)
                .push(VolumeMount {
                    name: CONFIG_VOLUME.to_string(),
                    mount_path: CONFIG_MOUNT_PATH.to_string(),
                    read_only: Some(true),
                    ..Default::default()
                });
        }
        // A config change must roll the pods, which only a template change does.
        let hash = names::short_hash(&serde_json::to_string(&spec.config).unwrap_or_default());
        pod.metadata
            .get_or_insert_with(Default::default)
            .annotations
            .get_or_insert_with(Default::default)
            .insert(ANNOTATION_CONFIG_HASH.to_string(), hash);
        out.push(ConfigMap {
            metadata: ctx.meta(cm_name, &[]),
            data: Some(spec.config.clone()),
            ..Default::default()
        });
    }
    runtime::inject(
        ctx,
        &mut pod,
        "spec.template",
        ports.first().map(|p| p.port),
    )?;

    out.push(Deployment {
        metadata: ctx.meta(name.clone(), &[]),
        spec: Some(DeploymentSpec {
            replicas: Some(spec.replicas),
            selector: ctx.label_selector(),
            template: pod,
            ..Default::default()
        }),
        ..Default::default()
    });

    if !ports.is_empty() {
        out.push(Service {
            metadata: ctx.meta(svc_name.clone(), &[]),
            spec: Some(ServiceSpec {
                selector: Some(ctx.selector.clone()),
                ports: Some(ports.clone()),
                type_: Some("ClusterIP".to_string()),
                ..Default::default()
            }),
            ..Default::default()
        });
    }

    if let (Some(ing), Some(first)) = (&spec.ingress, ports.first()) {
        out.push(ingress(ctx, ing, first, &name, &svc_name));
    }

    let disruption = spec.disruption.as_ref();
    super::budget::add(out, ctx, name, disruption, spec.replicas, &spec.overrides);
    Ok(())
}

/// The Ingress of a service with `spec.ingress`, to its first port.
fn ingress(
    ctx: &Ctx<'_>,
    ing: &crate::api::service::IngressRoute,
    first: &ServicePort,
    name: &str,
    svc_name: &str,
) -> Ingress {
    let host = ing.host.clone().unwrap_or_else(|| default_host(ctx));
    let port = match &first.name {
        Some(n) => ServiceBackendPort {
            name: Some(n.clone()),
            number: None,
        },
        None => ServiceBackendPort {
            name: None,
            number: Some(first.port),
        },
    };
    Ingress {
        metadata: ctx.meta(name.to_string(), &[]),
        spec: Some(IngressSpec {
            rules: Some(vec![IngressRule {
                host: Some(host),
                http: Some(HTTPIngressRuleValue {
                    paths: vec![HTTPIngressPath {
                        path: Some(ing.path.clone().unwrap_or_else(|| "/".to_string())),
                        path_type: "Prefix".to_string(),
                        backend: IngressBackend {
                            service: Some(IngressServiceBackend {
                                name: svc_name.to_string(),
                                port: Some(port),
                            }),
                            resource: None,
                        },
                    }],
                }),
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// `<name>.<namespace>.<cluster>.pinterest.internal`, leaving out what is unknown.
fn default_host(ctx: &Ctx<'_>) -> String {
    let mut parts = vec![names::object_name(ctx.name)];
    if let Some(ns) = ctx.namespace {
        parts.push(ns.to_string());
    }
    if let Some(c) = ctx.cluster {
        parts.push(names::object_name(c));
    }
    parts.push("pinterest.internal".to_string());
    parts.join(".")
}

/// The Service's ports: `spec.service.ports`, or else every declared container port
/// (the first declaration of a port number wins).
pub(crate) fn service_ports(s: &PinterestService) -> Vec<ServicePort> {
    if let Some(svc) = s.spec.service.as_ref().filter(|x| !x.ports.is_empty()) {
        return svc
            .ports
            .iter()
            .map(|p| ServicePort {
                name: p.name.clone(),
                port: p.port,
                target_port: Some(p.target_port.clone().unwrap_or(IntOrString::Int(p.port))),
                protocol: Some(p.protocol.clone().unwrap_or_else(|| "TCP".to_string())),
                ..Default::default()
            })
            .collect();
    }
    let mut names = BTreeSet::new();
    let ports = declared_ports(&s.spec.template, |p, protocol| {
        let fallback = format!("{}-{}", protocol.to_lowercase(), p.container_port);
        let name = match &p.name {
            Some(n) if !names.contains(n) => n.clone(),
            _ => fallback,
        };
        names.insert(name.clone());
        name
    });
    // In declaration order: the first declared port is the primary one (Ingress backend,
    // traffic registration).
    ports
}

/// A Service port for each port number and protocol the template's containers declare,
/// the first declaration winning, in declaration order; `name` names each from its
/// declaration and protocol (TCP unless declared).
pub(super) fn declared_ports(
    template: &PodTemplateSpec,
    mut name: impl FnMut(&ContainerPort, &str) -> String,
) -> Vec<ServicePort> {
    let mut ports: Vec<ServicePort> = Vec::new();
    for c in template.spec.iter().flat_map(|p| &p.containers) {
        for p in c.ports.iter().flatten() {
            let protocol = p.protocol.clone().unwrap_or_else(|| "TCP".to_string());
            if ports
                .iter()
                .any(|x| x.port == p.container_port && x.protocol.as_ref() == Some(&protocol))
            {
                continue;
            }
            ports.push(ServicePort {
                name: Some(name(p, &protocol)),
                port: p.container_port,
                target_port: Some(IntOrString::Int(p.container_port)),
                protocol: Some(protocol),
                ..Default::default()
            });
        }
    }
    ports
}
