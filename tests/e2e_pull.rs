//! Pull mode and agent liveness on local-3, where use1c joins in pull mode: the hub holds
//! no credential for it and never connects to it. Destructive (agents are killed and a
//! credential broken), so they run one at a time with the other destructive tests.

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use pinfed::api::common::ConditionStatus;
use pinfed::api::federation::MemberCluster;
use pinfed::api::service::PinterestService;
use support::{Daemon, Federation, TestNamespace, eventually, spawn_daemon};

/// Member grace of the test hub: a member whose agent has not renewed its Lease for this
/// long is AgentLost.
const GRACE: u64 = 8;

fn hub(fed: &Federation, tag: &str) -> Daemon {
    let grace = GRACE.to_string();
    support::spawn_hub(
        fed,
        &format!("hub-{tag}"),
        &["--member-grace-secs", &grace, "--failback-window-secs", "5"],
    )
}

fn agent(fed: &Federation, m: &str, tag: &str) -> Daemon {
    spawn_daemon(
        fed,
        &format!("agent-{tag}-{m}"),
        &support::agent_args(fed, m),
    )
}

fn pull_member(fed: &Federation) -> String {
    fed.member_names()
        .into_iter()
        .find(|m| fed.is_pull(m))
        .expect("the topology has a pull member (clusters/local-3.yaml: use1c)")
}

fn push_member(fed: &Federation) -> String {
    fed.member_names()
        .into_iter()
        .find(|m| !fed.is_pull(m))
        .expect("a push member")
}

/// A service of 6 replicas spread over all three members that moves off a lost member at
/// once (failover grace 0).
fn service(name: &str) -> PinterestService {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestService",
        "metadata": {"name": name},
        "spec": {
            "owner": {"team": "ads", "contact": "ads@pinterest.com"},
            "replicas": 6,
            "placement": {"spread": {"minClusters": 3}, "failover": {"gracePeriodSeconds": 0}},
            "template": {"spec": {"containers": [{"name": "app", "image": "registry.example/app:1",
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}},
        }
    }))
    .unwrap()
}

async fn status(api: &Api<PinterestService>, name: &str) -> serde_json::Value {
    api.get(name)
        .await
        .map(|o| serde_json::to_value(o).unwrap()["status"].clone())
        .unwrap_or_default()
}

fn placed_on(s: &serde_json::Value) -> Vec<String> {
    s["placement"]["placements"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .filter(|p| p["replicas"].as_i64().unwrap_or(0) > 0)
                .filter_map(|p| p["cluster"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn cluster_state(s: &serde_json::Value, cluster: &str) -> Option<String> {
    s["clusters"]
        .as_array()?
        .iter()
        .find(|c| c["cluster"] == cluster)?["state"]
        .as_str()
        .map(str::to_string)
}

fn ready_reason(mc: &MemberCluster) -> Option<(ConditionStatus, String)> {
    mc.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| (c.status, c.reason.clone()))
}

/// Whether MemberCluster `name` is Ready=`want` (with `reason`, when given).
async fn member_is(
    members: &Api<MemberCluster>,
    name: &str,
    want: ConditionStatus,
    reason: Option<&str>,
) -> bool {
    members
        .get(name)
        .await
        .ok()
        .and_then(|mc| ready_reason(&mc))
        .is_some_and(|(s, r)| s == want && reason.is_none_or(|w| r == w))
}

async fn wait_ready_everywhere(api: &Api<PinterestService>, name: &str, logs: &dyn Fn() -> String) {
    eventually(
        Duration::from_secs(120),
        &format!("{name} placed on all three members and Ready\n{}", logs()),
        || async {
            let s = status(api, name).await;
            placed_on(&s).len() == 3
                && s["availableReplicas"].as_i64() == Some(6)
                && s["conditions"].as_array().is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                })
        },
    )
    .await;
}

/// Stopping a pull member's agent (its API server stays up) makes the member AgentLost
/// and its share fails over within the grace + 10 s; a push member whose agent is killed
/// shows Unknown, never a stale Ready; both come back when their agents do.
#[tokio::test]
async fn destructive_a_lost_agent_fails_its_share_over_and_never_shows_a_stale_ready() {
    let fed = Federation::connect().await;
    support::join_all_once(&fed).await;
    let (pull, push) = (pull_member(&fed), push_member(&fed));
    let hub_d = hub(&fed, "liveness");
    let mut agents: std::collections::BTreeMap<String, Daemon> = fed
        .member_names()
        .into_iter()
        .map(|m| {
            let d = agent(&fed, &m, "liveness");
            (m, d)
        })
        .collect();
    let logs = || hub_d.log_tail();
    let hub = fed.hub();
    let ns = TestNamespace::create(&hub, "pull-liveness").await;
    let api: Api<PinterestService> = Api::namespaced(hub.clone(), &ns.name);
    api.create(&PostParams::default(), &service("web"))
        .await
        .unwrap();
    wait_ready_everywhere(&api, "web", &logs).await;
    let members: Api<MemberCluster> = Api::all(hub.clone());

    // The pull member's agent stops: AgentLost, and its share moves.
    let stopped = Instant::now();
    agents.remove(&pull).unwrap().kill();
    eventually(
        Duration::from_secs(GRACE + 30),
        &format!("{pull} AgentLost and web off it\n{}", logs()),
        || async {
            let lost = member_is(&members, &pull, ConditionStatus::False, Some("AgentLost")).await;
            let s = status(&api, "web").await;
            lost && !placed_on(&s).contains(&pull) && placed_on(&s).len() == 2
        },
    )
    .await;
    let failed_over = stopped.elapsed();
    assert!(
        failed_over <= Duration::from_secs(GRACE + 10),
        "{pull}'s share moved {failed_over:?} after its agent stopped (grace {GRACE}s + 10s allowed)"
    );
    // The member's own API server was never touched: its slice is still there (nothing
    // can remove it until the agent is back), and the hub did not connect to it.
    let ar = ApiResource::erase::<PinterestService>(&());
    let left = Api::<DynamicObject>::namespaced_with(fed.client(&pull), &ns.name, &ar)
        .get_opt("web")
        .await
        .unwrap();
    assert!(left.is_some(), "the stopped agent's member keeps its slice");

    // The agent is back: Ready again, and after the failback window the share returns
    // to it and is reported Ready from there.
    agents.insert(pull.clone(), agent(&fed, &pull, "liveness-again"));
    eventually(
        Duration::from_secs(60),
        &format!("{pull} Ready again with its share back\n{}", logs()),
        || async {
            let ready = member_is(&members, &pull, ConditionStatus::True, None).await;
            let s = status(&api, "web").await;
            ready
                && placed_on(&s).contains(&pull)
                && cluster_state(&s, &pull).as_deref() == Some("Ready")
        },
    )
    .await;

    // A push member's agent is killed: its entry turns Unknown and never shows Ready
    // while the agent is gone (its statuses are frozen).
    agents.remove(&push).unwrap().kill();
    let killed = Instant::now();
    eventually(
        Duration::from_secs(GRACE + 30),
        &format!("{push} AgentLost\n{}", logs()),
        || async { member_is(&members, &push, ConditionStatus::False, Some("AgentLost")).await },
    )
    .await;
    // The workload's status follows the member's within a reconcile (the hub reconciles
    // every workload when a member's health changes); from then on, never Ready.
    eventually(
        Duration::from_secs(5),
        &format!("web's {push} entry no longer Ready\n{}", logs()),
        || async { cluster_state(&status(&api, "web").await, &push).as_deref() != Some("Ready") },
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let s = status(&api, "web").await;
        let state = cluster_state(&s, &push);
        assert_ne!(
            state.as_deref(),
            Some("Ready"),
            "{push} shows Ready {:?} after its agent was killed: {s}",
            killed.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    agents.insert(push.clone(), agent(&fed, &push, "liveness-again"));
    eventually(
        Duration::from_secs(60),
        &format!("{push} Ready again\n{}", logs()),
        || async { member_is(&members, &push, ConditionStatus::True, None).await },
    )
    .await;
    ns.delete().await;
}

/// A pull agent whose hub credential is broken keeps its member's workloads running,
/// says why it cannot connect, and catches up when a fresh credential arrives: what the
/// hub removed meanwhile is removed. Another member's credential is refused by name.
#[tokio::test]
async fn destructive_a_disconnected_pull_agent_keeps_its_workloads_and_catches_up() {
    let fed = Federation::connect().await;
    support::join_all_once(&fed).await;
    let pull = pull_member(&fed);
    let push = push_member(&fed);
    let hub_d = hub(&fed, "disconnect");
    let agents: Vec<Daemon> = fed
        .member_names()
        .into_iter()
        .map(|m| agent(&fed, &m, "disconnect"))
        .collect();
    let pull_agent = agents
        .iter()
        .zip(fed.member_names())
        .find(|(_, m)| *m == pull)
        .map(|(d, _)| d)
        .unwrap();
    let hub = fed.hub();
    let ns = TestNamespace::create(&hub, "pull-disconnect").await;
    let api: Api<PinterestService> = Api::namespaced(hub.clone(), &ns.name);
    api.create(&PostParams::default(), &service("keep"))
        .await
        .unwrap();
    api.create(&PostParams::default(), &service("drop"))
        .await
        .unwrap();
    let logs = || {
        format!(
            "{}\n--- pull agent ---\n{}",
            hub_d.log_tail(),
            pull_agent.log_tail()
        )
    };
    wait_ready_everywhere(&api, "keep", &logs).await;
    wait_ready_everywhere(&api, "drop", &logs).await;

    // Break the agent's hub credential in the member.
    let secrets: Api<Secret> = Api::namespaced(fed.client(&pull), "pinfed-system");
    let good = secrets.get("pinfed-hub-kubeconfig").await.unwrap();
    let text = String::from_utf8(good.data.as_ref().unwrap()["kubeconfig"].0.clone()).unwrap();
    let token = pinfed::controller::tokens::kubeconfig_token(&text).unwrap();
    let broken = text.replace(&token, "not-a-token");
    let set = |text: String| {
        let secrets = secrets.clone();
        async move {
            use base64::Engine;
            let patch = serde_json::json!({"data": {"kubeconfig":
                base64::engine::general_purpose::STANDARD.encode(text)}});
            secrets
                .patch(
                    "pinfed-hub-kubeconfig",
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
                .unwrap();
        }
    };
    set(broken).await;
    eventually(
        Duration::from_secs(60),
        &format!(
            "the pull agent says the hub refused its credential\n{}",
            logs()
        ),
        || async {
            pull_agent
                .log_tail()
                .contains("the hub refused the credential")
        },
    )
    .await;
    // Meanwhile the hub deletes one workload; the member, unreachable for the hub and
    // cut off from it, keeps running both (nothing removes them behind the agent's back).
    api.delete("drop", &Default::default()).await.unwrap();
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(fed.client(&pull), &ns.name);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let running = deployments.list(&Default::default()).await.unwrap();
    assert!(
        running.items.len() >= 2,
        "the disconnected member keeps its workloads: {:?}",
        running
            .items
            .iter()
            .map(|d| d.metadata.name.clone())
            .collect::<Vec<_>>()
    );
    let ar = ApiResource::erase::<PinterestService>(&());
    let slices = Api::<DynamicObject>::namespaced_with(fed.client(&pull), &ns.name, &ar);
    assert!(slices.get_opt("drop").await.unwrap().is_some());

    // A fresh credential (join again): the agent reconnects and catches up.
    set(text).await;
    eventually(
        Duration::from_secs(90),
        &format!(
            "the pull agent catches up: drop removed, keep Ready\n{}",
            logs()
        ),
        || async {
            let dropped = slices.get_opt("drop").await.is_ok_and(|o| o.is_none());
            let s = status(&api, "keep").await;
            dropped
                && placed_on(&s).contains(&pull)
                && cluster_state(&s, &pull).as_deref() == Some("Ready")
        },
    )
    .await;

    drop(agents);
    // An agent given another member's hub credential is refused, naming both: the
    // push member's agent run in pull mode with the pull member's kubeconfig.
    let push_secrets: Api<Secret> = Api::namespaced(fed.client(&push), "pinfed-system");
    let mut foreign = good.clone();
    foreign.metadata = kube::api::ObjectMeta {
        name: Some("pinfed-hub-kubeconfig".into()),
        ..Default::default()
    };
    push_secrets
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();
    let log = std::env::temp_dir().join(support::unique_name("wrong-member-agent"));
    let mut cmd = std::process::Command::new(support::pinfed_bin());
    cmd.args([
        "agent",
        "--context",
        &push,
        "--cluster-name",
        &push,
        "--mode",
        "pull",
        "--no-leader-election",
        "--metrics-addr",
        &format!("127.0.0.1:{}", support::free_port()),
    ])
    .env("KUBECONFIG", &fed.kubeconfig);
    let wrong = Daemon::spawn("wrong-member-agent", cmd, &log).unwrap();
    let expected = format!("pinfed-member-{pull}");
    eventually(
        Duration::from_secs(30),
        &format!(
            "an agent with another member's credential is refused\n{}",
            wrong.log_tail()
        ),
        || async {
            let t = wrong.log_tail();
            t.contains("belongs to another member's namespace") && t.contains(&expected)
        },
    )
    .await;
    wrong.kill();
    push_secrets
        .delete("pinfed-hub-kubeconfig", &Default::default())
        .await
        .unwrap();
    ns.delete().await;
}

/// `pinfed unjoin` of a pull member removes everything `join --mode pull` made: its
/// namespace on the hub (MemberSlices, bundles, Lease, the agent's identity), the agent's
/// ClusterRole there, and in the member the agent's hub kubeconfig and pull rights — its
/// old token is refused from then on. Joining again restores it.
#[tokio::test]
async fn destructive_unjoin_of_a_pull_member_removes_its_hub_identity_and_credential() {
    use k8s_openapi::api::core::v1::Namespace;
    use k8s_openapi::api::rbac::v1::ClusterRole;
    let fed = Federation::connect().await;
    support::join_all_once(&fed).await;
    let pull = pull_member(&fed);
    let hub_d = hub(&fed, "unjoin-pull");
    let _agent = agent(&fed, &pull, "unjoin-pull");
    let hub = fed.hub();
    let members: Api<MemberCluster> = Api::all(hub.clone());
    eventually(
        Duration::from_secs(60),
        &format!("{pull} Ready\n{}", hub_d.log_tail()),
        || async { member_is(&members, &pull, ConditionStatus::True, None).await },
    )
    .await;
    let secret = Api::<Secret>::namespaced(fed.client(&pull), "pinfed-system")
        .get("pinfed-hub-kubeconfig")
        .await
        .unwrap();
    let old = String::from_utf8(secret.data.unwrap()["kubeconfig"].0.clone()).unwrap();
    let out = support::pinfed(
        &fed,
        &[
            "unjoin",
            &pull,
            "--context",
            "hub",
            "--member-context",
            &pull,
            "--timeout-secs",
            "120",
        ],
    );
    assert!(
        out.status.success(),
        "unjoin {pull}: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        hub_d.log_tail()
    );
    assert!(members.get_opt(&pull).await.unwrap().is_none());
    let ns = pinfed::api::member_slice::pull_namespace(&pull);
    eventually(
        Duration::from_secs(60),
        &format!("namespace {ns} gone from the hub"),
        || async {
            Api::<Namespace>::all(hub.clone())
                .get_opt(&ns)
                .await
                .is_ok_and(|n| n.is_none())
        },
    )
    .await;
    assert!(
        Api::<ClusterRole>::all(hub.clone())
            .get_opt(&format!("pinfed-agent-{pull}"))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        Api::<Secret>::namespaced(fed.client(&pull), "pinfed-system")
            .get_opt("pinfed-hub-kubeconfig")
            .await
            .unwrap()
            .is_none(),
        "the agent's hub kubeconfig is gone from the member"
    );
    assert!(
        Api::<ClusterRole>::all(fed.client(&pull))
            .get_opt("pinfed-agent-pull")
            .await
            .unwrap()
            .is_none()
    );
    // The old credential no longer works on the hub: its ServiceAccount is gone (the
    // API server's ServiceAccount lookup follows the deletion within moments).
    let client = pinfed::controller::tokens::client_from_kubeconfig(&old)
        .await
        .unwrap();
    eventually(
        Duration::from_secs(30),
        "the old agent token refused by the hub (401)",
        || async {
            matches!(
                pinfed::controller::tokens::who_am_i(&client).await,
                Err(kube::Error::Api(s)) if s.code == 401
            )
        },
    )
    .await;
    // Joined again: Ready again.
    support::join_member(&fed, &pull, &[]);
    eventually(
        Duration::from_secs(90),
        &format!("{pull} Ready after joining again\n{}", hub_d.log_tail()),
        || async { member_is(&members, &pull, ConditionStatus::True, None).await },
    )
    .await;
}

/// The reason of a MemberCluster's `CredentialValid` condition.
async fn credential_reason(members: &Api<MemberCluster>, name: &str) -> Option<String> {
    let mc = members.get(name).await.ok()?;
    mc.status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == pinfed::hub::pull_credential::CONDITION)
        .map(|c| c.reason)
}

/// A pull agent's chain of token renewals has an end of its own: every token it mints
/// must be bound to its credential Secret (an unbound one is refused), the hub says when
/// the credential ends, deletes it at its end (every token of the chain is refused from
/// then on: the member goes AgentLost), and a new join makes the member Ready again.
#[tokio::test]
async fn destructive_a_pull_agents_credential_ends_on_its_own_and_a_new_join_renews_it() {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    use pinfed::hub::join_pull::{AGENT_CREDENTIAL, PULL_AGENT};
    let fed = Federation::connect().await;
    let pull = pull_member(&fed);
    // A credential of 25 s, made anew: the test waits out all of it. What must happen
    // before its end (agent connected, member Ready, the hub saying EndsSoon, two token
    // requests) took 3 s on local-3 (the credential is made at the end of the join).
    support::join_member(
        &fed,
        &pull,
        &["--credential-secs", "25", "--renew-credential"],
    );
    let hub_d = hub(&fed, "credential");
    let agent_d = agent(&fed, &pull, "credential");
    let hub = fed.hub();
    let members: Api<MemberCluster> = Api::all(hub.clone());
    let logs = || format!("{}\n{}", hub_d.log_tail(), agent_d.log_tail());
    eventually(
        Duration::from_secs(60),
        &format!("{pull} Ready, its credential ending soon\n{}", logs()),
        || async {
            member_is(&members, &pull, ConditionStatus::True, None).await
                && credential_reason(&members, &pull).await.as_deref() == Some("EndsSoon")
        },
    )
    .await;
    // The agent's own token may mint only tokens bound to the credential.
    let kubeconfig = Api::<Secret>::namespaced(fed.client(&pull), "pinfed-system")
        .get("pinfed-hub-kubeconfig")
        .await
        .unwrap();
    let kubeconfig = String::from_utf8(kubeconfig.data.unwrap()["kubeconfig"].0.clone()).unwrap();
    let as_agent = pinfed::controller::tokens::client_from_kubeconfig(&kubeconfig)
        .await
        .unwrap();
    let ns = pinfed::api::member_slice::pull_namespace(&pull);
    let sas: Api<ServiceAccount> = Api::namespaced(as_agent.clone(), &ns);
    let unbound = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    match sas
        .create_token_request(PULL_AGENT, &PostParams::default(), &unbound)
        .await
    {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403, "{s:?}");
            assert!(s.message.contains(AGENT_CREDENTIAL), "{}", s.message);
        }
        other => panic!("an unbound token was minted: {other:?}"),
    }
    let credential = Api::<Secret>::namespaced(hub.clone(), &ns)
        .get(AGENT_CREDENTIAL)
        .await
        .unwrap();
    let bound = pinfed::controller::tokens::request_bound_token(
        &as_agent,
        &ns,
        PULL_AGENT,
        3600,
        Some(&pinfed::controller::tokens::BoundSecret {
            name: AGENT_CREDENTIAL.into(),
            uid: credential.metadata.uid.clone().unwrap(),
        }),
    )
    .await
    .expect("a token bound to the credential");
    let renewed = pinfed::controller::tokens::client_from_kubeconfig(
        &pinfed::controller::tokens::with_token(&kubeconfig, &bound).unwrap(),
    )
    .await
    .unwrap();
    // At its end the hub deletes it: the agent's tokens, renewed ones too, are refused.
    eventually(
        Duration::from_secs(90),
        &format!("the credential ended and deleted\n{}", logs()),
        || async {
            credential_reason(&members, &pull).await.as_deref() == Some("Ended")
                && Api::<Secret>::namespaced(hub.clone(), &ns)
                    .get_opt(AGENT_CREDENTIAL)
                    .await
                    .is_ok_and(|s| s.is_none())
        },
    )
    .await;
    for (which, client) in [("current", &as_agent), ("renewed", &renewed)] {
        eventually(
            Duration::from_secs(30),
            &format!("the agent's {which} token refused (401)"),
            || async {
                matches!(
                    pinfed::controller::tokens::who_am_i(client).await,
                    Err(kube::Error::Api(s)) if s.code == 401
                )
            },
        )
        .await;
    }
    eventually(
        Duration::from_secs(60),
        &format!("{pull} AgentLost\n{}", logs()),
        || async { member_is(&members, &pull, ConditionStatus::False, Some("AgentLost")).await },
    )
    .await;
    let said = support::events(&hub, None)
        .await
        .iter()
        .any(|e| e.reason == "CredentialEnded" && e.name == pull);
    assert!(said, "a CredentialEnded Event on {pull}");
    // Joined again (the default 90 days): Ready again, its credential valid.
    support::join_member(&fed, &pull, &[]);
    eventually(
        Duration::from_secs(90),
        &format!("{pull} Ready after joining again\n{}", logs()),
        || async {
            member_is(&members, &pull, ConditionStatus::True, None).await
                && credential_reason(&members, &pull).await.as_deref() == Some("Valid")
        },
    )
    .await;
}
