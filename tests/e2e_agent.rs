//! The agent against a real member: expansion applied with server-side apply, drift
//! repaired, unwanted objects pruned, status and Events written, invalid resources
//! reported without a hot loop, job-set completions recorded exactly once.

mod support;

use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use pinfed::api::common::ConditionStatus;
use pinfed::api::jobset::PinterestJobSet;
use pinfed::api::service::PinterestService;
use support::{Daemon, Federation, TestNamespace, eventually, join_all, spawn_daemon};

const WAIT: Duration = Duration::from_secs(60);

/// `pinfed agent` of `member` as the kit starts one (push or pull as the topology says).
fn agent_args(fed: &Federation, member: &str) -> Vec<String> {
    fed.agent_args(member, &[]).expect("a free loopback port")
}

/// The agent's `/metrics` URL.
fn metrics_url(agent: &Daemon) -> String {
    let addr = agent
        .metrics_addr
        .as_deref()
        .expect("the agent serves metrics");
    format!("http://{addr}/metrics")
}

/// `<workload>-stray`: a ConfigMap with the workload's labels and controller owner
/// reference that no expansion of it makes — an object its prune must remove.
fn stray_config_map(
    kind: pinfed::api::workload::WorkloadKind,
    workload: &str,
    uid: &str,
) -> ConfigMap {
    let labels: std::collections::BTreeMap<String, String> =
        pinfed::expand::workload_selector(kind, workload)
            .split(',')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("{workload}-stray"), "labels": labels, "ownerReferences": [{
            "apiVersion": "compute.pinterest.com/v1alpha1", "kind": kind.as_str(),
            "name": workload, "uid": uid, "controller": true}]},
        "data": {"left": "behind"}
    }))
    .unwrap()
}

/// One agent for the first member, shared by the tests of this file.
fn shared_agent(fed: &Federation) -> &'static Daemon {
    static AGENT: OnceLock<Daemon> = OnceLock::new();
    AGENT.get_or_init(|| {
        join_all(fed); // installs the CRDs into every member
        spawn_daemon(fed, "agent", &agent_args(fed, &fed.member_names()[0]))
    })
}

fn service(name: &str, replicas: i32, ingress: bool) -> PinterestService {
    let mut v = serde_json::json!({
        "apiVersion": "compute.pinterest.com/v1alpha1",
        "kind": "PinterestService",
        "metadata": {"name": name},
        "spec": {
            "owner": {"team": "Ads Ranking", "contact": "ads@pinterest.com"},
            "replicas": replicas,
            "template": {"spec": {"containers": [{"name": "app", "image": "registry.example/app:1",
                "ports": [{"name": "http", "containerPort": 8080}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}},
            "service": {"ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
        }
    });
    if ingress {
        v["spec"]["ingress"] = serde_json::json!({"host": format!("{name}.example"), "path": "/"});
    }
    serde_json::from_value(v).unwrap()
}

async fn wait_service_ready(
    api: &Api<PinterestService>,
    name: &str,
    available: i32,
    daemon: &Daemon,
) {
    let (api, name2) = (api.clone(), name.to_string());
    eventually(
        WAIT,
        &format!(
            "{name} Ready with {available} available\n{}",
            daemon.log_tail()
        ),
        || {
            let (api, name) = (api.clone(), name2.clone());
            async move {
                let Some(s) = api.get(&name).await.ok().and_then(|s| s.status) else {
                    return false;
                };
                s.available_replicas == available
                    && s.conditions
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == ConditionStatus::True)
                    && s.observed_generation.is_some()
            }
        },
    )
    .await;
}

#[tokio::test]
async fn a_service_is_expanded_applied_and_reports_ready() {
    let fed = Federation::connect().await;
    let agent = shared_agent(&fed);
    let client = fed.client(&fed.member_names()[0]);
    let ns = TestNamespace::create(&client, "agent-svc").await;
    let api: Api<PinterestService> = Api::namespaced(client.clone(), &ns.name);
    api.create(&PostParams::default(), &service("web", 3, true))
        .await
        .unwrap();
    wait_service_ready(&api, "web", 3, agent).await;

    let svc = api.get("web").await.unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let d = deployments.get("web").await.unwrap();
    let labels = d.metadata.labels.clone().unwrap();
    assert_eq!(labels["app.kubernetes.io/managed-by"], "pinfed");
    assert_eq!(
        labels["pinterest.com/team"], "Ads-Ranking",
        "sanitized into a valid label value"
    );
    assert_eq!(
        d.metadata.annotations.clone().unwrap()["pinterest.com/contact"],
        "ads@pinterest.com"
    );
    let owner = &d.metadata.owner_references.clone().unwrap()[0];
    assert_eq!(Some(owner.uid.clone()), svc.metadata.uid);
    let managers: Vec<_> = d
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert!(
        managers.contains(&"pinfed-agent".to_string()),
        "{managers:?}"
    );
    let pod = d.spec.unwrap().template.spec.unwrap();
    assert!(
        pod.containers.len() > 1 || pod.init_containers.is_some_and(|i| !i.is_empty()),
        "runtime support injected"
    );

    // Drift: a deleted Deployment comes back; an edited replica count is restored.
    deployments
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    let deps = deployments.clone();
    eventually(WAIT, "the deleted Deployment to be recreated", || {
        let deps = deps.clone();
        async move {
            deps.get_opt("web")
                .await
                .unwrap()
                .is_some_and(|d| d.metadata.deletion_timestamp.is_none())
        }
    })
    .await;
    let scale = serde_json::json!({"spec": {"replicas": 7}});
    deployments
        .patch("web", &PatchParams::default(), &Patch::Merge(&scale))
        .await
        .unwrap();
    eventually(WAIT, "the edited replicas to be restored to 3", || {
        let deps = deps.clone();
        async move { deps.get("web").await.unwrap().spec.unwrap().replicas == Some(3) }
    })
    .await;

    // Drift no generation shows is repaired as soon as the owned-object watches see it,
    // not at the hourly refresh: a Service's port, an Ingress's host, a label pinfed set.
    let services: Api<Service> = Api::namespaced(client.clone(), &ns.name);
    let ingresses: Api<Ingress> = Api::namespaced(client.clone(), &ns.name);
    let edit_port =
        serde_json::json!([{"op": "replace", "path": "/spec/ports/0/port", "value": 9999}]);
    services
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Json::<()>(serde_json::from_value(edit_port).unwrap()),
        )
        .await
        .unwrap();
    let host = serde_json::json!([{"op": "replace", "path": "/spec/rules/0/host", "value": "evil.example"}]);
    ingresses
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Json::<()>(serde_json::from_value(host).unwrap()),
        )
        .await
        .unwrap();
    let label = serde_json::json!({"metadata": {"labels": {"pinterest.com/team": "someone-else"}}});
    deployments
        .patch("web", &PatchParams::default(), &Patch::Merge(&label))
        .await
        .unwrap();
    eventually(
        Duration::from_secs(30),
        &format!(
            "the edited port, host and label to be restored\n{}",
            agent.log_tail()
        ),
        || {
            let (services, ingresses, deps) = (services.clone(), ingresses.clone(), deps.clone());
            async move {
                let port = services
                    .get("web")
                    .await
                    .unwrap()
                    .spec
                    .unwrap()
                    .ports
                    .unwrap()[0]
                    .port;
                let host = ingresses
                    .get("web")
                    .await
                    .unwrap()
                    .spec
                    .unwrap()
                    .rules
                    .unwrap()[0]
                    .host
                    .clone();
                let team =
                    deps.get("web").await.unwrap().metadata.labels.unwrap()["pinterest.com/team"]
                        .clone();
                port == 80 && host.as_deref() == Some("web.example") && team == "Ads-Ranking"
            }
        },
    )
    .await;

    // Prune: dropping the ingress removes the Ingress.
    assert!(ingresses.get_opt("web").await.unwrap().is_some());
    let patch = serde_json::json!({"spec": {"ingress": null}});
    api.patch("web", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    eventually(WAIT, "the Ingress to be pruned", || {
        let ingresses = ingresses.clone();
        async move { ingresses.get_opt("web").await.unwrap().is_none() }
    })
    .await;

    // An object of the workload that its last prune did not keep (here made by hand, with
    // its labels and owner) is pruned as soon as the owned-object watch shows it — not at
    // the next periodic full prune, an hour away.
    let owner = api.get("web").await.unwrap();
    let stray = stray_config_map(
        pinfed::api::workload::WorkloadKind::Service,
        "web",
        &owner.metadata.uid.clone().unwrap(),
    );
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    configmaps
        .create(&PostParams::default(), &stray)
        .await
        .unwrap();
    eventually(
        Duration::from_secs(30),
        &format!("the stray ConfigMap to be pruned\n{}", agent.log_tail()),
        || {
            let configmaps = configmaps.clone();
            async move { configmaps.get_opt("web-stray").await.unwrap().is_none() }
        },
    )
    .await;

    // Metrics count reconciliations.
    let metrics = support::http_get(&metrics_url(agent)).await;
    assert!(
        metrics.contains("pinfed_agent_reconciles_total{kind=\"PinterestService\",outcome=\"ok\"}"),
        "{metrics}"
    );
    // ... and the drift they repaired, by the kind of object someone changed.
    for kind in ["Service", "Ingress", "Deployment"] {
        assert!(
            sample(&metrics, "pinfed_agent_drift_detected_total", kind).is_some_and(|n| n >= 1),
            "{kind} drift not counted: {metrics}"
        );
    }
    // ... and the in-progress statuses held back (the agent's default hold, 2 s): the
    // first status of a new slice says its pods are still coming up.
    assert!(
        sample(
            &metrics,
            "pinfed_agent_status_writes_held_total",
            "PinterestService"
        )
        .is_some_and(|n| n >= 1),
        "no status write held: {metrics}"
    );
    ns.delete().await;
}

/// A slice removed and made again (a failover, then a failback) finds its earlier
/// incarnation's objects until the member's garbage collector removes them: made by
/// pinfed for the same workload, owned by an earlier slice of its name. The agent waits
/// for them instead of reporting a conflict (an Invalid status the hub would act on) and
/// applies once they are gone. Here a finalizer holds the leftover Deployment after the
/// collector deleted it, so the wait is seen; removing the finalizer ends it.
#[tokio::test]
async fn objects_left_by_an_earlier_slice_of_the_same_name_are_waited_for_not_a_conflict() {
    let fed = Federation::connect().await;
    let agent = shared_agent(&fed);
    let client = fed.client(&fed.member_names()[0]);
    let ns = TestNamespace::create(&client, "agent-leftover").await;
    const HOLD: &str = "e2e.pinfed.dev/hold";
    let labels = serde_json::json!({"app.kubernetes.io/managed-by": "pinfed",
        "pinterest.com/kind": "PinterestService", "pinterest.com/workload": "web"});
    let leftover: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "labels": labels, "finalizers": [HOLD], "ownerReferences": [{
            "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestService",
            "name": "web", "uid": "0a6d1f3e-0000-4000-8000-00000000e5e1", "controller": true}]},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"left": "over"}},
            "template": {"metadata": {"labels": {"left": "over"}},
                "spec": {"containers": [{"name": "app", "image": "registry.example/old:1"}]}}}
    }))
    .unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    deployments
        .create(&PostParams::default(), &leftover)
        .await
        .unwrap();
    let api: Api<PinterestService> = Api::namespaced(client.clone(), &ns.name);
    let slice = api
        .create(&PostParams::default(), &service("web", 1, false))
        .await
        .unwrap();
    // The wait shows as one Normal Event on the slice (however often the agent looks
    // again) and in the agent's metrics.
    let waits = || async {
        support::events(&client, Some(&ns.name))
            .await
            .into_iter()
            .filter(|e| {
                e.reason == "WaitingForLeftovers" && e.name == "web" && e.uid == slice.metadata.uid
            })
            .map(|e| e.type_)
            .collect::<Vec<_>>()
    };
    eventually(
        WAIT,
        &format!(
            "a WaitingForLeftovers Event: the agent waiting for the earlier slice's objects\n{}",
            agent.log_tail()
        ),
        || async { !waits().await.is_empty() },
    )
    .await;
    let waited = support::http_get(&metrics_url(agent))
        .await
        .lines()
        .filter(|l| l.starts_with("pinfed_agent_leftover_waits_total{kind=\"PinterestService\"}"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum::<u64>();
    assert!(
        waited >= 1,
        "the wait counted in pinfed_agent_leftover_waits_total"
    );
    let invalid = |s: &Option<pinfed::api::service::PinterestServiceStatus>| {
        s.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Invalid" && c.status == ConditionStatus::True)
        })
    };
    assert!(
        !invalid(&api.get("web").await.unwrap().status),
        "waiting is not a conflict: {:?}",
        api.get("web").await.unwrap().status
    );
    // The member's garbage collector deletes the leftover (its owner is gone); the
    // finalizer let go, it is removed and the agent applies its own.
    eventually(WAIT, "the collector deleting the leftover", || async {
        deployments
            .get("web")
            .await
            .is_ok_and(|d| d.metadata.deletion_timestamp.is_some())
    })
    .await;
    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    wait_service_ready(&api, "web", 1, agent).await;
    let owners: Vec<String> = deployments
        .get("web")
        .await
        .unwrap()
        .metadata
        .owner_references
        .unwrap_or_default()
        .into_iter()
        .map(|o| o.uid)
        .collect();
    assert_eq!(owners, [slice.metadata.uid.clone().unwrap()]);
    assert!(!invalid(&api.get("web").await.unwrap().status));
    assert_eq!(waits().await, ["Normal"], "one Event for the whole wait");
    ns.delete().await;
}

#[tokio::test]
async fn an_invalid_resource_gets_an_invalid_condition_and_an_event_without_a_hot_loop() {
    let fed = Federation::connect().await;
    let agent = shared_agent(&fed);
    let client = fed.client(&fed.member_names()[0]);
    let ns = TestNamespace::create(&client, "agent-invalid").await;
    let api: Api<PinterestJobSet> = Api::namespaced(client.clone(), &ns.name);
    let js: PinterestJobSet = serde_json::from_value(serde_json::json!({
        "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestJobSet",
        "metadata": {"name": "bad"},
        "spec": {"owner": {"team": "ml", "contact": "ml@x"}, "shards": 4, "assignedShards": "2-9",
                 "template": {"spec": {"containers": [{"name": "w", "image": "w:1"}]}}}
    }))
    .unwrap();
    api.create(&PostParams::default(), &js).await.unwrap();
    eventually(
        WAIT,
        &format!("Invalid condition naming the field\n{}", agent.log_tail()),
        || {
            let api = api.clone();
            async move {
                api.get("bad")
                    .await
                    .ok()
                    .and_then(|j| j.status)
                    .is_some_and(|s| {
                        s.conditions.iter().any(|c| {
                            c.type_ == "Invalid"
                                && c.status == ConditionStatus::True
                                && c.message.contains("spec.assignedShards")
                        })
                    })
            }
        },
    )
    .await;
    eventually(WAIT, "a Warning Event for the invalid JobSet", || async {
        support::events(&client, Some(&ns.name))
            .await
            .iter()
            .any(|e| e.type_ == "Warning" && e.name == "bad")
    })
    .await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns.name);
    assert!(
        jobs.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty(),
        "no Jobs for an invalid JobSet"
    );
    // No hot loop: the error counter for this kind stays flat while nothing changes.
    let count = || async move {
        let m = support::http_get(&metrics_url(agent)).await;
        m.lines()
            .filter(|l| l.starts_with("pinfed_agent_reconciles_total{kind=\"PinterestJobSet\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum::<u64>()
    };
    let before = count().await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let after = count().await;
    assert!(
        after - before <= 1,
        "JobSet reconciles went from {before} to {after} in 4s: a hot loop"
    );
    ns.delete().await;
}

#[tokio::test]
async fn job_set_shards_complete_exactly_once_across_agent_restarts() {
    let fed = Federation::connect().await;
    shared_agent(&fed); // CRDs installed
    let member = fed.member_names()[1].clone();
    let client = fed.client(&member);
    let agent = spawn_daemon(&fed, "agent-jobset", &agent_args(&fed, &member));
    let ns = TestNamespace::create(&client, "agent-jobset").await;
    let api: Api<PinterestJobSet> = Api::namespaced(client.clone(), &ns.name);
    let js: PinterestJobSet = serde_json::from_value(serde_json::json!({
        "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestJobSet",
        "metadata": {"name": "emb"},
        "spec": {"owner": {"team": "ml", "contact": "ml@x"}, "shards": 6, "parallelism": 2,
                 "configTemplates": [{"name": "shard", "data": {"range.txt": "{{shard}} of {{shardCount}}"}}],
                 "template": {"spec": {"containers": [{"name": "w", "image": "w:1",
                     "resources": {"requests": {"cpu": "100m"}}}]}}}
    }))
    .unwrap();
    api.create(&PostParams::default(), &js).await.unwrap();
    // Watch Jobs while it runs: never more than `parallelism` unfinished at once, and each
    // shard's Job is created once.
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns.name);
    let mut seen_uids =
        std::collections::BTreeMap::<String, std::collections::BTreeSet<String>>::new();
    let start = std::time::Instant::now();
    loop {
        for j in jobs.list(&ListParams::default()).await.unwrap().items {
            let shard = j
                .metadata
                .labels
                .clone()
                .unwrap_or_default()
                .get("pinterest.com/shard")
                .cloned()
                .unwrap_or_default();
            seen_uids
                .entry(shard)
                .or_default()
                .insert(j.metadata.uid.clone().unwrap_or_default());
            let env = j
                .spec
                .as_ref()
                .unwrap()
                .template
                .spec
                .as_ref()
                .unwrap()
                .containers[0]
                .env
                .clone()
                .unwrap_or_default();
            assert!(
                env.iter()
                    .any(|e| e.name == "SHARD_COUNT" && e.value.as_deref() == Some("6")),
                "SHARD_COUNT literal"
            );
        }
        let running = jobs
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|j| {
                j.status.as_ref().and_then(|s| s.succeeded).unwrap_or(0) == 0
                    && j.metadata.deletion_timestamp.is_none()
            })
            .count();
        assert!(
            running <= 2,
            "{running} unfinished shard Jobs at once; parallelism is 2"
        );
        let s = api.get("emb").await.unwrap().status.unwrap_or_default();
        if s.completed_shards.as_deref() == Some("0-5")
            && s.conditions
                .iter()
                .any(|c| c.type_ == "Complete" && c.status == ConditionStatus::True)
        {
            break;
        }
        assert!(
            start.elapsed() < WAIT,
            "job set did not complete: {s:?}\n{}",
            agent.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for (shard, uids) in &seen_uids {
        assert_eq!(uids.len(), 1, "shard {shard} got {} Jobs", uids.len());
    }
    assert_eq!(seen_uids.len(), 6);
    // Restart the agent: the record survives, no shard gets a Job again. While no agent
    // runs, an object of the job set appears that it does not want (made by hand, with its
    // labels and owner): the new agent prunes it from its watches' first listing.
    agent.kill();
    let owner = api.get("emb").await.unwrap();
    let stray = stray_config_map(
        pinfed::api::workload::WorkloadKind::JobSet,
        "emb",
        &owner.metadata.uid.clone().unwrap(),
    );
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    configmaps
        .create(&PostParams::default(), &stray)
        .await
        .unwrap();
    let agent2 = spawn_daemon(&fed, "agent-jobset-2", &agent_args(&fed, &member));
    eventually(
        Duration::from_secs(30),
        &format!(
            "the new agent to prune the stray ConfigMap\n{}",
            agent2.log_tail()
        ),
        || {
            let configmaps = configmaps.clone();
            async move { configmaps.get_opt("emb-stray").await.unwrap().is_none() }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        !agent2.log_text().contains("pruning by listing"),
        "the new agent pruned by listing, not from its watches:\n{}",
        agent2.log_tail()
    );
    let after = jobs.list(&ListParams::default()).await.unwrap().items;
    for j in &after {
        let shard = j
            .metadata
            .labels
            .clone()
            .unwrap_or_default()
            .get("pinterest.com/shard")
            .cloned()
            .unwrap_or_default();
        assert!(
            seen_uids
                .get(&shard)
                .is_some_and(|u| u.contains(j.metadata.uid.as_deref().unwrap_or_default())),
            "shard {shard} got a new Job after restart"
        );
    }
    assert_eq!(
        api.get("emb")
            .await
            .unwrap()
            .status
            .unwrap()
            .completed_shards
            .as_deref(),
        Some("0-5")
    );
    agent2.kill();
    ns.delete().await;
}

/// Sum of a metric family's samples for one kind in a /metrics scrape, or None when the
/// sample is absent.
fn sample(metrics: &str, family: &str, kind: &str) -> Option<i64> {
    let prefix = format!("{family}{{kind=\"{kind}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::test]
async fn queue_depth_is_reported_per_kind_and_drains_after_a_burst() {
    let fed = Federation::connect().await;
    let agent = shared_agent(&fed);
    let client = fed.client(&fed.member_names()[0]);
    let url = metrics_url(agent);
    let family = "pinfed_agent_queue_depth";

    // The family is there for every kind from the start, with its definition.
    let m = support::http_get(&url).await;
    assert!(m.contains(&format!("# HELP {family} ")), "{m}");
    assert!(m.contains(&format!("# TYPE {family} gauge")), "{m}");
    for kind in [
        "PinterestService",
        "PinterestJobSet",
        "PinterestCronJob",
        "PinterestDaemon",
        "PinterestTrainingJob",
        "PinterestStatefulSet",
    ] {
        assert!(sample(&m, family, kind).is_some(), "no {kind} sample\n{m}");
    }

    // A burst: 25 services at once, then all of them deleted (owned objects' deletions
    // then trigger owners that are gone — those must not stay counted either).
    let ns = TestNamespace::create(&client, "agent-queue").await;
    let api: Api<PinterestService> = Api::namespaced(client.clone(), &ns.name);
    let names: Vec<String> = (0..25).map(|i| format!("burst-{i}")).collect();
    futures::future::join_all(names.iter().map(|n| {
        let api = api.clone();
        let s = service(n, 1, false);
        async move { api.create(&PostParams::default(), &s).await.unwrap() }
    }))
    .await;
    let mut peak = 0;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let start = std::time::Instant::now();
    loop {
        let m = support::http_get(&url).await;
        peak = peak.max(sample(&m, family, "PinterestService").unwrap_or(0));
        let made = deployments
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len();
        if made == names.len() {
            break;
        }
        assert!(
            start.elapsed() < WAIT,
            "{made}/{} Deployments after {WAIT:?}\n{}",
            names.len(),
            agent.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("peak PinterestService queue depth during the burst: {peak}");
    for n in &names {
        api.delete(n, &DeleteParams::default()).await.unwrap();
    }
    eventually(
        WAIT,
        "the PinterestService queue depth to return to 0 after the burst",
        || {
            let url = url.clone();
            async move {
                sample(&support::http_get(&url).await, family, "PinterestService") == Some(0)
            }
        },
    )
    .await;
    // It stays there: no trigger is left counted once the deletions settle.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let m = support::http_get(&url).await;
    assert_eq!(sample(&m, family, "PinterestService"), Some(0), "{m}");
    ns.delete().await;
}

#[tokio::test]
async fn completed_shard_jobs_are_left_to_their_ttl_and_never_recreated() {
    let fed = Federation::connect().await;
    shared_agent(&fed); // CRDs installed
    // Its own member and agent, so its JobSet reconciles do not disturb the hot-loop count
    // of the invalid-resource test.
    let member = fed.member_names()[2].clone();
    let client = fed.client(&member);
    let agent = spawn_daemon(&fed, "agent-ttl", &agent_args(&fed, &member));
    let ns = TestNamespace::create(&client, "agent-ttl").await;
    let api: Api<PinterestJobSet> = Api::namespaced(client.clone(), &ns.name);
    let js: PinterestJobSet = serde_json::from_value(serde_json::json!({
        "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestJobSet",
        "metadata": {"name": "ttl"},
        "spec": {"owner": {"team": "ml", "contact": "ml@x"}, "shards": 3,
                 "ttlSecondsAfterFinished": 5,
                 "configTemplates": [{"name": "cfg", "data": {"shard.txt": "{{shard}}"}}],
                 "template": {"spec": {"containers": [{"name": "w", "image": "w:1",
                     "resources": {"requests": {"cpu": "100m"}}}]}}}
    }))
    .unwrap();
    api.create(&PostParams::default(), &js).await.unwrap();
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns.name);
    let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), &ns.name);

    let shard_of = |j: &Job| {
        j.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("pinterest.com/shard"))
            .cloned()
            .unwrap_or_default()
    };
    // Every Job uid ever seen per shard; per shard, whether its finished Job (and its
    // ConfigMap) was seen still in place at least 2 s after it finished — the old
    // behaviour pruned it as soon as the completion was recorded.
    let mut uids = std::collections::BTreeMap::<String, std::collections::BTreeSet<String>>::new();
    let mut kept_after_finish = std::collections::BTreeSet::<String>::new();
    let mut all_gone = false;
    let start = std::time::Instant::now();
    while !all_gone {
        let now = k8s_openapi::jiff::Timestamp::now();
        let listed = jobs.list(&ListParams::default()).await.unwrap().items;
        let cms: std::collections::BTreeSet<String> = config_maps
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|c| c.metadata.name)
            .collect();
        for j in &listed {
            let shard = shard_of(j);
            uids.entry(shard.clone())
                .or_default()
                .insert(j.metadata.uid.clone().unwrap_or_default());
            let finished = j.status.as_ref().and_then(|s| s.completion_time.clone());
            if let Some(t) = finished
                && j.metadata.deletion_timestamp.is_none()
                && now.duration_since(t.0).as_secs_f64() >= 2.0
                && cms.contains(&format!("ttl-{shard}-cfg"))
            {
                kept_after_finish.insert(shard);
            }
        }
        let s = api.get("ttl").await.unwrap().status.unwrap_or_default();
        all_gone = s.completed_shards.as_deref() == Some("0-2") && listed.is_empty();
        assert!(
            start.elapsed() < WAIT * 2,
            "shard Jobs did not complete and expire: completed {:?}, {} Jobs left, kept after \
             finish {kept_after_finish:?}\n{}",
            s.completed_shards,
            listed.len(),
            agent.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        kept_after_finish.len(),
        3,
        "every finished shard Job (and its ConfigMap) stays until its TTL: {kept_after_finish:?}"
    );
    // Gone for good: not recreated, the record stays full, the ConfigMaps follow the Jobs.
    let cms = config_maps.clone();
    eventually(
        WAIT,
        "the completed shards' ConfigMaps to be pruned",
        || {
            let cms = cms.clone();
            async move {
                !cms.list(&ListParams::default())
                    .await
                    .unwrap()
                    .items
                    .iter()
                    .any(|c| {
                        c.metadata
                            .name
                            .as_deref()
                            .is_some_and(|n| n.starts_with("ttl-"))
                    })
            }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = jobs.list(&ListParams::default()).await.unwrap().items;
    assert!(
        after.is_empty(),
        "shard Jobs recreated after TTL clean-up: {:?}",
        after
            .iter()
            .map(|j| j.metadata.name.clone())
            .collect::<Vec<_>>()
    );
    for (shard, u) in &uids {
        assert_eq!(u.len(), 1, "shard {shard} got {} Jobs", u.len());
    }
    let s = api.get("ttl").await.unwrap().status.unwrap();
    assert_eq!(s.completed_shards.as_deref(), Some("0-2"));
    assert!(
        s.conditions
            .iter()
            .any(|c| c.type_ == "Complete" && c.status == ConditionStatus::True),
        "{s:?}"
    );
    agent.kill();
    ns.delete().await;
}

#[tokio::test]
async fn a_tensorflow_job_writes_its_cluster_spec_once_and_every_pod_refers_to_it() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use pinfed::api::training::PinterestTrainingJob;
    let fed = Federation::connect().await;
    let agent = shared_agent(&fed);
    let client = fed.client(&fed.member_names()[0]);
    let ns = TestNamespace::create(&client, "agent-tf").await;
    let api: Api<PinterestTrainingJob> = Api::namespaced(client.clone(), &ns.name);
    let container = serde_json::json!({"containers": [{"name": "t", "image": "registry.example/tf:1",
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]});
    let job: PinterestTrainingJob = serde_json::from_value(serde_json::json!({
        "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestTrainingJob",
        "metadata": {"name": "tf"},
        "spec": {"owner": {"team": "ml", "contact": "ml@x"}, "framework": "tensorflow",
                 "replicaSpecs": {"Chief": {"replicas": 1, "template": {"spec": container.clone()}},
                                  "Worker": {"replicas": 12, "template": {"spec": container}}}}
    }))
    .unwrap();
    api.create(&PostParams::default(), &job).await.unwrap();
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns.name);
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    eventually(WAIT, "13 Jobs and the cluster ConfigMap", || {
        let (jobs, maps) = (jobs.clone(), maps.clone());
        async move {
            let n = jobs
                .list(&ListParams::default().labels("pinterest.com/workload=tf"))
                .await
                .map(|l| l.items.len())
                .unwrap_or(0);
            n == 13 && maps.get_opt("tf-tf-cluster").await.ok().flatten().is_some()
        }
    })
    .await;
    let cm = maps.get("tf-tf-cluster").await.unwrap();
    let cluster: serde_json::Value =
        serde_json::from_str(&cm.data.unwrap()["cluster"]).expect("the cluster spec is JSON");
    assert_eq!(cluster["worker"].as_array().unwrap().len(), 12);
    assert_eq!(cluster["chief"][0], "tf-chief-0.tf:2222");
    // Every Job the API server accepted carries the reference, never the spec itself.
    for j in jobs
        .list(&ListParams::default().labels("pinterest.com/workload=tf"))
        .await
        .unwrap()
        .items
    {
        let c = &j.spec.unwrap().template.spec.unwrap().containers[0];
        let env = c.env.clone().unwrap();
        let from = env
            .iter()
            .find(|e| e.name == "PINFED_TF_CLUSTER")
            .and_then(|e| e.value_from.clone())
            .and_then(|v| v.config_map_key_ref)
            .expect("PINFED_TF_CLUSTER from the ConfigMap");
        assert_eq!(
            (from.name.as_str(), from.key.as_str()),
            ("tf-tf-cluster", "cluster")
        );
        let tf = env
            .iter()
            .find(|e| e.name == "TF_CONFIG")
            .and_then(|e| e.value.clone())
            .unwrap();
        assert!(
            tf.starts_with("{\"cluster\":$(PINFED_TF_CLUSTER),\"task\":"),
            "{tf}"
        );
        assert!(!tf.contains("tf-worker-"), "no host list in a pod: {tf}");
    }
    assert!(agent.alive(), "{}", agent.log_tail());
    // Every kind the training job generates (its ConfigMap too) is under an owned-object
    // watch, so its prunes are answered from the watches.
    assert!(
        !agent.log_text().contains("pruning by listing"),
        "{}",
        agent.log_tail()
    );
    api.delete("tf", &DeleteParams::default()).await.unwrap();
    ns.delete().await;
}
