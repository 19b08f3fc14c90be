//! Tests that stop parts of the topology. The README's test command runs them after
//! every other test, because they disturb the clusters the others use.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use support::{Federation, TestNamespace, run_harness};

#[tokio::test]
async fn destructive_a_stopped_member_refuses_connections_and_serves_its_old_objects_after_start() {
    let fed = Federation::connect().await;
    let member = fed.member_names().last().unwrap().clone();
    let client = fed.client(&member);
    let ns = TestNamespace::create(&client, "stopstart").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let cm: ConfigMap = serde_json::from_value(
        serde_json::json!({"metadata": {"name": "kept"}, "data": {"before": "stop"}}),
    )
    .unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();

    let out = run_harness(&["stop", &member]);
    assert!(
        out.status.success(),
        "stop failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let server = fed.kubeconfig_server(&member);
    let port: u16 = server.rsplit(':').next().unwrap().parse().unwrap();
    let refused = std::net::TcpStream::connect_timeout(
        &([127, 0, 0, 1], port).into(),
        Duration::from_secs(1),
    );
    assert!(
        matches!(&refused, Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused),
        "after stop, {server} should refuse connections, got {refused:?}"
    );
    assert!(
        cms.get("kept").await.is_err(),
        "a stopped API server must not answer"
    );

    let out = run_harness(&["start", &member]);
    assert!(
        out.status.success(),
        "start failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = cms
        .get("kept")
        .await
        .expect("the restarted API server serves the old ConfigMap");
    assert_eq!(got.data.unwrap()["before"], "stop");
    ns.delete().await;
}

#[test]
fn destructive_stop_of_an_unknown_cluster_names_the_known_ones() {
    let out = run_harness(&["stop", "no-such-cluster"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown cluster \"no-such-cluster\"") && err.contains("known clusters:"),
        "{err}"
    );
}

#[tokio::test]
async fn destructive_a_stopped_member_turns_not_ready_and_recovers() {
    use pinfed::api::common::ConditionStatus;
    use pinfed::api::federation::MemberCluster;
    let fed = Federation::connect().await;
    support::join_all(&fed);
    let args: Vec<String> = [
        "hub",
        "--context",
        "hub",
        "--no-leader-election",
        "--heartbeat-secs",
        "1",
        "--member-grace-secs",
        "4",
        "--metrics-addr",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([format!("127.0.0.1:{}", support::free_port())])
    .collect();
    let hub = support::spawn_daemon(&fed, "hub-health", &args);
    let member = fed.member_names()[1].clone();
    let api: kube::Api<MemberCluster> = kube::Api::all(fed.hub());
    let ready_is = |want: ConditionStatus| {
        let (api, member) = (api.clone(), member.clone());
        move || {
            let (api, member) = (api.clone(), member.clone());
            async move {
                api.get(&member)
                    .await
                    .ok()
                    .and_then(|m| m.status)
                    .is_some_and(|s| {
                        s.conditions
                            .iter()
                            .any(|c| c.type_ == "Ready" && c.status == want)
                    })
            }
        }
    };
    support::eventually(
        Duration::from_secs(30),
        "member Ready",
        ready_is(ConditionStatus::True),
    )
    .await;
    let stopped = std::time::Instant::now();
    let out = run_harness(&["stop", &member]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    support::eventually(
        Duration::from_secs(30),
        &format!("member NotReady\n{}", hub.log_tail()),
        ready_is(ConditionStatus::False),
    )
    .await;
    // Heartbeats come every second and the grace is 4 s: never NotReady within 3 s.
    assert!(
        stopped.elapsed() >= Duration::from_secs(3),
        "NotReady only after the grace period, got {:?}",
        stopped.elapsed()
    );
    let mc = api.get(&member).await.unwrap();
    let cond = mc
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(cond.reason, "HeartbeatFailed");
    let out = run_harness(&["start", &member]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    support::eventually(
        Duration::from_secs(30),
        "member Ready again",
        ready_is(ConditionStatus::True),
    )
    .await;
    hub.kill();
}
