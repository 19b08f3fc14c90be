//! The local topology is a real substrate: scheduling, controllers, node capacity, taints
//! and namespace finalization behave as in a real cluster.

mod support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use pinfed::api::quantity::Milli;
use pinfed::topology::{GPU_RESOURCE, Topology};
use support::{Federation, TestNamespace, eventually};

const WAIT: Duration = Duration::from_secs(90);

fn pod_template(requests: serde_json::Value, extra: serde_json::Value) -> serde_json::Value {
    let mut spec = serde_json::json!({
        "containers": [{"name": "app", "image": "registry.example/app:1", "resources": {"requests": requests}}]
    });
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    spec
}

#[tokio::test]
async fn deployment_of_three_replicas_becomes_available_on_kwok_nodes() {
    let fed = Federation::connect().await;
    let member = fed.member_names()[0].clone();
    let client = fed.client(&member);
    let ns = TestNamespace::create(&client, "smoke-deploy").await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let d: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": pod_template(serde_json::json!({"cpu": "100m"}), serde_json::json!({}))}
        }
    }))
    .unwrap();
    deployments
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
    eventually(WAIT, "3 available replicas", || {
        let deployments = deployments.clone();
        async move {
            let d = deployments.get("web").await.unwrap();
            d.status.and_then(|s| s.available_replicas) == Some(3)
        }
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let list = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 3);
    for p in &list.items {
        let node = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        assert!(
            node.starts_with(&format!("{member}-")),
            "pod scheduled onto {node:?}, not a {member} kwok node"
        );
        assert_eq!(
            p.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Running")
        );
    }
    ns.delete().await;
}

#[tokio::test]
async fn job_with_five_completions_and_parallelism_two_succeeds() {
    let fed = Federation::connect().await;
    let client = fed.client(&fed.member_names()[1]);
    let ns = TestNamespace::create(&client, "smoke-job").await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns.name);
    let job: Job = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "batch"},
        "spec": {
            "completions": 5,
            "parallelism": 2,
            "template": {"spec": pod_template(serde_json::json!({"cpu": "100m"}), serde_json::json!({"restartPolicy": "Never"}))}
        }
    }))
    .unwrap();
    jobs.create(&PostParams::default(), &job).await.unwrap();
    eventually(WAIT, "the Job to complete with 5 succeeded pods", || {
        let jobs = jobs.clone();
        async move {
            let j = jobs.get("batch").await.unwrap();
            let s = j.status.unwrap_or_default();
            let complete = s
                .conditions
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Complete" && c.status == "True");
            complete && s.succeeded == Some(5)
        }
    })
    .await;
    ns.delete().await;
}

#[tokio::test]
async fn node_capacity_labels_and_taints_are_what_the_topology_says() {
    let fed = Federation::connect().await;
    for member in &fed.topology.members {
        let api: Api<Node> = Api::all(fed.client(&member.name));
        let nodes = api.list(&ListParams::default()).await.unwrap().items;
        let expected = Topology::nodes(member);
        assert_eq!(nodes.len(), expected.len(), "node count of {}", member.name);
        for want in expected {
            let got = nodes
                .iter()
                .find(|n| n.metadata.name.as_deref() == Some(&want.name))
                .unwrap_or_else(|| panic!("node {} missing in {}", want.name, member.name));
            let status = got.status.clone().unwrap();
            let alloc = status.allocatable.unwrap();
            let q = |k: &str| {
                Milli::parse(&alloc.get(k).map(|q| q.0.clone()).unwrap_or_default())
                    .unwrap_or_default()
            };
            assert_eq!(q("cpu"), want.cpu, "{} cpu", want.name);
            assert_eq!(q("memory"), want.memory, "{} memory", want.name);
            assert_eq!(
                q("pods"),
                Milli::from_units(want.pods.into()),
                "{} pods",
                want.name
            );
            assert_eq!(
                q(GPU_RESOURCE),
                Milli::from_units(want.gpu.into()),
                "{} gpus",
                want.name
            );
            let labels = got.metadata.labels.clone().unwrap_or_default();
            for (k, v) in &want.labels {
                assert_eq!(labels.get(k), Some(v), "label {k} of {}", want.name);
            }
            let taints = got
                .spec
                .as_ref()
                .and_then(|s| s.taints.clone())
                .unwrap_or_default();
            let got_taints: Vec<_> = taints
                .iter()
                .map(|t| (t.key.clone(), t.effect.clone()))
                .collect();
            let want_taints: Vec<_> = want
                .taints
                .iter()
                .map(|t| (t.key.clone(), t.effect.clone()))
                .collect();
            assert_eq!(got_taints, want_taints, "taints of {}", want.name);
            let ready = status
                .conditions
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            assert!(ready, "{} is not Ready", want.name);
        }
    }
}

async fn wait_unschedulable(pods: &Api<Pod>, name: &str) {
    let pods = pods.clone();
    let name = name.to_string();
    eventually(
        WAIT,
        &format!("pod {name} to be reported Unschedulable"),
        || {
            let (pods, name) = (pods.clone(), name.clone());
            async move {
                let p = pods.get(&name).await.unwrap();
                let s = p.status.unwrap_or_default();
                s.phase.as_deref() == Some("Pending")
                    && s.conditions.unwrap_or_default().iter().any(|c| {
                        c.type_ == "PodScheduled"
                            && c.status == "False"
                            && c.reason.as_deref() == Some("Unschedulable")
                    })
            }
        },
    )
    .await;
    let p = pods.get(&name).await.unwrap();
    assert!(
        p.spec.unwrap().node_name.is_none(),
        "pod {name} must not be bound to a node"
    );
}

#[tokio::test]
async fn a_pod_larger_than_any_node_stays_pending() {
    let fed = Federation::connect().await;
    let client = fed.client(&fed.member_names()[0]);
    let ns = TestNamespace::create(&client, "smoke-big").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "huge"},
        "spec": pod_template(serde_json::json!({"cpu": "1000", "memory": "1Ti"}), serde_json::json!({}))
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    wait_unschedulable(&pods, "huge").await;
    ns.delete().await;
}

#[tokio::test]
async fn the_gpu_pool_taint_keeps_untolerating_pods_off() {
    let fed = Federation::connect().await;
    let member = fed.gpu_member();
    let client = fed.client(&member);
    let ns = TestNamespace::create(&client, "smoke-gpu").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let gpu_req = serde_json::json!({"cpu": "1", GPU_RESOURCE: "1"});
    let limits = serde_json::json!({GPU_RESOURCE: "1"});
    let mk = |name: &str, tolerate: bool| -> Pod {
        let mut spec = pod_template(gpu_req.clone(), serde_json::json!({}));
        spec["containers"][0]["resources"]["limits"] = limits.clone();
        if tolerate {
            spec["tolerations"] = serde_json::json!([{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]);
        }
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}, "spec": spec}))
            .unwrap()
    };
    pods.create(&PostParams::default(), &mk("untolerating", false))
        .await
        .unwrap();
    pods.create(&PostParams::default(), &mk("tolerating", true))
        .await
        .unwrap();
    wait_unschedulable(&pods, "untolerating").await;
    eventually(WAIT, "the tolerating GPU pod to run on a GPU node", || {
        let pods = pods.clone();
        async move {
            let p = pods.get("tolerating").await.unwrap();
            let node = p.spec.and_then(|s| s.node_name).unwrap_or_default();
            node.contains("-gpu-") && p.status.and_then(|s| s.phase).as_deref() == Some("Running")
        }
    })
    .await;
    // Plain pods that fit anywhere still never land on the tainted pool.
    for i in 0..6 {
        let mut p = mk(&format!("plain-{i}"), false);
        p.spec.as_mut().unwrap().containers[0].resources = None;
        pods.create(&PostParams::default(), &p).await.unwrap();
    }
    eventually(WAIT, "the plain pods to be scheduled", || {
        let pods = pods.clone();
        async move {
            let list = pods.list(&ListParams::default()).await.unwrap().items;
            list.iter()
                .filter(|p| {
                    p.metadata
                        .name
                        .as_deref()
                        .unwrap_or("")
                        .starts_with("plain-")
                })
                .all(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
        }
    })
    .await;
    for p in pods.list(&ListParams::default()).await.unwrap().items {
        let name = p.metadata.name.unwrap_or_default();
        if name.starts_with("plain-") {
            let node = p.spec.and_then(|s| s.node_name).unwrap_or_default();
            assert!(
                !node.contains("-gpu-"),
                "{name} landed on tainted node {node}"
            );
        }
    }
    ns.delete().await;
}

#[tokio::test]
async fn deleted_namespaces_finish_terminating_on_hub_and_member() {
    let fed = Federation::connect().await;
    for cluster in [fed.topology.hub.name.clone(), fed.member_names()[0].clone()] {
        let client = fed.client(&cluster);
        let ns = TestNamespace::create(&client, "smoke-nsdel").await;
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
        let cm: ConfigMap = serde_json::from_value(
            serde_json::json!({"metadata": {"name": "c"}, "data": {"k": "v"}}),
        )
        .unwrap();
        cms.create(&PostParams::default(), &cm).await.unwrap();
        let namespaces: Api<Namespace> = Api::all(client.clone());
        namespaces
            .delete(&ns.name, &DeleteParams::default())
            .await
            .unwrap();
        let name = ns.name.clone();
        eventually(
            WAIT,
            &format!("namespace {name} in {cluster} to be gone"),
            || {
                let (namespaces, name) = (namespaces.clone(), name.clone());
                async move { namespaces.get_opt(&name).await.unwrap().is_none() }
            },
        )
        .await;
    }
}
