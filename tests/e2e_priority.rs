//! Priority, the queue and preemption on the local topology (docs/priority.md), in one
//! member (use1a, push) filled by this test alone: low-priority job-set shards and a
//! low-priority service fill it; a high-priority gang that needs two nodes' room is placed
//! by preempting the fewest shards, in that member only, and the shards run again later,
//! each completing once; workloads of equal priority, or whose class says `Never`, only
//! queue, in priority order; an unknown class is held Invalid.
//!
//! One test in its own binary: it fills a member, which would starve tests beside it.

mod support;

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use pinfed::api::jobset::PinterestJobSet;
use pinfed::api::service::PinterestService;
use pinfed::api::training::PinterestTrainingJob;
use support::{Daemon, Federation, TestNamespace, eventually_logged, join_all, status_of};

const WAIT: Duration = Duration::from_secs(120);
const MEMBER: &str = "use1a";
/// The pull member, filled on its GPU pool (two nodes of 8 GPUs) by the pull scenario.
const PULL_MEMBER: &str = "use1c";

/// PriorityClasses on the hub for this test; removed when dropped (cluster-scoped: a
/// failed test must not leave them to the next run).
struct Classes {
    context: String,
    names: Vec<String>,
}

impl Classes {
    /// The classes in cluster `context` (the hub, or a member whose admins accept them).
    async fn create(
        fed: &Federation,
        context: &str,
        tag: &str,
        classes: &[(&str, i32, bool)],
    ) -> Classes {
        let api: Api<PriorityClass> = Api::all(fed.client(context));
        let mut names = Vec::new();
        for (name, value, never) in classes {
            let full = format!("{tag}-{name}");
            let c: PriorityClass = serde_json::from_value(serde_json::json!({
                "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": full},
                "value": value,
                "preemptionPolicy": if *never { "Never" } else { "PreemptLowerPriority" },
            }))
            .unwrap();
            let _ = api.delete(&full, &DeleteParams::default()).await;
            api.create(&PostParams::default(), &c).await.unwrap();
            names.push(full);
        }
        Classes {
            context: context.to_string(),
            names,
        }
    }
}

/// Deletes the test's namespace should the test fail (its workloads would hold the member
/// full for the tests after it); the hub still running releases their finalizers.
struct NamespaceGuard(String);

impl Drop for NamespaceGuard {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let kc = std::env::var("PINFED_E2E_KUBECONFIG").unwrap_or_default();
        let _ = std::process::Command::new(support::kubectl_bin())
            .args([
                "--kubeconfig",
                &kc,
                "--context",
                "hub",
                "delete",
                "namespace",
                &self.0,
                "--timeout=30s",
            ])
            .output();
    }
}

impl Drop for Classes {
    fn drop(&mut self) {
        let kc = std::env::var("PINFED_E2E_KUBECONFIG").unwrap_or_default();
        for n in &self.names {
            let _ = std::process::Command::new(support::kubectl_bin())
                .args([
                    "--kubeconfig",
                    &kc,
                    "--context",
                    &self.context,
                    "delete",
                    "priorityclass",
                    n,
                    "--ignore-not-found",
                ])
                .output();
        }
    }
}

fn owner() -> serde_json::Value {
    serde_json::json!({"team": "ads", "contact": "ads@pinterest.com"})
}

/// Only the test's member.
fn placement() -> serde_json::Value {
    serde_json::json!({"clusterAffinity": {"clusterNames": [MEMBER]}})
}

fn pod(cpu: &str, run_for: &str) -> serde_json::Value {
    serde_json::json!({
        "metadata": {"annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": run_for}},
        "spec": {"containers": [{"name": "work", "image": "registry.example/work:1",
            "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]}
    })
}

fn job_set(
    name: &str,
    class: Option<&str>,
    shards: i32,
    cpu: &str,
    run_for: &str,
) -> PinterestJobSet {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestJobSet",
        "metadata": {"name": name},
        "spec": {"owner": owner(), "priorityClassName": class, "shards": shards,
            "placement": placement(), "template": pod(cpu, run_for)}
    }))
    .unwrap()
}

/// The line of the hub's log where job set `name` was first placed whole (its decision
/// with nothing unplaced): the order in which the hub placed workloads.
fn first_placed_line(hub: &Daemon, namespace: &str, name: &str) -> Option<usize> {
    let workload = format!("=PinterestJobSet/{namespace}/{name} ");
    hub.log_text().lines().map(strip_ansi).position(|l| {
        l.contains(" placed ") && l.contains(&workload) && l.contains("\"unplaced\":0")
    })
}

/// A log line without its terminal colours.
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // ESC [ … letter
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn queue_position(st: &serde_json::Value) -> Option<i64> {
    st["placement"]["queue"]["position"].as_i64()
}

fn preemptions(st: &serde_json::Value) -> Vec<serde_json::Value> {
    st["placement"]["preemptions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[tokio::test]
async fn a_high_priority_gang_preempts_the_fewest_shards_in_one_member_and_the_rest_queue_in_order()
{
    let fed = Federation::connect().await;
    join_all(&fed);
    let mut daemons: Vec<Daemon> = {
        let mut d = vec![support::spawn_hub(&fed, "hub-priority", &[])];
        d.extend(support::spawn_agents(&fed));
        d
    };
    // The push member and the pull member side by side, under one hub: the hub's view of
    // a pull member's pods is its agent's report.
    let push_logs: Vec<&Daemon> = daemons.iter().take(2).collect();
    let pull_logs: Vec<&Daemon> = [&daemons[0]]
        .into_iter()
        .chain(
            daemons
                .iter()
                .skip(1)
                .filter(|d| d.name.contains(PULL_MEMBER)),
        )
        .collect();
    tokio::join!(
        in_the_push_member(&fed, &push_logs),
        in_the_pull_member(&fed, &pull_logs)
    );
    a_debt_outlives_a_hub_restart(&fed, &mut daemons).await;
}

/// What a victim owes is written on it before the preemptor's decision is recorded
/// (docs/priority.md): a hub that stops between the two decisions and starts again applies
/// it. Played from the annotations a preemptor leaves when the hub stops right after its
/// decision: a job set's evicted shards run again later in new Jobs, the others untouched;
/// a service shrinks by the replica it owes and grows back once the room is there.
async fn a_debt_outlives_a_hub_restart(fed: &Federation, daemons: &mut Vec<Daemon>) {
    let hub = fed.hub();
    let ns = TestNamespace::create(&hub, "prio-debt").await;
    let _guard = NamespaceGuard(ns.name.clone());
    let sets: Api<PinterestJobSet> = Api::namespaced(hub.clone(), &ns.name);
    sets.create(
        &PostParams::default(),
        &job_set("victim", None, 4, "500m", "10m"),
    )
    .await
    .unwrap();
    let services: Api<PinterestService> = Api::namespaced(hub.clone(), &ns.name);
    let steady: PinterestService = serde_json::from_value(serde_json::json!({
        "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestService",
        "metadata": {"name": "steady"},
        "spec": {"owner": owner(), "replicas": 3, "placement": placement(),
            "template": pod("100m", "1s")}
    }))
    .unwrap();
    services
        .create(&PostParams::default(), &steady)
        .await
        .unwrap();
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(fed.client(MEMBER), &ns.name);
    let replicas_in_member = || {
        let deployments = deployments.clone();
        async move {
            deployments
                .get_opt("steady")
                .await
                .ok()
                .flatten()
                .and_then(|d| d.spec?.replicas)
        }
    };
    eventually_logged(
        WAIT,
        "4 shards and 3 replicas running in the member",
        &[&daemons[0]],
        || {
            let sets = sets.clone();
            let replicas = replicas_in_member();
            async move {
                let s = status_of(&sets, "victim").await;
                s["shardsRunning"] == 4
                    && s["placement"]["unplaced"] == 0
                    && replicas.await == Some(3)
            }
        },
    )
    .await;
    let jobs: Api<Job> = Api::namespaced(fed.client(MEMBER), &ns.name);
    let shard_jobs = || {
        let jobs = jobs.clone();
        async move {
            let l = jobs
                .list(&ListParams::default().labels("pinterest.com/workload=victim"))
                .await
                .map(|l| l.items)
                .unwrap_or_default();
            l.into_iter()
                .filter(|j| j.metadata.deletion_timestamp.is_none())
                .filter_map(|j| {
                    let shard = j.metadata.labels?.get("pinterest.com/shard")?.clone();
                    Some((shard, j.metadata.uid?))
                })
                .collect::<std::collections::BTreeMap<String, String>>()
        }
    };
    let first = shard_jobs().await;
    assert_eq!(first.len(), 4, "a Job per shard: {first:?}");
    // The hub stops right after a preemptor's decision: only the debt's annotation is left.
    let stopped = daemons.remove(0);
    drop(stopped);
    let id = "5b1e2c3d-0000-4000-8000-00000000d0e7.1";
    let by = format!("PinterestTrainingJob/{}/ghost", ns.name);
    let owed = serde_json::json!({"by": by, "byPriority": 1000, "member": MEMBER,
        "shards": "1-2", "pods": 2, "reason": "room for a gang decided before the hub stopped"});
    let patch = serde_json::json!({"metadata": {"annotations": {
        format!("owed.federation.pinterest.com/{id}"): owed.to_string()}}});
    sets.patch(
        "victim",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await
    .unwrap();
    let service_id = "5b1e2c3d-0000-4000-8000-00000000d0e7.2";
    let owed = serde_json::json!({"by": by, "byPriority": 1000, "member": MEMBER,
        "replicas": 1, "pods": 1, "reason": "room for a gang decided before the hub stopped"});
    let patch = serde_json::json!({"metadata": {"annotations": {
        format!("owed.federation.pinterest.com/{service_id}"): owed.to_string()}}});
    services
        .patch(
            "steady",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .unwrap();
    daemons.insert(0, support::spawn_hub(fed, "hub-priority-again", &[]));
    let logs = [&daemons[0]];
    eventually_logged(
        Duration::from_secs(60),
        "the victim recording the eviction it owed, and the annotation gone",
        &logs,
        || {
            let sets = sets.clone();
            async move {
                let Ok(v) = sets.get("victim").await else {
                    return false;
                };
                let st = serde_json::to_value(&v).unwrap()["status"].clone();
                let annotated = v
                    .metadata
                    .annotations
                    .unwrap_or_default()
                    .keys()
                    .any(|k| k.starts_with("owed.federation.pinterest.com/"));
                !annotated && preemptions(&st).iter().any(|p| p["id"] == id)
            }
        },
    )
    .await;
    let st = status_of(&sets, "victim").await;
    let taken = preemptions(&st);
    assert_eq!(taken.len(), 1, "applied once: {st}");
    assert_eq!(
        (&taken[0]["by"], &taken[0]["shards"], &taken[0]["cluster"]),
        (
            &serde_json::json!(by),
            &serde_json::json!("1-2"),
            &serde_json::json!(MEMBER)
        ),
        "{st}"
    );
    let preempted_note = |name: &'static str| {
        let (hub, ns) = (hub.clone(), ns.name.clone());
        async move {
            support::events(&hub, Some(&ns))
                .await
                .into_iter()
                .find(|e| e.reason == "Preempted" && e.name == name)
                .map(|e| e.note)
        }
    };
    eventually_logged(
        Duration::from_secs(30),
        "a Preempted Warning on the job set and on the service",
        &logs,
        || {
            let (a, b) = (preempted_note("victim"), preempted_note("steady"));
            async move { a.await.is_some() && b.await.is_some() }
        },
    )
    .await;
    // The service gave up the replica it owed (the Event says what it was left with) and
    // says so in its status.
    let note = preempted_note("steady").await.unwrap_or_default();
    assert!(
        note.starts_with(&format!("1 replicas in {MEMBER} preempted by {by}"))
            && note.contains(&format!("now {MEMBER} 2 (1 unplaced")),
        "{note}"
    );
    let svc = status_of(&services, "steady").await;
    let taken = preemptions(&svc);
    assert_eq!(
        (taken.len(), &taken[0]["replicas"], &taken[0]["id"]),
        (1, &serde_json::json!(1), &serde_json::json!(service_id)),
        "{svc}"
    );
    // Nothing takes the room (the preemptor is a ghost): the service grows back.
    eventually_logged(
        WAIT,
        "the service back to 3 replicas in the member, all placed",
        &logs,
        || {
            let services = services.clone();
            let replicas = replicas_in_member();
            async move {
                let s = status_of(&services, "steady").await;
                s["placement"]["unplaced"] == 0 && replicas.await == Some(3)
            }
        },
    )
    .await;
    // The evicted shards went back to pending and run again (new Jobs); the others kept
    // running untouched.
    eventually_logged(
        WAIT,
        "shards 1 and 2 running again in new Jobs, 0 and 3 in theirs",
        &logs,
        || {
            let first = first.clone();
            let now = shard_jobs();
            async move {
                let now = now.await;
                now.len() == 4
                    && ["0", "3"].iter().all(|s| now.get(*s) == first.get(*s))
                    && ["1", "2"].iter().all(|s| now.get(*s) != first.get(*s))
            }
        },
    )
    .await;
    let st = status_of(&sets, "victim").await;
    assert_eq!(preemptions(&st).len(), 1, "never applied again: {st}");
    ns.delete_and_wait(WAIT).await;
}

/// use1a: the queue, preemption of the fewest shards, the class on the member's pods, and
/// every shard completing once.
async fn in_the_push_member(fed: &Federation, logs: &[&Daemon]) {
    let hub = fed.hub();
    let tag = support::unique_name("prio");
    let classes = Classes::create(
        fed,
        "hub",
        &tag,
        &[
            ("low", 100, false),
            ("high", 1000, false),
            ("polite", 1500, true),
            ("urgent", 1600, true),
        ],
    )
    .await;
    // The member's admins accept the high class only: it goes on the gang's pods there,
    // the low one (not in the member) stays off the shards' pods.
    let member_classes = Classes::create(fed, MEMBER, &tag, &[("high", 1000, false)]).await;
    let class = |c: &str| format!("{tag}-{c}");
    let ns = TestNamespace::create(&hub, "prio").await;
    let _guard = NamespaceGuard(ns.name.clone());
    let sets: Api<PinterestJobSet> = Api::namespaced(hub.clone(), &ns.name);
    let services: Api<PinterestService> = Api::namespaced(hub.clone(), &ns.name);
    let gangs: Api<PinterestTrainingJob> = Api::namespaced(hub.clone(), &ns.name);

    // An unknown class: held Invalid, naming the field.
    sets.create(
        &PostParams::default(),
        &job_set("unknown", Some("no-such-class"), 1, "10m", "1s"),
    )
    .await
    .unwrap();

    // Fill the member: 8 low-priority shards of 3 cpu (two on each 8-cpu node) that run
    // 40 s, and a low-priority service of two small replicas.
    sets.create(
        &PostParams::default(),
        &job_set("batch", Some(&class("low")), 8, "3", "30s"),
    )
    .await
    .unwrap();
    let web: PinterestService = serde_json::from_value(serde_json::json!({
        "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestService",
        "metadata": {"name": "web"},
        "spec": {"owner": owner(), "priorityClassName": class("low"), "replicas": 2,
            "placement": placement(), "template": pod("250m", "1s")}
    }))
    .unwrap();
    services.create(&PostParams::default(), &web).await.unwrap();
    eventually_logged(WAIT, "8 shards running in the member", logs, || {
        let sets = sets.clone();
        async move {
            let s = status_of(&sets, "batch").await;
            s["shardsRunning"] == 8 && s["placement"]["unplaced"] == 0
        }
    })
    .await;
    let st = status_of(&sets, "unknown").await;
    let invalid = st["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Invalid" && c["status"] == "True")
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(
        invalid.contains("spec.priorityClassName") && invalid.contains("no-such-class"),
        "an unknown class is held Invalid naming the field: {st}"
    );

    // Equal priority never preempts; a class that says Never only queues.
    sets.create(
        &PostParams::default(),
        &job_set("batch2", Some(&class("low")), 1, "3", "1s"),
    )
    .await
    .unwrap();
    sets.create(
        &PostParams::default(),
        &job_set("polite", Some(&class("polite")), 1, "5", "1s"),
    )
    .await
    .unwrap();
    sets.create(
        &PostParams::default(),
        &job_set("urgent", Some(&class("urgent")), 1, "5", "1s"),
    )
    .await
    .unwrap();
    eventually_logged(
        Duration::from_secs(30),
        "batch2, polite and urgent waiting in the queue, in priority order",
        logs,
        || {
            let sets = sets.clone();
            async move {
                let p = |n: &'static str| {
                    let sets = sets.clone();
                    async move { queue_position(&status_of(&sets, n).await) }
                };
                match (p("urgent").await, p("polite").await, p("batch2").await) {
                    (Some(u), Some(po), Some(b)) => u < po && po < b,
                    _ => false,
                }
            }
        },
    )
    .await;
    let st = status_of(&sets, "urgent").await;
    assert!(
        st["placement"]["queue"]["waitingFor"]
            .as_str()
            .is_some_and(|w| !w.is_empty()),
        "a waiting workload says what it waits for: {st}"
    );
    assert_eq!(st["placement"]["queue"]["priority"], 1600, "{st}");
    assert!(
        preemptions(&status_of(&sets, "batch").await).is_empty(),
        "neither an equal priority nor a Never class preempts"
    );

    // A high-priority gang of two 4.5-cpu pods: only one shard off each of two nodes makes
    // room (every node holds 6 of 8 cpu).
    let gang: PinterestTrainingJob = serde_json::from_value(serde_json::json!({
        "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestTrainingJob",
        "metadata": {"name": "gang"},
        "spec": {"owner": owner(), "priorityClassName": class("high"), "framework": "pytorch",
            "placement": placement(),
            "replicaSpecs": {"Master": {"replicas": 1, "template": pod("4500m", "600s")},
                             "Worker": {"replicas": 1, "template": pod("4500m", "600s")}}}
    }))
    .unwrap();
    gangs.create(&PostParams::default(), &gang).await.unwrap();
    eventually_logged(WAIT, "the gang placed whole on the member", logs, || {
        let gangs = gangs.clone();
        async move {
            let s = status_of(&gangs, "gang").await;
            s["placement"]["unplaced"] == 0
                && s["placement"]["placements"]
                    .as_array()
                    .is_some_and(|p| p.len() == 1 && p[0]["cluster"] == MEMBER)
        }
    })
    .await;
    eventually_logged(
        Duration::from_secs(30),
        "the job set recording its preemption",
        logs,
        || {
            let sets = sets.clone();
            async move { !preemptions(&status_of(&sets, "batch").await).is_empty() }
        },
    )
    .await;
    let st = status_of(&sets, "batch").await;
    let taken = preemptions(&st);
    assert_eq!(taken.len(), 1, "one preemption, of one workload: {st}");
    let p = &taken[0];
    assert_eq!(p["cluster"], MEMBER, "{p}");
    assert_eq!(
        p["pods"], 2,
        "the fewest shards: one off each of two nodes: {p}"
    );
    assert_eq!(
        p["by"],
        format!("PinterestTrainingJob/{}/gang", ns.name),
        "{p}"
    );
    assert_eq!(p["byPriority"], 1000, "{p}");
    let evicted = p["shards"].as_str().unwrap_or_default().to_string();
    assert!(!evicted.is_empty(), "the shards taken are named: {p}");
    // An Event on each: the victim's Warning says by whom, the preemptor's what it took.
    eventually_logged(
        Duration::from_secs(30),
        "a Preempted Warning on the job set and a Preempting Event on the gang",
        logs,
        || async {
            let seen = support::events(&hub, Some(&ns.name)).await;
            let on = |reason: &str, name: &str| {
                seen.iter().any(|e| e.reason == reason && e.name == name)
            };
            on("Preempted", "batch") && on("Preempting", "gang")
        },
    )
    .await;
    let web_st = status_of(&services, "web").await;
    assert!(
        preemptions(&web_st).is_empty(),
        "shards go before service replicas: {web_st}"
    );
    for n in ["polite", "urgent", "batch2"] {
        assert!(
            preemptions(&status_of(&sets, n).await).is_empty(),
            "{n} was never a victim"
        );
    }
    // The gang's pods run in the member once the shards' pods are gone.
    let member = fed.client(MEMBER);
    let jobs: Api<Job> = Api::namespaced(member.clone(), &ns.name);
    eventually_logged(
        WAIT,
        "the gang's two pods running in the member",
        logs,
        || {
            let jobs = jobs.clone();
            async move {
                jobs.list(&ListParams::default().labels("pinterest.com/workload=gang"))
                    .await
                    .is_ok_and(|l| {
                        l.items
                            .iter()
                            .map(|j| j.status.as_ref().and_then(|s| s.active).unwrap_or(0))
                            .sum::<i32>()
                            == 2
                    })
            }
        },
    )
    .await;

    let class_of = |jobs: Vec<Job>| -> Vec<Option<String>> {
        jobs.into_iter()
            .map(|j| j.spec?.template.spec?.priority_class_name)
            .collect()
    };
    let gang_jobs = jobs
        .list(&ListParams::default().labels("pinterest.com/workload=gang"))
        .await
        .unwrap()
        .items;
    assert_eq!(
        class_of(gang_jobs),
        vec![Some(class("high")); 2],
        "the class goes on the pods where the member has it"
    );
    let batch_jobs = jobs
        .list(&ListParams::default().labels("pinterest.com/workload=batch"))
        .await
        .unwrap()
        .items;
    assert!(
        !batch_jobs.is_empty() && class_of(batch_jobs).iter().all(Option::is_none),
        "a class the member does not have stays off its pods"
    );

    // The gang finishes (deleted here): its room goes to the waiting, the preempted
    // shards run again, and every shard completes once.
    gangs
        .delete("gang", &DeleteParams::default())
        .await
        .unwrap();
    eventually_logged(
        Duration::from_secs(180),
        "every shard of the job set completed, and the queue emptied",
        logs,
        || {
            let sets = sets.clone();
            async move {
                let b = status_of(&sets, "batch").await;
                let mut all_placed = true;
                for n in ["batch2", "polite", "urgent"] {
                    let s = status_of(&sets, n).await;
                    all_placed &= s["placement"]["unplaced"] == 0 && queue_position(&s).is_none();
                }
                b["completedShards"] == "0-7" && all_placed
            }
        },
    )
    .await;
    // Placed in queue order: urgent (1600) before polite (1500), which asks for the same
    // room (a smaller, lower one may backfill room neither fits, by design).
    let placed_at = |name: &str| first_placed_line(logs[0], &ns.name, name);
    let (u, p) = (placed_at("urgent"), placed_at("polite"));
    assert!(
        matches!((u, p), (Some(u), Some(p)) if u < p),
        "urgent placed before polite (hub log lines {u:?}, {p:?})"
    );
    let b = status_of(&sets, "batch").await;
    assert_eq!(b["shardsSucceeded"], 8, "each shard completed once: {b}");
    // One Job per shard in the member, each succeeded once: the preempted shards' first
    // Jobs are gone, their second ran to completion.
    let listed = jobs
        .list(&ListParams::default().labels("pinterest.com/workload=batch"))
        .await
        .unwrap();
    let mut shards: Vec<String> = listed
        .items
        .iter()
        .filter_map(|j| {
            j.metadata
                .labels
                .as_ref()?
                .get("pinterest.com/shard")
                .cloned()
        })
        .collect();
    shards.sort();
    let before = shards.len();
    shards.dedup();
    assert_eq!(before, shards.len(), "no shard has two Jobs: {shards:?}");
    for j in &listed.items {
        assert_eq!(
            j.status.as_ref().and_then(|s| s.succeeded),
            Some(1),
            "{:?} succeeded once",
            j.metadata.name
        );
    }

    ns.delete_and_wait(WAIT).await;
    drop(classes);
    drop(member_classes);
}

/// A pod of `gpus` GPUs on the pull member's tainted GPU pool, running `run_for`.
fn gpu_pod(gpus: u32, run_for: &str) -> serde_json::Value {
    serde_json::json!({
        "metadata": {"annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": run_for}},
        "spec": {
            "nodeSelector": {"pinterest.com/pool": "gpu"},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
            "containers": [{"name": "train", "image": "registry.example/train:1",
                "resources": {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": gpus},
                              "limits": {"nvidia.com/gpu": gpus}}}]}
    })
}

/// use1c, a pull member (the hub never connects to it): four low-priority shards of 4
/// GPUs fill its two GPU nodes; a high-priority job set of one 8-GPU shard is placed by
/// preempting the two shards of one node — victims chosen from the pods its agent reports.
async fn in_the_pull_member(fed: &Federation, logs: &[&Daemon]) {
    let hub = fed.hub();
    let tag = support::unique_name("pprio");
    let classes = Classes::create(
        fed,
        "hub",
        &tag,
        &[("low", 100, false), ("high", 1000, false)],
    )
    .await;
    let class = |c: &str| format!("{tag}-{c}");
    let ns = TestNamespace::create(&hub, "pprio").await;
    let _guard = NamespaceGuard(ns.name.clone());
    let sets: Api<PinterestJobSet> = Api::namespaced(hub.clone(), &ns.name);
    let on_pull = serde_json::json!({"clusterAffinity": {"clusterNames": [PULL_MEMBER]}});
    let gpu_set =
        |name: &str, class: String, shards: i32, gpus: u32, run_for: &str| -> PinterestJobSet {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestJobSet",
                "metadata": {"name": name},
                "spec": {"owner": owner(), "priorityClassName": class, "shards": shards,
                    "placement": on_pull, "template": gpu_pod(gpus, run_for)}
            }))
            .unwrap()
        };
    sets.create(
        &PostParams::default(),
        &gpu_set("fill", class("low"), 4, 4, "600s"),
    )
    .await
    .unwrap();
    eventually_logged(
        WAIT,
        "4 GPU shards running in the pull member",
        logs,
        || {
            let sets = sets.clone();
            async move {
                let s = status_of(&sets, "fill").await;
                s["shardsRunning"] == 4 && s["placement"]["unplaced"] == 0
            }
        },
    )
    .await;
    // The victims are chosen from the pods the pull agent reports (every ~10 s, later
    // than the slices' status): the report holds the four pods first.
    // (A preemption decided on an older view takes too few victims; see the closing note
    // of stop 57.)
    let fill = format!("PinterestJobSet/{}/fill", ns.name);
    let reports: Api<pinfed::api::member_slice::MemberReport> =
        Api::namespaced(hub.clone(), &format!("pinfed-member-{PULL_MEMBER}"));
    eventually_logged(
        WAIT,
        "the pull agent's report holds the four GPU pods",
        logs,
        || {
            let reports = reports.clone();
            let fill = fill.clone();
            async move {
                let Ok(list) = reports.list(&Default::default()).await else {
                    return false;
                };
                let pods: i32 = list
                    .items
                    .iter()
                    .filter_map(|r| r.status.as_ref()?.report.as_ref())
                    .flat_map(|r| &r.node_pools)
                    .flat_map(|p| &p.nodes)
                    .flat_map(|n| &n.workloads)
                    .filter(|w| w.workload == fill)
                    .map(|w| w.pods)
                    .sum();
                pods == 4
            }
        },
    )
    .await;
    // (The hub reads the report at its next heartbeat, a second here.)
    tokio::time::sleep(Duration::from_secs(2)).await;
    sets.create(
        &PostParams::default(),
        &gpu_set("whole-node", class("high"), 1, 8, "600s"),
    )
    .await
    .unwrap();
    eventually_logged(
        WAIT,
        "the 8-GPU shard placed in the pull member by preempting two shards of one node",
        logs,
        || {
            let sets = sets.clone();
            async move {
                let s = status_of(&sets, "whole-node").await;
                s["placement"]["unplaced"] == 0
                    && !preemptions(&status_of(&sets, "fill").await).is_empty()
            }
        },
    )
    .await;
    let st = status_of(&sets, "fill").await;
    let taken = preemptions(&st);
    assert_eq!(taken.len(), 1, "one preemption: {st}");
    assert_eq!(taken[0]["cluster"], PULL_MEMBER, "{st}");
    assert_eq!(
        taken[0]["pods"], 2,
        "the two shards of one node, no more: {st}"
    );
    assert_eq!(taken[0]["byPriority"], 1000, "{st}");
    // The member (read here with the topology's admin credential; the hub has none) runs
    // the preemptor once the victims' Jobs are gone, and two of the four shards.
    let jobs: Api<Job> = Api::namespaced(fed.client(PULL_MEMBER), &ns.name);
    eventually_logged(
        WAIT,
        "the 8-GPU shard running in the pull member",
        logs,
        || {
            let jobs = jobs.clone();
            async move {
                let active = |w: &'static str| {
                    let jobs = jobs.clone();
                    async move {
                        jobs.list(
                            &ListParams::default().labels(&format!("pinterest.com/workload={w}")),
                        )
                        .await
                        .map(|l| {
                            l.items
                                .iter()
                                .map(|j| j.status.as_ref().and_then(|s| s.active).unwrap_or(0))
                                .sum::<i32>()
                        })
                        .unwrap_or(-1)
                    }
                };
                active("whole-node").await == 1 && active("fill").await == 2
            }
        },
    )
    .await;
    let st = status_of(&sets, "fill").await;
    assert_eq!(
        st["placement"]["unplaced"], 2,
        "the preempted shards wait: {st}"
    );
    ns.delete_and_wait(WAIT).await;
    drop(classes);
}
