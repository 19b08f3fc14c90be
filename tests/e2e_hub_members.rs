//! Member registry: `pinfed join` registers every member; the hub connects with the
//! least-privilege ServiceAccount and reports Ready, version and capacity per member.

mod support;

use std::time::Duration;

use kube::api::Api;
use pinfed::api::federation::MemberCluster;
use pinfed::api::quantity::Milli;
use pinfed::topology::Topology;
use support::{Federation, eventually, join_all};

#[tokio::test]
async fn joined_members_report_ready_version_and_capacity() {
    let fed = Federation::connect().await;
    join_all(&fed);
    let hub = support::spawn_hub(&fed, "hub-members", &[]);
    // Every member's agent renews the Lease the hub reads as its sign of life; a pull
    // member's agent is also the only source of its capacity and version.
    let _agents = support::spawn_agents(&fed);
    let api: Api<MemberCluster> = Api::all(fed.hub());
    for m in &fed.topology.members {
        let name = m.name.clone();
        let api = api.clone();
        let expected_cpu = Topology::nodes(m)
            .iter()
            .fold(Milli::ZERO, |a, n| a + n.cpu);
        let expected_gpu: u32 = Topology::nodes(m).iter().map(|n| n.gpu).sum();
        eventually(
            Duration::from_secs(60),
            &format!("{name} Ready with capacity\n{}", hub.log_tail()),
            || {
                let (api, name) = (api.clone(), name.clone());
                async move {
                    let Ok(mc) = api.get(&name).await else {
                        return false;
                    };
                    let Some(s) = mc.status else { return false };
                    let ready = s.conditions.iter().any(|c| {
                        c.type_ == "Ready" && c.status == pinfed::api::common::ConditionStatus::True
                    });
                    let cpu = s
                        .allocatable
                        .as_ref()
                        .and_then(|a| a.cpu.as_ref())
                        .and_then(|q| Milli::parse(&q.0).ok());
                    let gpu = s
                        .allocatable
                        .as_ref()
                        .and_then(|a| a.gpus.as_ref())
                        .and_then(|q| Milli::parse(&q.0).ok());
                    ready
                        // The agent's Lease renewal, as the hub read it.
                        && s.agent_renew_time.is_some()
                        && s.kubernetes_version.as_deref() == Some("v1.36.3")
                        && cpu == Some(expected_cpu)
                        && gpu == Some(Milli::from_units(expected_gpu.into()))
                        && s.last_heartbeat_time.is_some_and(|t| {
                            // Written by this hub, not left over from an earlier one.
                            k8s_openapi::jiff::Timestamp::now().as_second() - t.0.as_second() <= 5
                        })
                }
            },
        )
        .await;
        let mc = api.get(&name).await.unwrap();
        if fed.is_pull(&name) {
            // The hub holds no credential for a pull member; its capacity is the agent's report.
            assert!(mc.spec.secret_ref.is_none(), "{name}: {:?}", mc.spec);
            let report = Api::<pinfed::api::member_slice::MemberReport>::namespaced(
                fed.hub(),
                &format!("pinfed-member-{name}"),
            )
            .get(&format!("pinfed-agent-{name}"))
            .await
            .unwrap()
            .status
            .and_then(|s| s.report)
            .expect("the agent's report");
            assert!(
                report.healthy && !report.node_pools.is_empty(),
                "{report:?}"
            );
            let secrets: Api<k8s_openapi::api::core::v1::Secret> =
                Api::namespaced(fed.hub(), support::SYSTEM_NAMESPACE);
            assert!(
                secrets
                    .get_opt(&format!("member-{name}"))
                    .await
                    .unwrap()
                    .is_none(),
                "no kubeconfig Secret for pull member {name} on the hub"
            );
        }
    }
    // The hub serves its metrics, including per-member health.
    let addr = hub.metrics_addr.clone().expect("the hub serves metrics");
    let url = format!("http://{addr}/metrics");
    eventually(Duration::from_secs(20), "the member_ready metric", || {
        let url = url.clone();
        async move {
            support::http_get(&url)
                .await
                .contains("pinfed_hub_member_ready{member=\"use1a\"} 1")
        }
    })
    .await;
    // Queue depth per kind: nothing is waiting on an idle hub.
    let metrics = support::http_get(&url).await;
    for kind in pinfed::api::workload::WorkloadKind::ALL {
        let line = format!("pinfed_hub_queue_depth{{kind=\"{}\"}}", kind.as_str());
        assert!(metrics.contains(&line), "{line} missing:\n{metrics}");
    }
    assert!(
        support::http_get(&format!("http://{addr}/healthz"))
            .await
            .ends_with("ok")
    );
    hub.kill();
}

#[tokio::test]
async fn join_install_agent_puts_the_agent_deployment_into_the_member() {
    use k8s_openapi::api::apps::v1::Deployment;
    let fed = Federation::connect().await;
    let member = fed.member_names()[0].clone();
    let topology = std::env::var("PINFED_E2E_TOPOLOGY").expect("PINFED_E2E_TOPOLOGY");
    let join_with_agent = |image: &str| {
        support::pinfed(
            &fed,
            &[
                "join",
                &member,
                "--member-context",
                &member,
                "--hub-context",
                "hub",
                // Keep the member's zone and labels as the other tests expect them.
                "--from-topology",
                &topology,
                "--install-agent",
                "--agent-image",
                image,
            ],
        )
    };
    let out = join_with_agent("registry.example/pinfed:e2e");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "join --install-agent: {stderr}");
    for line in [
        format!("agent installed in {member}: image registry.example/pinfed:e2e"),
        "Deployment pinfed-system/pinfed-agent".to_string(),
        "PodDisruptionBudget pinfed-system/pinfed-agent".to_string(),
        "ClusterRole pinfed-agent".to_string(),
    ] {
        assert!(stderr.contains(&line), "{line:?} not printed:\n{stderr}");
    }
    let deployments: Api<Deployment> = Api::namespaced(fed.client(&member), "pinfed-system");
    let d = deployments.get("pinfed-agent").await.unwrap();
    let c = &d
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0];
    assert_eq!(c.image.as_deref(), Some("registry.example/pinfed:e2e"));
    assert!(
        c.env.iter().flatten().any(|e| e.name == "PINFED_CLUSTER_NAME"
            && e.value.as_deref() == Some(member.as_str())),
        "{:?}",
        c.env
    );
    // kwok runs the pods: the agent Deployment becomes available with its RBAC in place.
    eventually(
        Duration::from_secs(60),
        "agent Deployment available",
        || async {
            deployments
                .get("pinfed-agent")
                .await
                .ok()
                .and_then(|d| d.status?.available_replicas)
                == Some(2)
        },
    )
    .await;
    // An agent of another version is not replaced unasked, and a malformed image
    // reference is refused before anything is written.
    for (image, refusal) in [
        (
            "registry.example/pinfed:other",
            "already runs an agent of another version",
        ),
        ("registry.example/Pinfed:e2e", "is not an image reference"),
    ] {
        let out = join_with_agent(image);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(refusal),
            "join --agent-image {image}: {stderr}"
        );
        let d = deployments.get("pinfed-agent").await.unwrap();
        assert_eq!(
            d.spec.unwrap().template.spec.unwrap().containers[0]
                .image
                .as_deref(),
            Some("registry.example/pinfed:e2e"),
            "the agent is unchanged after {image}"
        );
    }
    let _ = deployments
        .delete("pinfed-agent", &Default::default())
        .await;
    let _ = Api::<k8s_openapi::api::policy::v1::PodDisruptionBudget>::namespaced(
        fed.client(&member),
        "pinfed-system",
    )
    .delete("pinfed-agent", &Default::default())
    .await;
}
