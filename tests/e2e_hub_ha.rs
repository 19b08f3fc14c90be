//! Hub HA on the local topology: two hubs share a Lease; the leader is SIGKILLed in the
//! middle of a rollout of 100 workloads and the standby finishes it — every workload
//! placed once, every slice where its placement says, none twice, none missing.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::ApiResource;
use pinfed::api::service::PinterestService;
use support::{Federation, TestNamespace, eventually, join_all_once, spawn_daemon, unique_name};

// Enough that the leader is killed with a good part unplaced (it is killed once 3 are).
const WORKLOADS: usize = 40;

/// The tests of this binary take turns: each runs two hubs under a Lease of its own, and
/// two leaders at once (one per test) would both reconcile every workload of the hub.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn hub_args(fed: &Federation, identity: &str, lease: &str) -> Vec<String> {
    fed.hub_args(&[
        "--heartbeat-secs",
        "1",
        "--lease-name",
        lease,
        "--identity",
        identity,
        // Its resync comes due while a paused leader is stopped: the leader that resumes
        // must write nothing from it (the shipped default, 600 s, would never come due
        // within the test).
        "--resync-secs",
        "20",
    ])
    .expect("a free loopback port")
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

/// One agent per member for every test of this binary, alive until the binary ends: a hub
/// that runs on while a member's agent is gone records the member AgentLost, and its
/// return keeps new work off it for the failback window — in the tests that follow too.
fn agents(fed: &Federation) -> &'static Vec<support::Daemon> {
    static AGENTS: std::sync::OnceLock<Vec<support::Daemon>> = std::sync::OnceLock::new();
    AGENTS.get_or_init(|| support::spawn_agents(fed))
}

#[tokio::test]
async fn a_standby_hub_finishes_a_rollout_after_the_leader_is_killed() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let fed = Federation::connect().await;
    join_all_once(&fed).await;
    let hub = fed.hub();
    // In the namespace and under the Role that deploy/ ships; a Lease of its own, so
    // no other hub of the suite takes part in this election.
    let lease = unique_name("ha-lease");
    let leases: Api<Lease> = Api::namespaced(hub.clone(), support::SYSTEM_NAMESPACE);
    let leader = spawn_daemon(&fed, "hub-ha-a", &hub_args(&fed, "hub-a", &lease));
    eventually(
        Duration::from_secs(30),
        &format!("hub-a leads\n{}", leader.log_tail()),
        || async { holder(&leases, &lease).await.as_deref() == Some("hub-a") },
    )
    .await;
    let standby = spawn_daemon(&fed, "hub-ha-b", &hub_args(&fed, "hub-b", &lease));
    // Agents make slices available: a slice that left a placement goes only once its
    // replacement is available.
    agents(&fed);

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
            // An error counts as none placed; said, so a failing LIST is not mistaken for
            // a slow hub (a 120-workload variant timed out here with its cause unseen).
            .inspect_err(|e| eprintln!("listing the workloads failed: {e}"))
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
    // Create all of them; kill the leader once a good part is placed and the rest is not.
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
        || async { placed_count().await >= 3 },
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
    // Correctness after the takeover is asked here, not speed (`e2e/bench` measures it):
    // on two loaded cores, 100 placements with their slices take the better part of this.
    eventually(
        Duration::from_secs(240),
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
    // The standby that took over also deletes: every workload and its slices go.
    ns.delete_and_wait(Duration::from_secs(180)).await;
    standby.kill();
    let _ = leases.delete(&lease, &Default::default()).await;
}

/// One audited request of the hub API server (`--audit-log-format=json`, one per line).
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct AuditEvent {
    #[serde(default)]
    user_agent: String,
    verb: String,
    request_received_timestamp: String,
    #[serde(default)]
    object_ref: Option<serde_json::Value>,
}

fn audit_events(fed: &Federation) -> Vec<AuditEvent> {
    support::hub_audit_events(fed)
        .into_iter()
        .filter_map(|e| serde_json::from_value(e).ok())
        .collect()
}

/// One writer: a leader stopped (SIGSTOP) past its lease loses it to the standby, and
/// once it runs again (SIGCONT) — every timer due at once, its watches full of changes —
/// it writes nothing but its Lease. Asked of the hub API server's audit log, where each
/// process has its own user agent (`pinfed/VERSION (pid PID)`).
#[tokio::test]
async fn a_leader_stopped_past_its_lease_writes_nothing_after_it_runs_again() {
    use k8s_openapi::jiff::Timestamp;
    let _turn = ONE_AT_A_TIME.lock().await;
    let fed = Federation::connect().await;
    join_all_once(&fed).await;
    let hub = fed.hub();
    let lease = unique_name("stop-lease");
    let leases: Api<Lease> = Api::namespaced(hub.clone(), support::SYSTEM_NAMESPACE);
    agents(&fed);
    let leader = spawn_daemon(&fed, "hub-stop-a", &hub_args(&fed, "hub-a", &lease));
    eventually(
        Duration::from_secs(30),
        &format!("hub-a leads\n{}", leader.log_tail()),
        || async { holder(&leases, &lease).await.as_deref() == Some("hub-a") },
    )
    .await;
    let standby = spawn_daemon(&fed, "hub-stop-b", &hub_args(&fed, "hub-b", &lease));
    let ns = TestNamespace::create(&hub, "one-writer").await;
    let api: Api<PinterestService> = Api::namespaced(hub.clone(), &ns.name);
    let make = |name: String, replicas: i32| -> PinterestService {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestService",
            "metadata": {"name": name},
            "spec": {
                "owner": {"team": "ads", "contact": "ads@pinterest.com"},
                "replicas": replicas,
                "template": {"spec": {"containers": [{"name": "app", "image": "registry.example/app:1",
                    "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}}}]}},
            }
        }))
        .unwrap()
    };
    let placed = |names: Vec<String>, replicas: i32| {
        let api = api.clone();
        move || {
            let (api, names) = (api.clone(), names.clone());
            async move {
                for n in &names {
                    let Ok(s) = api.get(n).await else {
                        return false;
                    };
                    let total: i32 = s
                        .status
                        .and_then(|s| s.placement)
                        .map(|p| p.placements.iter().filter_map(|c| c.replicas).sum())
                        .unwrap_or(0);
                    if total != replicas {
                        return false;
                    }
                }
                true
            }
        }
    };
    // Stopped in the middle of a burst: reconciles of hub-a are in flight, with writes to
    // make when it runs again.
    let first: Vec<String> = (0..48).map(|i| format!("svc-{i:03}")).collect();
    let creating = {
        let (api, names) = (api.clone(), first.clone());
        tokio::spawn(async move {
            futures::stream::iter(names)
                .map(|n| {
                    let (api, svc) = (api.clone(), make(n, 2));
                    async move { api.create(&PostParams::default(), &svc).await.unwrap() }
                })
                .buffer_unordered(16)
                .collect::<Vec<_>>()
                .await
        })
    };
    eventually(
        Duration::from_secs(60),
        &format!("hub-a places some\n{}", leader.log_tail()),
        || async {
            api.list(&ListParams::default()).await.is_ok_and(|l| {
                l.items
                    .iter()
                    .filter(|s| s.status.as_ref().is_some_and(|s| s.placement.is_some()))
                    .count()
                    >= 10
            })
        },
    )
    .await;
    // Stopped past its lease: the standby leads and moves on.
    leader.signal(libc::SIGSTOP);
    let stopped_at = Timestamp::now();
    creating.await.unwrap();
    eventually(
        Duration::from_secs(40),
        &format!("hub-b takes the lease\n{}", standby.log_tail()),
        || async { holder(&leases, &lease).await.as_deref() == Some("hub-b") },
    )
    .await;
    let rescale = |replicas: i32| {
        let (api, names) = (api.clone(), first.clone());
        async move {
            for n in &names {
                let patch = serde_json::json!({"spec": {"replicas": replicas}});
                api.patch(
                    n,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(&patch),
                )
                .await
                .unwrap();
            }
        }
    };
    eventually(
        Duration::from_secs(120),
        &format!("hub-b places the rest\n{}", standby.log_tail()),
        placed(first.clone(), 2),
    )
    .await;
    rescale(3).await;
    eventually(
        Duration::from_secs(120),
        &format!("hub-b rescales\n{}", standby.log_tail()),
        placed(first.clone(), 3),
    )
    .await;

    // It runs again, with changes waiting in its watches and every timer due.
    let resumed_at = Timestamp::now();
    leader.signal(libc::SIGCONT);
    rescale(4).await;
    eventually(
        Duration::from_secs(120),
        &format!("hub-b rescales again\n{}", standby.log_tail()),
        placed(first.clone(), 4),
    )
    .await;
    // Its resync (20 s) and retries come due in this time.
    tokio::time::sleep(Duration::from_secs(25)).await;
    assert!(leader.alive(), "hub-a died\n{}", leader.log_tail());
    assert_eq!(holder(&leases, &lease).await.as_deref(), Some("hub-b"));

    let events = audit_events(&fed);
    let by = |d: &support::Daemon| format!("(pid {})", d.pid);
    let at = |e: &AuditEvent| {
        e.request_received_timestamp
            .parse::<Timestamp>()
            .expect("an RFC 3339 audit timestamp")
    };
    let resource = |e: &AuditEvent| {
        e.object_ref
            .as_ref()
            .and_then(|o| o["resource"].as_str())
            .unwrap_or("")
            .to_string()
    };
    let leader_before = events
        .iter()
        .filter(|e| e.user_agent.contains(&by(&leader)) && at(e) < stopped_at)
        .count();
    assert!(
        leader_before > 0,
        "no write of hub-a (pid {}) audited while it led: the audit or the user agent is off",
        leader.pid
    );
    let standby_after = events
        .iter()
        .filter(|e| e.user_agent.contains(&by(&standby)) && at(e) >= resumed_at)
        .filter(|e| resource(e) != "leases")
        .count();
    assert!(
        standby_after > 0,
        "the new leader wrote nothing after the resume"
    );
    // What lands after the resume may only be writes that passed hub-a's write gate
    // before it was stopped (sent as it resumed); nothing it decided afterwards.
    let gate_ms = |e: &AuditEvent| {
        e.user_agent.split("gate=").nth(1).and_then(|v| {
            v.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
                .parse::<i64>()
                .ok()
        })
    };
    let after: Vec<&AuditEvent> = events
        .iter()
        .filter(|e| e.user_agent.contains(&by(&leader)) && at(e) >= resumed_at)
        .filter(|e| resource(e) != "leases")
        .collect();
    // `stopped_at` is read once kill(SIGSTOP) returned; on a loaded machine a thread of
    // hub-a running on the other core can still pass the gate a moment later (seen once,
    // in a clean-clone CI run while the machine compiled beside it: one Event). A write
    // decided after the stop took effect is decided at or after the resume, seconds later.
    const SIGNAL_DELIVERY: i64 = 250;
    let decided_late: Vec<String> = after
        .iter()
        .filter(|e| gate_ms(e).is_none_or(|t| t >= stopped_at.as_millisecond() + SIGNAL_DELIVERY))
        .map(|e| {
            format!(
                "{} {} at {} ({})",
                e.verb,
                resource(e),
                e.request_received_timestamp,
                e.user_agent
            )
        })
        .collect();
    assert!(
        decided_late.is_empty(),
        "the deposed leader decided writes after it was stopped: {decided_late:?}\n{}",
        leader.log_tail()
    );
    eprintln!(
        "one writer: hub-a wrote {leader_before} times while leading; after its resume {} \
         write(s) it had sent before the stop landed, none decided later; hub-b wrote \
         {standby_after} times",
        after.len()
    );
    leader.kill();
    // The standby that took over also deletes: every workload and its slices go.
    ns.delete_and_wait(Duration::from_secs(180)).await;
    standby.kill();
    let _ = leases.delete(&lease, &Default::default()).await;
}

/// A leader that shuts down (SIGTERM) releases its Lease and the standby, which watches it,
/// takes it at once: here within 20 s of a 60 s lease, which only the release allows.
/// The standby then places a new workload; the old process has exited cleanly.
#[tokio::test]
async fn a_leader_that_shuts_down_hands_the_lease_to_the_standby_at_once() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let fed = Federation::connect().await;
    join_all_once(&fed).await;
    agents(&fed);
    let hub = fed.hub();
    let lease = unique_name("term-lease");
    let leases: Api<Lease> = Api::namespaced(hub.clone(), support::SYSTEM_NAMESPACE);
    let args = |id: &str| {
        let mut a = hub_args(&fed, id, &lease);
        a.extend(["--lease-duration-secs".to_string(), "60".to_string()]);
        a
    };
    let leader = spawn_daemon(&fed, "hub-term-a", &args("hub-a"));
    eventually(
        Duration::from_secs(30),
        &format!("hub-a leads\n{}", leader.log_tail()),
        || async { holder(&leases, &lease).await.as_deref() == Some("hub-a") },
    )
    .await;
    let standby = spawn_daemon(&fed, "hub-term-b", &args("hub-b"));
    // The standby sees the Lease held (and waits on it) before the leader goes.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(holder(&leases, &lease).await.as_deref(), Some("hub-a"));
    let transitions = |l: Option<Lease>| l.and_then(|l| l.spec?.lease_transitions).unwrap_or(0);
    let before = transitions(leases.get_opt(&lease).await.unwrap());
    leader.signal(libc::SIGTERM);
    let stopped = Instant::now();
    eventually(
        Duration::from_secs(20),
        &format!(
            "hub-b takes the released lease\nhub-a:\n{}\nhub-b:\n{}",
            leader.log_tail(),
            standby.log_tail()
        ),
        || async { holder(&leases, &lease).await.as_deref() == Some("hub-b") },
    )
    .await;
    let handover = stopped.elapsed();
    assert!(
        leader.log_text().contains("released the lease"),
        "hub-a did not release its lease:\n{}",
        leader.log_tail()
    );
    assert_eq!(
        transitions(leases.get_opt(&lease).await.unwrap()),
        before + 1,
        "one hand-over, one transition"
    );
    eventually(Duration::from_secs(20), "hub-a exits", || async {
        !leader.alive()
    })
    .await;

    let ns = TestNamespace::create(&hub, "handover").await;
    let api: Api<PinterestService> = Api::namespaced(hub.clone(), &ns.name);
    let svc: PinterestService = serde_json::from_value(serde_json::json!({
        "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestService",
        "metadata": {"name": "after-handover"},
        "spec": {
            "owner": {"team": "ads", "contact": "ads@pinterest.com"},
            "replicas": 1,
            "template": {"spec": {"containers": [{"name": "app", "image": "registry.example/app:1",
                "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}}}]}},
        }
    }))
    .unwrap();
    api.create(&PostParams::default(), &svc).await.unwrap();
    eventually(
        Duration::from_secs(60),
        &format!("hub-b places the new workload\n{}", standby.log_tail()),
        || async {
            api.get_opt("after-handover")
                .await
                .ok()
                .flatten()
                .and_then(|s| s.status?.placement)
                .is_some_and(|p| p.unplaced == 0 && !p.placements.is_empty())
        },
    )
    .await;
    eprintln!("handover: SIGTERM → standby holds the lease after {handover:?}");
    ns.delete_and_wait(Duration::from_secs(120)).await;
    standby.stop(Duration::from_secs(10));
    let _ = leases.delete(&lease, &Default::default()).await;
}

/// A leader whose renewals are refused for longer than its lease keeps its work when a
/// renewal lands again in the same term (nobody else led meanwhile: the renewal is written
/// on the record it last saw); a term someone else takes ends the work, and the next term
/// starts it anew. `run_as_leader` in this process against the hub's API server; the
/// renewals are refused by RBAC (the elector's user loses `create`/`update` on Leases).
#[tokio::test]
async fn a_late_renewal_in_the_same_term_keeps_the_work_and_a_lost_term_restarts_it() {
    use k8s_openapi::api::rbac::v1::RoleBinding;
    use pinfed::controller::leader::{LeaderConfig, run_as_leader};
    use pinfed::controller::write_gate;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

    let fed = Federation::connect().await;
    let admin = fed.hub();
    let ns = TestNamespace::create(&admin, "lapse").await;
    let user = unique_name("elector");
    let post = PostParams::default();
    for (role, verbs) in [
        ("lease-read", vec!["get", "list", "watch"]),
        ("lease-write", vec!["create", "update"]),
    ] {
        let r: k8s_openapi::api::rbac::v1::Role = serde_json::from_value(serde_json::json!({
            "metadata": {"name": role},
            "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": verbs}],
        }))
        .unwrap();
        Api::namespaced(admin.clone(), &ns.name)
            .create(&post, &r)
            .await
            .unwrap();
    }
    let binding = |role: &str| -> RoleBinding {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        }))
        .unwrap()
    };
    let bindings: Api<RoleBinding> = Api::namespaced(admin.clone(), &ns.name);
    bindings
        .create(&post, &binding("lease-read"))
        .await
        .unwrap();
    bindings
        .create(&post, &binding("lease-write"))
        .await
        .unwrap();
    let revoke = || async {
        bindings
            .delete("lease-write", &Default::default())
            .await
            .unwrap();
    };
    let grant = || async {
        bindings
            .create(&post, &binding("lease-write"))
            .await
            .unwrap();
    };

    // The work counts its starts and, when aborted (its future dropped), its stops.
    struct Stopped(Arc<AtomicUsize>);
    impl Drop for Stopped {
        fn drop(&mut self) {
            self.0.fetch_add(1, SeqCst);
        }
    }
    let (starts, stops) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let work = {
        let (starts, stops) = (starts.clone(), stops.clone());
        move || {
            starts.fetch_add(1, SeqCst);
            let stopped = Stopped(stops.clone());
            async move {
                let _stopped = stopped;
                std::future::pending::<anyhow::Result<()>>().await
            }
        }
    };
    let client = fed.client_as_user(&fed.topology.hub.name, &user).await;
    let cfg = LeaderConfig {
        namespace: ns.name.clone(),
        lease_name: "lapse".into(),
        identity: "elector-a".into(),
        duration_secs: 2,
        renew_every: Duration::from_millis(500),
    };
    let (shut, shutdown) = tokio::sync::oneshot::channel::<()>();
    let election = tokio::spawn(run_as_leader(
        client,
        cfg,
        async {
            let _ = shutdown.await;
        },
        work,
    ));
    let leases: Api<Lease> = Api::namespaced(admin.clone(), &ns.name);
    let gate = write_gate::gate();
    let counts = || (starts.load(SeqCst), stops.load(SeqCst));
    eventually(Duration::from_secs(30), "elector-a leads", || async {
        gate.is_open() && counts() == (1, 0)
    })
    .await;

    // 1. Renewals refused past the lease: writes held back, the work kept.
    revoke().await;
    eventually(
        Duration::from_secs(30),
        "the last renewal is more than a lease (2 s) old",
        || async {
            let renewed = leases
                .get("lapse")
                .await
                .ok()
                .and_then(|l| l.spec?.renew_time)
                .map(|t| t.0);
            renewed.is_some_and(|t| {
                k8s_openapi::jiff::Timestamp::now().duration_since(t)
                    > k8s_openapi::jiff::SignedDuration::from_secs(3)
            })
        },
    )
    .await;
    assert!(
        !gate.is_open(),
        "the write gate is shut once the renewal ran out"
    );
    assert_eq!(counts(), (1, 0), "a lapse stops nothing");
    grant().await;
    eventually(Duration::from_secs(30), "a renewal lands again", || async {
        gate.is_open()
    })
    .await;
    assert_eq!(
        counts(),
        (1, 0),
        "a renewal in the same term keeps the work: it was not started again"
    );
    assert_eq!(holder(&leases, "lapse").await.as_deref(), Some("elector-a"));

    // 2. Lapsed again, and someone else takes the Lease meanwhile: the term is over.
    revoke().await;
    eventually(Duration::from_secs(30), "the gate shuts", || async {
        !gate.is_open()
    })
    .await;
    let mut lease = leases.get("lapse").await.unwrap();
    let spec = lease.spec.as_mut().unwrap();
    spec.holder_identity = Some("elector-b".into());
    spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
    spec.renew_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
        k8s_openapi::jiff::Timestamp::now(),
    ));
    leases.replace("lapse", &post, &lease).await.unwrap();
    eventually(
        Duration::from_secs(30),
        "the work stops when the Lease is someone else's",
        || async { counts() == (1, 1) },
    )
    .await;

    // 3. The Lease gone, the right back: a new term, and the work starts anew.
    leases.delete("lapse", &Default::default()).await.unwrap();
    grant().await;
    eventually(
        Duration::from_secs(30),
        "a new term starts the work again",
        || async { gate.is_open() && counts() == (2, 1) },
    )
    .await;

    let _ = shut.send(());
    election
        .await
        .expect("the election task")
        .expect("run_as_leader ends cleanly on shutdown");
    assert_eq!(counts(), (2, 2), "shutdown stops the work");
    assert_eq!(
        holder(&leases, "lapse").await,
        None,
        "the Lease is released on shutdown"
    );
}
