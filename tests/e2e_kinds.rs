//! Every kind end to end through the hub and the agents on the local topology, beyond
//! services and job sets (e2e_hub_workloads): a cron job fires on the one member that runs
//! it and the hub shows its schedule and runs; a daemon lands on every eligible member and
//! node pool; a stateful set gets its volumes bound and keeps its ordinal identities
//! across an agent restart; a TensorFlow job is gang-placed and its pods share one
//! consistent cluster spec; a ConfigMap and a Secret a daemon references follow their
//! changes on the hub into every member within seconds (by watch: the hub's resync here is
//! ten minutes, the agent's five).

mod support;

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use pinfed::api::cronjob::PinterestCronJob;
use pinfed::api::daemon::PinterestDaemon;
use pinfed::api::statefulset::PinterestStatefulSet;
use pinfed::api::training::PinterestTrainingJob;
use support::{
    Daemon, Federation, TestNamespace, condition, eventually, join_all, spawn_daemon, status_of,
};

/// Kinds that wait on the member's controllers (a cron schedule is a minute apart).
const WAIT: Duration = Duration::from_secs(180);

/// The hub and one agent per member for the tests of this file; an agent may be
/// restarted by a test (so they sit behind a lock).
fn federation_running(fed: &Federation) -> &'static Mutex<Vec<Daemon>> {
    static DAEMONS: OnceLock<Mutex<Vec<Daemon>>> = OnceLock::new();
    DAEMONS.get_or_init(|| {
        join_all(fed);
        // A resync far above the waits of the config test: a changed ConfigMap or Secret
        // must reach the members by watch, not by the hub's resync.
        let mut daemons = vec![support::spawn_hub(fed, "hub", &["--resync-secs", "600"])];
        daemons.extend(support::spawn_agents(fed));
        Mutex::new(daemons)
    })
}

fn hub_log(fed: &Federation) -> String {
    federation_running(fed).lock().unwrap()[0].log_tail()
}

/// The clusters a hub status places the workload on.
fn placed_on(status: &serde_json::Value) -> Vec<String> {
    status["placement"]["placements"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|p| p["cluster"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn owner() -> serde_json::Value {
    serde_json::json!({"team": "infra", "contact": "infra@pinterest.com"})
}

fn small(name: &str) -> serde_json::Value {
    serde_json::json!({"name": name, "image": format!("registry.example/{name}:1"),
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}})
}

#[tokio::test]
async fn a_cron_job_fires_on_its_one_member_and_the_hub_shows_its_schedule_and_runs() {
    let fed = Federation::connect().await;
    federation_running(&fed);
    let hub = fed.hub();
    let ns = TestNamespace::create(&hub, "kinds-cron").await;
    let api: Api<PinterestCronJob> = Api::namespaced(hub.clone(), &ns.name);
    // Each run lasts 45 s (kwok completes a Job's pod after the delay its annotation asks),
    // so a run is seen active; Forbid keeps runs from overlapping.
    let cron: PinterestCronJob = serde_json::from_value(serde_json::json!({
        "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestCronJob",
        "metadata": {"name": "report"},
        "spec": {"owner": owner(), "schedule": "* * * * *", "concurrencyPolicy": "Forbid",
            "template": {
                "metadata": {"annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "45s"}},
                "spec": {"containers": [small("report")]}}}
    }))
    .unwrap();
    api.create(&PostParams::default(), &cron).await.unwrap();

    let mut member = String::new();
    eventually(
        Duration::from_secs(60),
        &format!("the cron job placed on one member\n{}", hub_log(&fed)),
        || {
            let api = api.clone();
            async move { placed_on(&status_of(&api, "report").await).len() == 1 }
        },
    )
    .await;
    member.push_str(&placed_on(&status_of(&api, "report").await)[0]);
    let member_jobs: Api<Job> = Api::namespaced(fed.client(&member), &ns.name);
    let member_crons: Api<CronJob> = Api::namespaced(fed.client(&member), &ns.name);

    // The member's CronJob controller fires (at the next minute), and while that run lasts
    // the hub shows it active, with the member's schedule time.
    let seen = Mutex::new(serde_json::Value::Null);
    eventually(
        WAIT,
        &format!("a run active in {member} and on the hub\n{}", hub_log(&fed)),
        || {
            let (api, member_crons, seen) = (api.clone(), member_crons.clone(), &seen);
            async move {
                let Ok(Some(cj)) = member_crons.get_opt("report").await else {
                    return false;
                };
                let st = cj.status.unwrap_or_default();
                let active = st.active.map(|a| a.len()).unwrap_or(0);
                let hub = status_of(&api, "report").await;
                *seen.lock().unwrap() = hub.clone();
                active == 1
                    && hub["active"] == 1
                    && st.last_schedule_time.is_some_and(|t| {
                        hub["lastScheduleTime"] == serde_json::to_value(t).unwrap()
                    })
            }
        },
    )
    .await;
    let jobs = member_jobs
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert!(
        !jobs.is_empty(),
        "the CronJob in {member} created a Job for its run"
    );
    // Only the placed member runs it: no CronJob anywhere else.
    for m in fed.member_names().into_iter().filter(|m| *m != member) {
        let other: Api<CronJob> = Api::namespaced(fed.client(&m), &ns.name);
        assert!(
            other
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .is_empty(),
            "{m} has a CronJob of a cron job placed on {member}"
        );
    }
    // The run completes: the hub shows the success and no run active until the next.
    eventually(
        WAIT,
        &format!(
            "the run's success on the hub (last seen {})\n{}",
            seen.lock().unwrap(),
            hub_log(&fed)
        ),
        || {
            let (api, member) = (api.clone(), member.clone());
            async move {
                let s = status_of(&api, "report").await;
                s["lastSuccessfulTime"].is_string()
                    && s["clusters"][0]["cluster"] == member.as_str()
                    && s["clusters"][0]["lastScheduleTime"].is_string()
            }
        },
    )
    .await;
    ns.delete_and_wait(WAIT).await;
}

/// Nodes of the topology per member: all of them, and those without a taint.
fn nodes_per_member(fed: &Federation) -> BTreeMap<String, (u32, u32)> {
    fed.topology
        .members
        .iter()
        .map(|m| {
            let all = m.node_pools.iter().map(|p| p.count).sum();
            let untainted = m
                .node_pools
                .iter()
                .filter(|p| p.taints.is_empty())
                .map(|p| p.count)
                .sum();
            (m.name.clone(), (all, untainted))
        })
        .collect()
}

#[tokio::test]
async fn a_daemon_runs_on_every_member_and_on_a_tainted_pool_only_when_it_tolerates_it() {
    let fed = Federation::connect().await;
    federation_running(&fed);
    let hub = fed.hub();
    let ns = TestNamespace::create(&hub, "kinds-daemon").await;
    let api: Api<PinterestDaemon> = Api::namespaced(hub.clone(), &ns.name);
    let daemon = |name: &str, tolerate_gpu: bool| -> PinterestDaemon {
        let mut spec = serde_json::json!({"containers": [small(name)]});
        if tolerate_gpu {
            spec["tolerations"] = serde_json::json!([{"key": "dedicated", "operator": "Equal",
                "value": "gpu", "effect": "NoSchedule"}]);
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestDaemon",
            "metadata": {"name": name},
            "spec": {"owner": owner(), "template": {"spec": spec}}
        }))
        .unwrap()
    };
    api.create(&PostParams::default(), &daemon("log-shipper", false))
        .await
        .unwrap();
    api.create(&PostParams::default(), &daemon("gpu-monitor", true))
        .await
        .unwrap();
    let nodes = nodes_per_member(&fed);
    let members: Vec<String> = nodes.keys().cloned().collect();
    for (name, tolerates) in [("log-shipper", false), ("gpu-monitor", true)] {
        let want: BTreeMap<String, i32> = nodes
            .iter()
            .map(|(m, (all, untainted))| {
                let n = if tolerates { *all } else { *untainted };
                (m.clone(), i32::try_from(n).unwrap())
            })
            .collect();
        let total: i32 = want.values().sum();
        let last = Mutex::new(String::new());
        let ns_name = ns.name.as_str();
        let check = || {
            let (api, fed, want, members, last) = (&api, &fed, &want, &members, &last);
            async move {
                let s = status_of(api, name).await;
                let mut placed = placed_on(&s);
                placed.sort();
                if placed != *members {
                    *last.lock().unwrap() = format!("placed on {placed:?}");
                    return false;
                }
                // Each member's DaemonSet schedules one pod per node it may run on.
                for (m, n) in want {
                    let ds: Api<DaemonSet> = Api::namespaced(fed.client(m), ns_name);
                    let got = ds
                        .list(
                            &ListParams::default()
                                .labels(&format!("pinterest.com/workload={name}")),
                        )
                        .await
                        .ok()
                        .and_then(|l| l.items.into_iter().next())
                        .and_then(|d| d.status)
                        .map(|st| (st.desired_number_scheduled, st.number_ready));
                    if got != Some((*n, *n)) {
                        *last.lock().unwrap() = format!("{m}: desired/ready {got:?}, want {n}");
                        return false;
                    }
                }
                let ok = s["desired"] == total && s["ready"] == total;
                if !ok {
                    *last.lock().unwrap() =
                        format!("hub desired {} ready {}", s["desired"], s["ready"]);
                }
                ok && condition(&s, "Ready").as_deref() == Some("True")
            }
        };
        let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(eventually(
            WAIT,
            &format!("{name} on {want:?} ({total} pods) and Ready on the hub"),
            check,
        )))
        .await;
        assert!(
            outcome.is_ok(),
            "{name}: last seen {}\n{}",
            last.lock().unwrap(),
            hub_log(&fed)
        );
    }
    // The GPU pool's pods exist only for the daemon that tolerates its taint.
    let gpu = fed.gpu_member();
    let pods: Api<Pod> = Api::namespaced(fed.client(&gpu), &ns.name);
    let on_gpu = |workload: &str| {
        let pods = pods.clone();
        let workload = workload.to_string();
        async move {
            pods.list(&ListParams::default().labels(&format!("pinterest.com/workload={workload}")))
                .await
                .unwrap()
                .items
                .iter()
                .filter(|p| {
                    p.spec
                        .as_ref()
                        .and_then(|s| s.node_name.as_deref())
                        .is_some_and(|n| n.contains("gpu"))
                })
                .count()
        }
    };
    let gpu_nodes = fed
        .topology
        .members
        .iter()
        .find(|m| m.name == gpu)
        .map(|m| {
            m.node_pools
                .iter()
                .filter(|p| !p.taints.is_empty())
                .map(|p| p.count as usize)
                .sum::<usize>()
        })
        .unwrap();
    assert_eq!(on_gpu("log-shipper").await, 0, "no pod on a tainted pool");
    assert_eq!(on_gpu("gpu-monitor").await, gpu_nodes, "a pod per GPU node");
    ns.delete_and_wait(WAIT).await;
}

#[tokio::test]
async fn a_stateful_set_binds_its_volumes_and_keeps_its_identities_across_an_agent_restart() {
    let fed = Federation::connect().await;
    federation_running(&fed);
    let hub = fed.hub();
    let ns = TestNamespace::create(&hub, "kinds-sts").await;
    let api: Api<PinterestStatefulSet> = Api::namespaced(hub.clone(), &ns.name);
    let sts: PinterestStatefulSet = serde_json::from_value(serde_json::json!({
        "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestStatefulSet",
        "metadata": {"name": "kv"},
        "spec": {"owner": owner(), "replicas": 3,
            "placement": {"failover": {"enabled": false}},
            "template": {"spec": {"containers": [{
                "name": "kv", "image": "registry.example/kv:1",
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                "volumeMounts": [{"name": "data", "mountPath": "/var/lib/kv"}]}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"],
                         "resources": {"requests": {"storage": "1Gi"}}}}]}
    }))
    .unwrap();
    api.create(&PostParams::default(), &sts).await.unwrap();
    eventually(
        WAIT,
        &format!("kv placed on one member and 3/3 ready\n{}", hub_log(&fed)),
        || {
            let api = api.clone();
            async move {
                let s = status_of(&api, "kv").await;
                placed_on(&s).len() == 1 && s["readyReplicas"] == 3
            }
        },
    )
    .await;
    let member = placed_on(&status_of(&api, "kv").await)[0].clone();
    let client = fed.client(&member);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns.name);
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns.name);
    // Identities: the StatefulSet, and for each ordinal its pod and its bound claim.
    let identities = || {
        let (pods, claims, sets) = (pods.clone(), claims.clone(), sets.clone());
        let member = member.clone();
        async move {
            let set = sets.list(&ListParams::default()).await.unwrap().items;
            assert_eq!(set.len(), 1, "one StatefulSet in {member}");
            let set_uid = set[0].metadata.uid.clone().unwrap();
            let set_name = set[0].metadata.name.clone().unwrap();
            let mut out = BTreeMap::new();
            for p in pods.list(&ListParams::default()).await.unwrap().items {
                out.insert(
                    p.metadata.name.clone().unwrap(),
                    p.metadata.uid.clone().unwrap(),
                );
            }
            for c in claims.list(&ListParams::default()).await.unwrap().items {
                let phase = c.status.as_ref().and_then(|s| s.phase.clone());
                assert_eq!(
                    phase.as_deref(),
                    Some("Bound"),
                    "claim {:?} is bound",
                    c.metadata.name
                );
                out.insert(
                    c.metadata.name.clone().unwrap(),
                    c.metadata.uid.clone().unwrap(),
                );
            }
            (set_name, set_uid, out)
        }
    };
    let (set_name, set_uid, before) = identities().await;
    for i in 0..3 {
        assert!(
            before.contains_key(&format!("{set_name}-{i}")),
            "pod {set_name}-{i} in {before:?}"
        );
        assert!(
            before.contains_key(&format!("data-{set_name}-{i}")),
            "claim data-{set_name}-{i} in {before:?}"
        );
    }
    // The member's agent restarts; then the stateful set grows by one.
    {
        let mut daemons = federation_running(&fed).lock().unwrap();
        let i = daemons
            .iter()
            .position(|d| d.name == format!("agent-{member}"))
            .expect("the member's agent");
        daemons[i].stop(Duration::from_secs(10));
        daemons[i] = spawn_daemon(
            &fed,
            &format!("agent-{member}"),
            &support::agent_args(&fed, &member),
        );
    }
    api.patch(
        "kv",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"replicas": 4}})),
    )
    .await
    .unwrap();
    eventually(
        WAIT,
        &format!("kv 4/4 ready after the agent restart\n{}", hub_log(&fed)),
        || {
            let (api, pods) = (api.clone(), pods.clone());
            let fourth = format!("{set_name}-3");
            async move {
                status_of(&api, "kv").await["readyReplicas"] == 4
                    && pods.get_opt(&fourth).await.ok().flatten().is_some()
            }
        },
    )
    .await;
    let (_, set_uid_after, after) = identities().await;
    assert_eq!(set_uid_after, set_uid, "the StatefulSet was not recreated");
    for (name, uid) in &before {
        assert_eq!(
            after.get(name),
            Some(uid),
            "{name} kept its identity across the agent restart"
        );
    }
    assert!(after.contains_key(&format!("data-{set_name}-3")));
    ns.delete_and_wait(WAIT).await;
}

#[tokio::test]
async fn a_tensorflow_job_is_gang_placed_and_its_pods_share_one_cluster_spec() {
    let fed = Federation::connect().await;
    federation_running(&fed);
    let hub = fed.hub();
    let ns = TestNamespace::create(&hub, "kinds-tf").await;
    let api: Api<PinterestTrainingJob> = Api::namespaced(hub.clone(), &ns.name);
    let pod = serde_json::json!({"spec": {"containers": [small("tensorflow")]}});
    let job: PinterestTrainingJob = serde_json::from_value(serde_json::json!({
        "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestTrainingJob",
        "metadata": {"name": "tf"},
        "spec": {"owner": owner(), "framework": "tensorflow",
            "replicaSpecs": {"Chief": {"replicas": 1, "template": pod.clone()},
                             "PS": {"replicas": 2, "template": pod.clone()},
                             "Worker": {"replicas": 4, "template": pod}}}
    }))
    .unwrap();
    api.create(&PostParams::default(), &job).await.unwrap();
    eventually(
        WAIT,
        &format!(
            "the gang of 7 placed whole on one member\n{}",
            hub_log(&fed)
        ),
        || {
            let api = api.clone();
            async move {
                let s = status_of(&api, "tf").await;
                s["placement"]["placements"]
                    .as_array()
                    .is_some_and(|p| p.len() == 1 && p[0]["replicas"] == 7)
                    && s["placement"]["unplaced"] == 0
            }
        },
    )
    .await;
    let member = placed_on(&status_of(&api, "tf").await)[0].clone();
    let client = fed.client(&member);
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns.name);
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    eventually(
        WAIT,
        &format!("7 Jobs and the cluster spec in {member}"),
        || {
            let (jobs, maps) = (jobs.clone(), maps.clone());
            async move {
                jobs.list(&ListParams::default().labels("pinterest.com/workload=tf"))
                    .await
                    .is_ok_and(|l| l.items.len() == 7)
                    && maps.get_opt("tf-tf-cluster").await.ok().flatten().is_some()
            }
        },
    )
    .await;
    let cm = maps.get("tf-tf-cluster").await.unwrap();
    let cluster: serde_json::Value =
        serde_json::from_str(&cm.data.unwrap()["cluster"]).expect("the cluster spec is JSON");
    for (role, n) in [("chief", 1), ("ps", 2), ("worker", 4)] {
        assert_eq!(
            cluster[role].as_array().map(Vec::len),
            Some(n),
            "{role} in {cluster}"
        );
    }
    // Each Job's pod is the task its TF_CONFIG names, at the address the spec lists for it.
    for j in jobs
        .list(&ListParams::default().labels("pinterest.com/workload=tf"))
        .await
        .unwrap()
        .items
    {
        let pod = j.spec.unwrap().template.spec.unwrap();
        let host = pod.hostname.clone().expect("a hostname per task");
        let tf = pod.containers[0]
            .env
            .iter()
            .flatten()
            .find(|e| e.name == "TF_CONFIG")
            .and_then(|e| e.value.clone())
            .expect("TF_CONFIG");
        let task: serde_json::Value = serde_json::from_str(
            tf.split("\"task\":")
                .nth(1)
                .and_then(|t| t.split(",\"environment\"").next())
                .expect("a task in TF_CONFIG"),
        )
        .unwrap();
        let (role, index) = (
            task["type"].as_str().unwrap().to_string(),
            task["index"].as_u64().unwrap() as usize,
        );
        let address = cluster[&role][index].as_str().unwrap_or_default();
        assert!(
            address.starts_with(&format!("{host}.")),
            "{host} is {role} {index}, listed as {address}"
        );
    }
    eventually(WAIT, "the training job Complete on the hub", || {
        let api = api.clone();
        async move { condition(&status_of(&api, "tf").await, "Complete").as_deref() == Some("True") }
    })
    .await;
    ns.delete_and_wait(WAIT).await;
}

#[tokio::test]
async fn a_runtime_profile_deleted_on_the_hub_leaves_every_member_and_local_ones_stay() {
    use pinfed::api::runtime_profile::RuntimeProfile;
    let fed = Federation::connect().await;
    federation_running(&fed);
    let hub = fed.hub();
    let name = support::unique_name("e2e-profile");
    let profile = |name: &str| -> RuntimeProfile {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "RuntimeProfile",
            "metadata": {"name": name},
            "spec": {"version": name, "description": "e2e: propagated, then deleted"}
        }))
        .unwrap()
    };
    Api::<RuntimeProfile>::all(hub.clone())
        .create(&PostParams::default(), &profile(&name))
        .await
        .unwrap();
    // One profile a member's own admins made: never the hub's to remove.
    let first = fed.member_names()[0].clone();
    let local = support::unique_name("e2e-local-profile");
    Api::<RuntimeProfile>::all(fed.client(&first))
        .create(&PostParams::default(), &profile(&local))
        .await
        .unwrap();
    let in_members = |name: String| {
        let fed = &fed;
        async move {
            let mut n = 0;
            for m in fed.member_names() {
                let api: Api<RuntimeProfile> = Api::all(fed.client(&m));
                if api.get_opt(&name).await.ok().flatten().is_some() {
                    n += 1;
                }
            }
            n
        }
    };
    let members = fed.member_names().len();
    eventually(
        Duration::from_secs(60),
        &format!("{name} in every member\n{}", hub_log(&fed)),
        || async { in_members(name.clone()).await == members },
    )
    .await;
    Api::<RuntimeProfile>::all(hub.clone())
        .delete(&name, &Default::default())
        .await
        .unwrap();
    eventually(
        Duration::from_secs(60),
        &format!("{name} removed from every member\n{}", hub_log(&fed)),
        || async { in_members(name.clone()).await == 0 },
    )
    .await;
    let api: Api<RuntimeProfile> = Api::all(fed.client(&first));
    assert!(
        api.get_opt(&local).await.unwrap().is_some(),
        "{local}, made in {first} itself, stays"
    );
    let _ = api.delete(&local, &Default::default()).await;
}

#[tokio::test]
async fn config_a_daemon_references_follows_its_changes_on_the_hub_into_every_member() {
    let fed = Federation::connect().await;
    federation_running(&fed);
    let hub = fed.hub();
    let ns = TestNamespace::create(&hub, "kinds-config").await;
    let cms: Api<ConfigMap> = Api::namespaced(hub.clone(), &ns.name);
    let secrets: Api<Secret> = Api::namespaced(hub.clone(), &ns.name);
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(
            serde_json::json!({"metadata": {"name": "settings"}, "data": {"MODE": "blue"}}),
        )
        .unwrap(),
    )
    .await
    .unwrap();
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                serde_json::json!({"metadata": {"name": "creds"}, "stringData": {"token": "one"}}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    let out = support::pinfed(
        &fed,
        &[
            "grant-secrets",
            "--context",
            "hub",
            "-n",
            &ns.name,
            "creds",
            "--members",
            "*",
        ],
    );
    assert!(
        out.status.success(),
        "pinfed grant-secrets: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A daemon (every member, the pull member too) with the ConfigMap in its environment
    // and the Secret as a volume.
    let mut container = small("agentd");
    container["envFrom"] = serde_json::json!([{"configMapRef": {"name": "settings"}}]);
    let daemon: PinterestDaemon = serde_json::from_value(serde_json::json!({
        "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestDaemon",
        "metadata": {"name": "agentd"},
        "spec": {"owner": owner(), "template": {"spec": {
            "containers": [container],
            "volumes": [{"name": "creds", "secret": {"secretName": "creds"}}]}}}
    }))
    .unwrap();
    Api::<PinterestDaemon>::namespaced(hub.clone(), &ns.name)
        .create(&PostParams::default(), &daemon)
        .await
        .unwrap();
    let members = fed.member_names();
    // What each member's copies hold: (MODE, token), or why not yet.
    let copies = |fed: &Federation, ns: String| {
        let clients: Vec<(String, kube::Client)> =
            members.iter().map(|m| (m.clone(), fed.client(m))).collect();
        async move {
            let mut out = BTreeMap::new();
            for (m, c) in clients {
                let mode = Api::<ConfigMap>::namespaced(c.clone(), &ns)
                    .get_opt("settings")
                    .await
                    .ok()
                    .flatten()
                    .and_then(|cm| cm.data?.get("MODE").cloned());
                let token = Api::<Secret>::namespaced(c, &ns)
                    .get_opt("creds")
                    .await
                    .ok()
                    .flatten()
                    .and_then(|s| s.data?.get("token").cloned())
                    .map(|b| String::from_utf8_lossy(&b.0).into_owned());
                out.insert(m, (mode, token));
            }
            out
        }
    };
    let want = |mode: &str, token: &str| -> BTreeMap<String, (Option<String>, Option<String>)> {
        members
            .iter()
            .map(|m| (m.clone(), (Some(mode.into()), Some(token.into()))))
            .collect()
    };
    eventually(
        WAIT,
        &format!("the first copies in every member\n{}", hub_log(&fed)),
        || async { copies(&fed, ns.name.clone()).await == want("blue", "one") },
    )
    .await;
    // Settled first: the daemon Ready on the hub, then quiet for a while, so no slice or
    // DaemonSet change is under way that would reconcile (and re-copy) by the way.
    let daemons: Api<PinterestDaemon> = Api::namespaced(hub.clone(), &ns.name);
    eventually(
        WAIT,
        &format!("agentd Ready on the hub\n{}", hub_log(&fed)),
        || async {
            let s = status_of(&daemons, "agentd").await;
            condition(&s, "Ready").as_deref() == Some("True")
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    // Change both on the hub: every member's copies follow within 30 s (the hub resyncs
    // every 600 s here and the agents requeue every 300 s: only the watches can do it).
    let started = std::time::Instant::now();
    cms.patch(
        "settings",
        &PatchParams::default(),
        &Patch::Merge(&serde_json::json!({"data": {"MODE": "green"}})),
    )
    .await
    .unwrap();
    secrets
        .patch(
            "creds",
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"stringData": {"token": "two"}})),
        )
        .await
        .unwrap();
    eventually(
        Duration::from_secs(30),
        "the changed copies in every member",
        || async { copies(&fed, ns.name.clone()).await == want("green", "two") },
    )
    .await;
    eprintln!(
        "config change on the hub -> every member's copies: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    ns.delete().await;
}
