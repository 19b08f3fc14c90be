//! The chaos run, reduced for CI (issue "Trust", part 8): workloads of all six kinds rolled
//! out through two hubs sharing a Lease while the leader is SIGKILLed again and again
//! (and restarted as the new standby) and a member's API server is stopped and started.
//! At the end, asked of the real API servers:
//! - every workload's slices are exactly where its placement says, none twice, none left
//!   anywhere else (no slice whose hub workload is gone);
//! - no native object in a member without the slice (or CronJob) that owns it;
//! - no pending clean-up left on any MemberCluster;
//! - every job set complete, every service, stateful set and daemon Ready;
//! - no job-set shard completed twice; a completion cut off by a member's restart (its
//!   Job finished there before the fence arrived) is counted and named, as the spec allows.
//!
//! Knobs (the bench-sized run on clusters/bench.yaml sets them larger):
//! PINFED_CHAOS_WORKLOADS (default 100), PINFED_CHAOS_KILLS (3),
//! PINFED_CHAOS_MEMBER_RESTARTS (1 per chosen member), PINFED_CHAOS_RESTART_MEMBERS (1),
//! PINFED_CHAOS_SETTLE_SECS (300: how long the federation may take to converge after the
//! chaos), PINFED_CHAOS_MEMBER_GRACE_SECS (6: the hubs' --member-grace-secs),
//! PINFED_CHAOS_LEASE_SECS (4: the hubs' --lease-duration-secs), PINFED_CHAOS_SHARD_SECS
//! (8: how long each job-set shard runs).
//! Destructive: the README's test command runs it after every other test.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::ApiResource;
use pinfed::api::federation::MemberCluster;
use pinfed::api::member_slice::LABEL_HUB_UID;
use pinfed::api::workload::WorkloadKind;
use serde_json::{Value, json};
use support::{
    Daemon, Federation, TestNamespace, eventually, join_all, run_harness, spawn_daemon, unique_name,
};

fn knob(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn hub_args(fed: &Federation, identity: &str, lease: &str) -> Vec<String> {
    let lease_secs = knob("PINFED_CHAOS_LEASE_SECS", 4).to_string();
    let grace = knob("PINFED_CHAOS_MEMBER_GRACE_SECS", 6).to_string();
    fed.hub_args(&[
        "--heartbeat-secs",
        "1",
        "--member-grace-secs",
        grace.as_str(),
        "--failback-window-secs",
        "15",
        "--lease-duration-secs",
        lease_secs.as_str(),
        "--lease-name",
        lease,
        "--identity",
        identity,
    ])
    .expect("a free loopback port")
}

fn container(cpu: &str) -> Value {
    json!({"name": "c", "image": "registry.example/chaos:1",
           "resources": {"requests": {"cpu": cpu, "memory": "8Mi"}}})
}

/// Workload `i` of the mix: half services, a fifth job sets, the rest spread over the
/// other four kinds.
fn workload(i: usize) -> (WorkloadKind, Value) {
    let owner = json!({"team": "chaos", "contact": "chaos@pinterest.com"});
    let pod = json!({"spec": {"containers": [container("5m")]}});
    let (kind, spec) = match i % 10 {
        0..=4 => (
            WorkloadKind::Service,
            json!({"owner": owner, "replicas": 3, "placement": {"spread": {"minClusters": 2}},
                   "template": pod}),
        ),
        5 | 6 => {
            // How long each shard runs (PINFED_CHAOS_SHARD_SECS; 0: it succeeds at once).
            // Long enough to be running through a leader kill: a new leader that found
            // no recorded decision (its predecessor's status write was still waiting)
            // once placed afresh and moved running shards between healthy members, which
            // then ran them twice (1 run in 5 before the hand-off and the plan from the
            // slices out there).
            let secs = knob("PINFED_CHAOS_SHARD_SECS", 8);
            let meta = if secs > 0 {
                json!({"annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": format!("{secs}s")}})
            } else {
                json!({})
            };
            (
                WorkloadKind::JobSet,
                json!({"owner": owner, "shards": 6, "parallelism": 3,
                       "template": {"metadata": meta, "spec": {"containers": [container("5m")]}}}),
            )
        }
        7 => (
            WorkloadKind::CronJob,
            json!({"owner": owner, "schedule": "*/5 * * * *", "template": pod}),
        ),
        8 if i % 20 == 8 => (
            WorkloadKind::Daemon,
            json!({"owner": owner, "template": {"spec": {"tolerations": [{"operator": "Exists"}],
                   "containers": [container("1m")]}}}),
        ),
        8 => (
            WorkloadKind::StatefulSet,
            json!({"owner": owner, "replicas": 2, "template": pod}),
        ),
        _ => (
            WorkloadKind::TrainingJob,
            json!({"owner": owner, "framework": "pytorch",
                   "replicaSpecs": {"Master": {"replicas": 1, "template": pod.clone()},
                                    "Worker": {"replicas": 2, "template": pod}}}),
        ),
    };
    let obj = json!({
        "apiVersion": "compute.pinterest.com/v1alpha1",
        "kind": kind.as_str(),
        "metadata": {"name": format!("{}-{i:04}", kind.as_str().to_lowercase().trim_start_matches("pinterest"))},
        "spec": spec,
    });
    (kind, obj)
}

fn api(client: &Client, ns: &str, kind: WorkloadKind) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &pinfed::api::kind::api_resource(kind))
}

async fn holder(leases: &Api<Lease>, lease: &str) -> Option<String> {
    leases
        .get_opt(lease)
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec?.holder_identity)
}

/// The hub workloads of the namespace: uid → (kind/name, clusters with a share).
async fn placements(
    hub: &Client,
    ns: &str,
) -> Option<BTreeMap<String, (String, BTreeSet<String>)>> {
    let mut out = BTreeMap::new();
    for kind in WorkloadKind::ALL {
        for o in api(hub, ns, kind)
            .list(&ListParams::default())
            .await
            .ok()?
            .items
        {
            let clusters: BTreeSet<String> = o.data["status"]["placement"]["placements"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| {
                    p["replicas"].as_i64().is_none_or(|r| r > 0)
                        && p["shards"].as_str().is_none_or(|s| !s.is_empty())
                })
                .filter_map(|p| p["cluster"].as_str().map(str::to_string))
                .collect();
            out.insert(
                o.uid().unwrap_or_default(),
                (format!("{}/{}", kind.as_str(), o.name_any()), clusters),
            );
        }
    }
    Some(out)
}

/// Slices in each member: hub uid → members holding one (a member twice is a duplicate).
async fn slices(
    fed: &Federation,
    ns: &str,
) -> Option<(
    BTreeMap<String, Vec<String>>,
    BTreeMap<String, BTreeSet<String>>,
)> {
    let mut by_hub_uid: BTreeMap<String, Vec<String>> = BTreeMap::new();
    // Per member, the uids of its own slices (owners of native objects).
    let mut member_uids: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for m in fed.member_names() {
        for kind in WorkloadKind::ALL {
            let lp = ListParams::default().labels(LABEL_HUB_UID);
            for o in api(&fed.client(&m), ns, kind).list(&lp).await.ok()?.items {
                let hub_uid = o.labels().get(LABEL_HUB_UID).cloned().unwrap_or_default();
                by_hub_uid.entry(hub_uid).or_default().push(m.clone());
                member_uids
                    .entry(m.clone())
                    .or_default()
                    .insert(o.uid().unwrap_or_default());
            }
        }
    }
    Some((by_hub_uid, member_uids))
}

/// Differences between where the hub placed each workload and where its slices are.
fn slice_problems(
    want: &BTreeMap<String, (String, BTreeSet<String>)>,
    got: &BTreeMap<String, Vec<String>>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (uid, (name, clusters)) in want {
        let have = got.get(uid).cloned().unwrap_or_default();
        let set: BTreeSet<String> = have.iter().cloned().collect();
        if set.len() != have.len() {
            out.push(format!("{name}: a slice twice in one member: {have:?}"));
        }
        if &set != clusters {
            out.push(format!("{name}: placed on {clusters:?}, slices in {set:?}"));
        }
    }
    for (uid, members) in got {
        if !want.contains_key(uid) {
            out.push(format!(
                "a slice of a workload the hub does not have (uid {uid}) in {members:?}"
            ));
        }
    }
    out
}

/// Native objects pinfed generated in the members whose owner (a slice, or the CronJob
/// that made a Job) is not there.
async fn orphans(
    fed: &Federation,
    ns: &str,
    member_uids: &BTreeMap<String, BTreeSet<String>>,
) -> Option<Vec<String>> {
    use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
    use k8s_openapi::api::batch::v1::{CronJob, Job};
    let lp = ListParams::default().labels("app.kubernetes.io/managed-by=pinfed");
    let mut out = Vec::new();
    for m in fed.member_names() {
        let c = fed.client(&m);
        let mut owners = member_uids.get(&m).cloned().unwrap_or_default();
        let mut objects: Vec<(String, Vec<String>)> = Vec::new();
        let ars = [
            ApiResource::erase::<Deployment>(&()),
            ApiResource::erase::<StatefulSet>(&()),
            ApiResource::erase::<DaemonSet>(&()),
            ApiResource::erase::<CronJob>(&()),
            ApiResource::erase::<Job>(&()),
        ];
        for ar in &ars {
            for o in Api::<DynamicObject>::namespaced_with(c.clone(), ns, ar)
                .list(&lp)
                .await
                .ok()?
                .items
            {
                if ar.kind == "CronJob" {
                    owners.insert(o.uid().unwrap_or_default());
                }
                let refs = o
                    .metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .map(|r| r.uid.clone())
                    .collect();
                objects.push((format!("{m}: {} {}", ar.kind, o.name_any()), refs));
            }
        }
        for (name, refs) in objects {
            if !refs.iter().any(|u| owners.contains(u)) {
                out.push(name);
            }
        }
    }
    Some(out)
}

/// What a shard completed twice went through: each member's Job for it (created,
/// completed) and the hub's Events for its job set, so a failure says how it happened.
async fn shard_story(fed: &Federation, ns: &str, set: &str, shard: &str) -> String {
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::Event;
    let mut out = Vec::new();
    for m in fed.member_names() {
        let jobs: Api<Job> = Api::namespaced(fed.client(&m), ns);
        let lp = ListParams::default().labels(&format!(
            "{}={set},{}={shard}",
            pinfed::api::common::LABEL_WORKLOAD,
            pinfed::api::common::LABEL_SHARD
        ));
        for j in jobs.list(&lp).await.map(|l| l.items).unwrap_or_default() {
            let st = j.status.clone().unwrap_or_default();
            out.push(format!(
                "{m}: Job {} created {:?} started {:?} completed {:?} succeeded {:?}",
                j.name_any(),
                j.metadata.creation_timestamp.map(|t| t.0.to_string()),
                st.start_time.map(|t| t.0.to_string()),
                st.completion_time.map(|t| t.0.to_string()),
                st.succeeded
            ));
        }
    }
    let events: Api<Event> = Api::namespaced(fed.hub(), ns);
    let lp = ListParams::default().fields(&format!("involvedObject.name={set}"));
    let mut evs = events.list(&lp).await.map(|l| l.items).unwrap_or_default();
    evs.sort_by_key(|e| e.last_timestamp.clone().map(|t| t.0));
    for e in evs {
        out.push(format!(
            "hub event {:?} {} {}",
            e.last_timestamp.map(|t| t.0.to_string()),
            e.reason.unwrap_or_default(),
            e.message.unwrap_or_default()
        ));
    }
    out.join("\n")
}

/// Where a workload that never settled stands: its hub status, each member's slice
/// (shards, epoch, generation against observed, status), that member's fence Lease and
/// a job set's Jobs, a pull member's MemberSlice report, and what the hubs logged of it.
async fn workload_story(
    fed: &Federation,
    ns: &str,
    kind: WorkloadKind,
    set: &str,
    hub_logs: &[(String, std::path::PathBuf)],
) -> String {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::{Node, Pod};
    use pinfed::api::member_slice::MemberSlice;
    let mut out = Vec::new();
    let hub_obj = api(&fed.hub(), ns, kind).get_opt(set).await.ok().flatten();
    out.push(format!(
        "hub: generation {:?} status {}",
        hub_obj.as_ref().and_then(|o| o.metadata.generation),
        hub_obj
            .as_ref()
            .map(|o| o.data["status"].to_string())
            .unwrap_or_default()
    ));
    for m in fed.member_names() {
        let c = fed.client(&m);
        let lease = Api::<Lease>::namespaced(c.clone(), pinfed::controller::fence::FENCE_NAMESPACE)
            .get_opt(pinfed::controller::fence::FENCE_LEASE)
            .await
            .ok()
            .flatten();
        out.push(format!(
            "{m}: fence epoch {:?} renewed {:?} for {:?}s",
            lease.as_ref().and_then(|l| l
                .annotations()
                .get(pinfed::controller::fence::ANNOTATION_MEMBER_EPOCH)
                .cloned()),
            lease.as_ref().and_then(|l| l
                .spec
                .as_ref()?
                .renew_time
                .as_ref()
                .map(|t| t.0.to_string())),
            lease
                .as_ref()
                .and_then(|l| l.spec.as_ref()?.lease_duration_seconds),
        ));
        match api(&c, ns, kind).get_opt(set).await {
            Ok(Some(o)) => out.push(format!(
                "{m}: slice generation {:?} epoch {:?} shards {} status {}",
                o.metadata.generation,
                o.annotations()
                    .get(pinfed::controller::fence::ANNOTATION_MEMBER_EPOCH),
                o.data["spec"]["shards"],
                o.data["status"]
            )),
            Ok(None) => out.push(format!("{m}: no slice")),
            Err(e) => out.push(format!("{m}: slice unreadable: {e}")),
        }
        let lp =
            ListParams::default().labels(&format!("{}={set}", pinfed::api::common::LABEL_WORKLOAD));
        for j in Api::<Job>::namespaced(c.clone(), ns)
            .list(&lp)
            .await
            .map(|l| l.items)
            .unwrap_or_default()
        {
            let st = j.status.clone().unwrap_or_default();
            out.push(format!(
                "{m}: Job {} active {:?} succeeded {:?} failed {:?}",
                j.name_any(),
                st.active,
                st.succeeded,
                st.failed
            ));
        }
        // What runs it there: a service that never settled once had Deployments in a
        // restarted member whose pods stayed unready, and nothing said why.
        for d in Api::<Deployment>::namespaced(c.clone(), ns)
            .list(&lp)
            .await
            .map(|l| l.items)
            .unwrap_or_default()
        {
            let st = d.status.clone().unwrap_or_default();
            out.push(format!(
                "{m}: Deployment {} generation {:?} observed {:?} replicas {:?} updated {:?} ready {:?} available {:?} conditions {}",
                d.name_any(),
                d.metadata.generation,
                st.observed_generation,
                st.replicas,
                st.updated_replicas,
                st.ready_replicas,
                st.available_replicas,
                serde_json::to_string(&st.conditions).unwrap_or_default()
            ));
        }
        for p in Api::<Pod>::namespaced(c.clone(), ns)
            .list(&lp)
            .await
            .map(|l| l.items)
            .unwrap_or_default()
        {
            let st = p.status.clone().unwrap_or_default();
            out.push(format!(
                "{m}: Pod {} node {:?} phase {:?} conditions {}",
                p.name_any(),
                p.spec.as_ref().and_then(|s| s.node_name.clone()),
                st.phase,
                st.conditions
                    .iter()
                    .flatten()
                    .map(|c| format!("{}={}", c.type_, c.status))
                    .collect::<Vec<_>>()
                    .join(",")
            ));
        }
        let nodes = Api::<Node>::all(c.clone())
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        out.push(format!(
            "{m}: nodes {}",
            nodes
                .iter()
                .map(|n| {
                    let ready = n
                        .status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
                        .map(|c| c.status.clone())
                        .unwrap_or_default();
                    format!("{}:{ready}", n.name_any())
                })
                .collect::<Vec<_>>()
                .join(",")
        ));
        if fed.is_pull(&m) {
            let name = pinfed::api::member_slice::member_slice_name(kind, ns, set);
            let ms = Api::<MemberSlice>::namespaced(
                fed.hub(),
                &pinfed::api::member_slice::pull_namespace(&m),
            )
            .get_opt(&name)
            .await
            .ok()
            .flatten();
            out.push(format!(
                "{m}: MemberSlice generation {:?} report {}",
                ms.as_ref().and_then(|s| s.metadata.generation),
                ms.as_ref()
                    .map(|s| serde_json::to_string(&s.status).unwrap_or_default())
                    .unwrap_or_default()
            ));
        }
    }
    for (id, log) in hub_logs {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().filter(|l| l.contains(set)).collect();
        for line in &lines[lines.len().saturating_sub(8)..] {
            out.push(format!("{id}: {line}"));
        }
    }
    out.join("\n")
}

/// Shards whose Job completed in more than one member: (job set, shard, members).
async fn shards_completed_twice(fed: &Federation, ns: &str) -> Vec<(String, String, Vec<String>)> {
    use k8s_openapi::api::batch::v1::Job;
    let mut done: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for m in fed.member_names() {
        let jobs: Api<Job> = Api::namespaced(fed.client(&m), ns);
        let lp = ListParams::default().labels(pinfed::api::common::LABEL_SHARD);
        for j in jobs.list(&lp).await.map(|l| l.items).unwrap_or_default() {
            let succeeded = j.status.as_ref().and_then(|s| s.succeeded).unwrap_or(0) > 0;
            if !succeeded {
                continue;
            }
            let labels = j.labels();
            let set = labels
                .get(pinfed::api::common::LABEL_WORKLOAD)
                .cloned()
                .unwrap_or_default();
            let shard = labels
                .get(pinfed::api::common::LABEL_SHARD)
                .cloned()
                .unwrap_or_default();
            done.entry((set, shard)).or_default().push(m.clone());
        }
    }
    done.into_iter()
        .filter(|(_, ms)| ms.len() > 1)
        .map(|((s, i), ms)| (s, i, ms))
        .collect()
}

#[tokio::test]
async fn destructive_chaos_every_slice_where_its_placement_says_after_kills_and_member_restarts() {
    let n = knob("PINFED_CHAOS_WORKLOADS", 100);
    let kills = knob("PINFED_CHAOS_KILLS", 3);
    let restarts = knob("PINFED_CHAOS_MEMBER_RESTARTS", 1);
    let restart_members = knob("PINFED_CHAOS_RESTART_MEMBERS", 1);
    let fed = Federation::connect().await;
    join_all(&fed);
    let hub = fed.hub();
    let lease = unique_name("chaos-lease");
    let leases: Api<Lease> = Api::namespaced(hub.clone(), support::SYSTEM_NAMESPACE);
    let mut hubs: BTreeMap<String, Daemon> = BTreeMap::new();
    let mut next_id = 0;
    // Every hub's log, the killed ones' too (a failure quotes what each did).
    let mut hub_logs: Vec<(String, std::path::PathBuf)> = Vec::new();
    let mut spawn_hub = |hubs: &mut BTreeMap<String, Daemon>| {
        let id = format!("chaos-hub-{next_id}");
        next_id += 1;
        let d = spawn_daemon(&fed, &id, &hub_args(&fed, &id, &lease));
        hub_logs.push((id.clone(), d.log.clone()));
        hubs.insert(id.clone(), d);
    };
    spawn_hub(&mut hubs);
    spawn_hub(&mut hubs);
    let agents = support::spawn_agents(&fed);
    let ns = TestNamespace::create(&hub, "chaos").await;
    let started = Instant::now();

    // Roll out every workload while the chaos runs.
    let creating = {
        let (hub, ns) = (hub.clone(), ns.name.clone());
        tokio::spawn(async move {
            futures::stream::iter(0..n)
                .map(|i| {
                    let (hub, ns) = (hub.clone(), ns.clone());
                    async move {
                        let (kind, obj) = workload(i);
                        let o: DynamicObject = serde_json::from_value(obj).unwrap();
                        for _ in 0..30 {
                            match api(&hub, &ns, kind)
                                .create(&PostParams::default(), &o)
                                .await
                            {
                                Ok(_) => return,
                                Err(kube::Error::Api(e)) if e.code == 409 => return,
                                Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
                            }
                        }
                        panic!("could not create {}", o.name_any());
                    }
                })
                .buffer_unordered(8)
                .collect::<Vec<_>>()
                .await
        })
    };

    // The chaos: leader kills (each killed hub comes back as a standby) interleaved with
    // member API server restarts.
    // From the last member back: the tests that run after this one use the first ones
    // (a restarted member is "returned" for their hubs' failback window).
    let members: Vec<String> = fed
        .member_names()
        .into_iter()
        .rev()
        .take(restart_members)
        .collect();
    let mut restarts_left: Vec<(String, usize)> =
        members.iter().map(|m| (m.clone(), restarts)).collect();
    let mut killed = 0;
    let mut takeovers = Vec::new();
    let mut member_restarts = Vec::new();
    while killed < kills || restarts_left.iter().any(|(_, r)| *r > 0) {
        tokio::time::sleep(Duration::from_secs(4)).await;
        if killed < kills {
            let Some(leader) = holder(&leases, &lease).await else {
                continue;
            };
            let Some(d) = hubs.remove(&leader) else {
                continue;
            };
            d.kill();
            let at = Instant::now();
            killed += 1;
            spawn_hub(&mut hubs);
            eventually(
                Duration::from_secs(30),
                "a standby takes the lease",
                || async { holder(&leases, &lease).await.is_some_and(|h| h != leader) },
            )
            .await;
            takeovers.push(at.elapsed());
        }
        if let Some((m, left)) = restarts_left.iter_mut().find(|(_, r)| *r > 0) {
            let out = run_harness(&["stop", m]);
            assert!(
                out.status.success(),
                "stop {m}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            tokio::time::sleep(Duration::from_secs(10)).await;
            // A member API server under this load (a thousand workloads' objects to cache
            // again, two hubs and the agents on the same cores) can take minutes to pass
            // /readyz; the harness says which checks still fail if it never does.
            let back = Instant::now();
            let out = run_harness(&["start", m, "--timeout-secs", "600"]);
            assert!(
                out.status.success(),
                "start {m}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            member_restarts.push(back.elapsed());
            *left -= 1;
        }
    }
    creating.await.unwrap();
    let chaos_for = started.elapsed();

    // Then: everything converges, and the invariants hold.
    let last = std::sync::Mutex::new(Vec::<String>::new());
    let settle = knob("PINFED_CHAOS_SETTLE_SECS", 300);
    let converged = eventually(
        Duration::from_secs(settle as u64),
        "slices where their placements say, no orphans, no pending clean-up",
        || async {
            let mut problems = Vec::new();
            let Some(want) = placements(&hub, &ns.name).await else {
                return false;
            };
            if want.len() != n {
                problems.push(format!("{} of {n} workloads on the hub", want.len()));
            }
            for (name, clusters) in want.values() {
                if clusters.is_empty() {
                    problems.push(format!("{name}: not placed"));
                }
            }
            let Some((got, member_uids)) = slices(&fed, &ns.name).await else {
                return false;
            };
            problems.extend(slice_problems(&want, &got));
            let Some(orphaned) = orphans(&fed, &ns.name, &member_uids).await else {
                return false;
            };
            problems.extend(orphaned.into_iter().map(|o| format!("orphan {o}")));
            let mcs = Api::<MemberCluster>::all(hub.clone())
                .list(&ListParams::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default();
            for mc in mcs {
                let pending = mc
                    .status
                    .as_ref()
                    .map(|s| s.pending_cleanups.clone())
                    .unwrap_or_default();
                if !pending.is_empty() {
                    problems.push(format!(
                        "{}: {} pending clean-ups",
                        mc.name_any(),
                        pending.len()
                    ));
                }
            }
            let ok = problems.is_empty();
            *last.lock().unwrap() = problems;
            ok
        },
    );
    if futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(converged))
        .await
        .is_err()
    {
        let problems = last.lock().unwrap().clone();
        let leader = holder(&leases, &lease).await.unwrap_or_default();
        panic!(
            "after the chaos, {} problems: {:#?}\n--- leader {leader} ---\n{}",
            problems.len(),
            &problems[..problems.len().min(20)],
            hubs.get(&leader).map(|d| d.log_tail()).unwrap_or_default()
        );
    }
    let converged_after = started.elapsed() - chaos_for;

    // Every job set finishes, each shard completed once on the hub; completions in two
    // members are the cut-offs the spec allows (a member restarted under a running shard).
    // Every service, stateful set and daemon is Ready again (a slice made again in a
    // member once met its earlier incarnation's Deployment there and reported a conflict).
    let settled_as = [
        (WorkloadKind::JobSet, "Complete"),
        (WorkloadKind::Service, "Ready"),
        (WorkloadKind::StatefulSet, "Ready"),
        (WorkloadKind::Daemon, "Ready"),
    ];
    let unsettled = std::sync::Mutex::new(Vec::<(WorkloadKind, String)>::new());
    let settled = eventually(
        Duration::from_secs(240),
        "every job set complete, every service, stateful set and daemon Ready",
        || async {
            let mut left = Vec::new();
            for (kind, condition) in settled_as {
                let Ok(list) = api(&hub, &ns.name, kind).list(&ListParams::default()).await else {
                    return false;
                };
                left.extend(
                    list.items
                        .iter()
                        .filter(|o| {
                            !pinfed::api::common::find_condition(
                                &serde_json::from_value::<Vec<pinfed::api::common::Condition>>(
                                    o.data["status"]["conditions"].clone(),
                                )
                                .unwrap_or_default(),
                                condition,
                            )
                            .is_some_and(|c| c.status == pinfed::api::common::ConditionStatus::True)
                        })
                        .map(|o| (kind, o.name_any())),
                );
            }
            let done = left.is_empty();
            *unsettled.lock().unwrap() = left;
            done
        },
    );
    if futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(settled))
        .await
        .is_err()
    {
        let left = unsettled.lock().unwrap().clone();
        let mut stories = String::new();
        for (kind, name) in left.iter().take(3) {
            stories.push_str(&format!(
                "--- {kind}/{name} ---\n{}\n",
                workload_story(&fed, &ns.name, *kind, name, &hub_logs).await
            ));
        }
        panic!(
            "after the chaos, {} workloads never settled: {left:?}\n{stories}",
            left.len()
        );
    }
    let twice = shards_completed_twice(&fed, &ns.name).await;
    let restarted: BTreeSet<&String> = members.iter().collect();
    for (set, shard, ms) in &twice {
        if !ms.iter().any(|m| restarted.contains(m)) {
            let story = shard_story(&fed, &ns.name, set, shard).await;
            let mut said = String::new();
            for (id, log) in &hub_logs {
                let text = std::fs::read_to_string(log).unwrap_or_default();
                for line in text.lines().filter(|l| l.contains(set.as_str())) {
                    said.push_str(&format!("{id}: {line}\n"));
                }
            }
            panic!(
                "{set} shard {shard} completed in {ms:?}, none of which was restarted: a shard ran twice\n{story}\n--- what the hubs logged of it ---\n{said}"
            );
        }
    }
    eprintln!(
        "chaos: {n} workloads, {killed} leader kills (takeovers {takeovers:?}), {} member restarts of {members:?} \
         (API server ready again after {member_restarts:?}); chaos {chaos_for:?}, converged {converged_after:?} after; {} shard completions cut off by a restart: {twice:?}",
        restarts * members.len(),
        twice.len()
    );
    // Clean up while the hubs still run: every workload deleted and its slices removed,
    // so the tests after this one start from an empty federation.
    let name = ns.name.clone();
    ns.delete().await;
    eventually(
        Duration::from_secs(240),
        "the chaos workloads deleted",
        || async {
            let Some(left) = placements(&hub, &name).await else {
                return false;
            };
            let Some((slices_left, _)) = slices(&fed, &name).await else {
                return false;
            };
            left.is_empty() && slices_left.is_empty()
        },
    )
    .await;
    drop(agents);
    for (_, d) in hubs {
        d.kill();
    }
    let _ = leases.delete(&lease, &Default::default()).await;
}

#[test]
fn the_slice_check_names_missing_extra_duplicate_and_orphaned_slices() {
    let want: BTreeMap<String, (String, BTreeSet<String>)> = [
        (
            "u1".to_string(),
            (
                "Service/a".to_string(),
                ["m1".to_string(), "m2".to_string()].into(),
            ),
        ),
        (
            "u2".to_string(),
            ("JobSet/b".to_string(), ["m1".to_string()].into()),
        ),
    ]
    .into();
    let fine: BTreeMap<String, Vec<String>> = [
        ("u1".to_string(), vec!["m1".to_string(), "m2".to_string()]),
        ("u2".to_string(), vec!["m1".to_string()]),
    ]
    .into();
    assert!(slice_problems(&want, &fine).is_empty());
    let bad: BTreeMap<String, Vec<String>> = [
        ("u1".to_string(), vec!["m1".to_string(), "m1".to_string()]),
        ("u3".to_string(), vec!["m2".to_string()]),
    ]
    .into();
    let p = slice_problems(&want, &bad);
    assert!(p.iter().any(|x| x.contains("twice")), "{p:?}");
    assert!(
        p.iter().any(|x| x.starts_with("Service/a: placed on")),
        "{p:?}"
    );
    assert!(
        p.iter().any(|x| x.starts_with("JobSet/b: placed on")),
        "{p:?}"
    );
    assert!(p.iter().any(|x| x.contains("uid u3")), "{p:?}");
}
