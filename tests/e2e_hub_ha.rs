//! Hub HA on the local topology: two hubs share a Lease; the leader is SIGKILLed in the
//! middle of a rollout of 200 workloads and the standby finishes it — every workload
//! placed once, every slice where its placement says, none twice, none missing.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::ApiResource;
use pinfed::api::service::PinterestService;
use support::{Federation, TestNamespace, eventually, join_all, spawn_daemon, unique_name};

const WORKLOADS: usize = 200;

fn hub_args(identity: &str, lease: &str) -> Vec<String> {
    [
        "hub",
        "--context",
        "hub",
        "--heartbeat-secs",
        "1",
        "--lease-name",
        lease,
        "--identity",
        identity,
        "--metrics-addr",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([format!("127.0.0.1:{}", support::free_port())])
    .collect()
}

async fn holder(leases: &Api<Lease>, lease: &str) -> Option<String> {
    leases
        .get_opt(lease)
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec?.holder_identity)
}

/// Each workload's placement: cluster → replicas (every workload fully placed, 3 in all).
/// None when the hub API server did not answer (a loaded machine): the caller asks again.
async fn want_slices(
    api: &Api<PinterestService>,
) -> Option<BTreeMap<String, BTreeMap<String, i64>>> {
    let list = api.list(&ListParams::default()).await.ok()?;
    let want = list
        .items
        .iter()
        .map(|s| {
            let p = s.status.as_ref().unwrap().placement.as_ref().unwrap();
            assert_eq!(p.unplaced, 0, "{p:?}");
            let shares: BTreeMap<String, i64> = p
                .placements
                .iter()
                .map(|c| (c.cluster.clone(), i64::from(c.replicas.unwrap_or(0))))
                .collect();
            assert_eq!(shares.values().sum::<i64>(), 3, "{p:?}");
            (s.metadata.name.clone().unwrap(), shares)
        })
        .collect();
    Some(want)
}

#[tokio::test]
async fn a_standby_hub_finishes_a_rollout_after_the_leader_is_killed() {
    let fed = Federation::connect().await;
    join_all(&fed);
    let hub = fed.hub();
    // In the namespace and under the Role that deploy/ ships; a Lease of its own, so
    // no other hub of the suite takes part in this election.
    let lease = unique_name("ha-lease");
    let leases: Api<Lease> = Api::namespaced(hub.clone(), support::SYSTEM_NAMESPACE);
    let leader = spawn_daemon(&fed, "hub-ha-a", &hub_args("hub-a", &lease));
    eventually(
        Duration::from_secs(30),
        &format!("hub-a leads\n{}", leader.log_tail()),
        || async { holder(&leases, &lease).await.as_deref() == Some("hub-a") },
    )
    .await;
    let standby = spawn_daemon(&fed, "hub-ha-b", &hub_args("hub-b", &lease));
    // Agents make slices available: a slice that left a placement goes only once its
    // replacement is available.
    let _agents: Vec<_> = fed
        .member_names()
        .iter()
        .map(|m| {
            spawn_daemon(
                &fed,
                &format!("agent-ha-{m}"),
                &[
                    "agent",
                    "--context",
                    m,
                    "--cluster-name",
                    m,
                    "--no-leader-election",
                    "--metrics-addr",
                    &format!("127.0.0.1:{}", support::free_port()),
                ]
                .map(String::from),
            )
        })
        .collect();

    let ns = TestNamespace::create(&hub, "ha").await;
    let api: Api<PinterestService> = Api::namespaced(hub.clone(), &ns.name);
    let make = |i: usize| -> PinterestService {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestService",
            "metadata": {"name": format!("svc-{i:03}")},
            "spec": {
                "owner": {"team": "ads", "contact": "ads@pinterest.com"},
                "replicas": 3,
                "placement": {"spread": {"minClusters": 2}},
                "template": {"spec": {"containers": [{"name": "app", "image": "registry.example/app:1",
                    "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}}}]}},
            }
        }))
        .unwrap()
    };
    let placed_count = || async {
        api.list(&ListParams::default())
            .await
            .map(|l| {
                l.items
                    .iter()
                    .filter(|s| {
                        s.status
                            .as_ref()
                            .and_then(|s| s.placement.as_ref())
                            .is_some()
                    })
                    .count()
            })
            .unwrap_or(0)
    };
    // Create all 200; kill the leader once a good part is placed and the rest is not.
    let creating = {
        let api = api.clone();
        tokio::spawn(async move {
            futures::stream::iter(0..WORKLOADS)
                .map(|i| {
                    let (api, svc) = (api.clone(), make(i));
                    async move { api.create(&PostParams::default(), &svc).await.unwrap() }
                })
                .buffer_unordered(16)
                .collect::<Vec<_>>()
                .await
        })
    };
    eventually(
        Duration::from_secs(60),
        &format!("some workloads placed\n{}", leader.log_tail()),
        || async { placed_count().await >= 20 },
    )
    .await;
    leader.kill();
    let killed = Instant::now();
    let placed_at_kill = placed_count().await;
    creating.await.unwrap();
    eventually(
        Duration::from_secs(30),
        &format!("hub-b takes the lease\n{}", standby.log_tail()),
        || async { holder(&leases, &lease).await.as_deref() == Some("hub-b") },
    )
    .await;
    let takeover = killed.elapsed();
    eventually(
        Duration::from_secs(120),
        &format!("all {WORKLOADS} placed\n{}", standby.log_tail()),
        || async { placed_count().await == WORKLOADS },
    )
    .await;

    // Every slice where its placement says, with its share; none elsewhere. Placements
    // may still change (a member that looks lost on a loaded machine), so both sides are
    // read on every try.
    let ar = ApiResource::erase::<PinterestService>(&());
    let members = fed.member_names();
    let last = std::sync::Mutex::new((BTreeMap::new(), BTreeMap::new()));
    let check = eventually(
        // Slices that leave a placement go once the replacement is available, so allow
        // the agents time to make them so.
        Duration::from_secs(180),
        "every slice in place, none extra",
        || async {
            let Some(want) = want_slices(&api).await else {
                return false;
            };
            let mut got: BTreeMap<String, BTreeMap<String, i64>> = BTreeMap::new();
            for m in &members {
                let slices = Api::<DynamicObject>::namespaced_with(fed.client(m), &ns.name, &ar)
                    .list(&ListParams::default())
                    .await
                    .map(|l| l.items)
                    .unwrap_or_default();
                for s in slices {
                    got.entry(s.metadata.name.clone().unwrap())
                        .or_default()
                        .insert(m.clone(), s.data["spec"]["replicas"].as_i64().unwrap_or(-1));
                }
            }
            let same = got == want;
            *last.lock().unwrap() = (want, got);
            same
        },
    );
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(check)).await;
    if outcome.is_err() {
        let (want, got) = last.lock().unwrap().clone();
        let diff: Vec<String> = want
            .iter()
            .filter(|(k, v)| got.get(*k) != Some(v))
            .map(|(k, v)| format!("{k}: want {v:?} got {:?}", got.get(k)))
            .collect();
        panic!(
            "slices differ from placements for {} workloads: {:?}\n{}",
            diff.len(),
            &diff[..diff.len().min(10)],
            standby.log_tail()
        );
    }
    eprintln!(
        "ha: {placed_at_kill} of {WORKLOADS} placed when the leader was killed; standby led after {takeover:?}"
    );
    standby.kill();
    ns.delete().await;
    let _ = leases.delete(&lease, &Default::default()).await;
}
