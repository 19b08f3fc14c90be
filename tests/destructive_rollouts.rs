//! Rollouts that touch the whole federation or stop part of it: a RuntimeProfile upgrade
//! rolled member by member (and a broken one rolled back), and a member stopped in the
//! middle of a rollout. Run one at a time after the other tests (a default profile is
//! every workload's, a stopped member every test's).

mod support;

use std::time::{Duration, Instant};

use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use pinfed::api::runtime_profile::RuntimeProfile;
use pinfed::api::service::PinterestService;
use support::{Daemon, Federation, TestNamespace, join_all_once};

const WAIT: Duration = Duration::from_secs(120);

/// A hub with short grace periods (a stopped member fails over within seconds) and an
/// agent per member.
async fn federation(fed: &Federation, tag: &str) -> Vec<Daemon> {
    join_all_once(fed).await;
    let grace = ["--member-grace-secs", "5", "--failback-window-secs", "5"];
    let mut daemons = vec![support::spawn_hub(fed, &format!("hub-{tag}"), &grace)];
    daemons.extend(support::spawn_agents(fed));
    daemons
}

fn service(
    name: &str,
    replicas: i32,
    rollout: serde_json::Value,
    spread: bool,
) -> PinterestService {
    let placement = if spread {
        serde_json::json!({"spread": {"minClusters": 3}})
    } else {
        serde_json::json!({})
    };
    serde_json::from_value(serde_json::json!({
        "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestService",
        "metadata": {"name": name},
        "spec": {
            "owner": {"team": "ads", "contact": "ads@pinterest.com"},
            "replicas": replicas,
            "placement": placement,
            "rollout": rollout,
            "template": {"spec": {"containers": [{"name": "app", "image": "registry.example/app:1",
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}},
        }
    }))
    .unwrap()
}

/// Every container image of the Deployment a member runs for `name` (empty: none yet).
async fn images(fed: &Federation, member: &str, ns: &str, name: &str) -> Vec<String> {
    use k8s_openapi::api::apps::v1::Deployment;
    let api: Api<Deployment> = Api::namespaced(fed.client(member), ns);
    let Ok(Some(d)) = api.get_opt(name).await else {
        return Vec::new();
    };
    let Some(pod) = d.spec.and_then(|s| s.template.spec) else {
        return Vec::new();
    };
    pod.containers
        .iter()
        .chain(pod.init_containers.iter().flatten())
        .filter_map(|c| c.image.clone())
        .collect()
}

async fn status(api: &Api<PinterestService>, name: &str) -> serde_json::Value {
    support::status_of(api, name).await
}

/// The gate state of `member` in the rollout of `st`.
fn gate(st: &serde_json::Value, member: &str) -> String {
    st["rollout"]["members"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["cluster"] == member)
        .and_then(|m| m["state"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// When `member`'s gate in the rollout of `st` took its present state (whole seconds).
fn canary_since(st: &serde_json::Value, member: &str) -> i64 {
    let since = st["rollout"]["members"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["cluster"] == member)
        .and_then(|m| m["since"].as_str())
        .unwrap_or_else(|| panic!("{member} has no gate time: {}", st["rollout"]));
    since
        .parse::<k8s_openapi::jiff::Timestamp>()
        .unwrap_or_else(|e| panic!("gate time {since:?}: {e}"))
        .as_second()
}

fn has_mesh(imgs: &[String], tag: &str) -> bool {
    imgs.iter()
        .any(|i| i == &format!("registry.example/mesh:{tag}"))
}

/// Waits for revision `revision` (the sidecar `mesh:TAG`) to roll through every member,
/// asserting the canary (the first member) ran it before any other member did and passed
/// before they got it.
async fn rolls_canary_first(
    fed: &Federation,
    api: &Api<PinterestService>,
    ns: &str,
    tag: &str,
    revision: i64,
    logs: &dyn Fn() -> String,
) {
    let members = fed.member_names();
    let first = &members[0];
    // Images are read before the status: the hub writes a stage's slices before the
    // status saying the stage before it passed, so a status read first can be older
    // than the images read after it. Whether the order held is told by the canary's
    // own record: the second it passed is no later than a later stage was seen running
    // the new sidecar.
    let deadline = Instant::now() + WAIT;
    let mut canary_first = false;
    let mut others_seen: Option<(String, i64)> = None;
    loop {
        canary_first |= has_mesh(&images(fed, first, ns, "web").await, tag);
        if others_seen.is_none() {
            for m in &members[1..] {
                if has_mesh(&images(fed, m, ns, "web").await, tag) {
                    assert!(canary_first, "{m} got mesh:{tag} before the canary did");
                    let seen = k8s_openapi::jiff::Timestamp::now().as_second();
                    others_seen = Some((m.clone(), seen));
                    break;
                }
            }
        }
        let st = status(api, "web").await;
        if let Some((m, seen)) = &others_seen
            && gate(&st, first) == "Passed"
            && st["rollout"]["revision"] == revision
        {
            let passed = canary_since(&st, first);
            assert!(
                passed <= *seen,
                "{m} ran mesh:{tag} at {seen} s, before the canary passed at {passed} s: {}",
                st["rollout"]
            );
        }
        if st["rollout"]["phase"] == "Complete" && st["rollout"]["revision"] == revision {
            assert!(
                canary_first,
                "the rollout completed without the canary seen running mesh:{tag}: {}",
                st["rollout"]
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "revision {revision} (mesh:{tag}) never completed: {}\n{}",
            serde_json::to_string_pretty(&st["rollout"]).unwrap(),
            logs()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    for m in &members {
        support::eventually(WAIT, "every member runs the new sidecar", || async {
            has_mesh(&images(fed, m, ns, "web").await, tag)
        })
        .await;
    }
}

/// A default RuntimeProfile with one sidecar; removed when dropped (a test that fails
/// must not leave a default profile to the tests after it).
struct Profile(String);

impl Profile {
    async fn create(fed: &Federation, name: &str, sidecar_image: &str) -> Profile {
        let p: RuntimeProfile = serde_json::from_value(serde_json::json!({
            "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "RuntimeProfile",
            "metadata": {"name": name},
            "spec": {"version": name, "default": true,
                "sidecars": [{"container": {"name": "mesh", "image": sidecar_image}}]}
        }))
        .unwrap();
        let api: Api<RuntimeProfile> = Api::all(fed.hub());
        let _ = api.delete(name, &DeleteParams::default()).await;
        api.create(&PostParams::default(), &p).await.unwrap();
        Profile(name.to_string())
    }
}

impl Drop for Profile {
    fn drop(&mut self) {
        let kc = std::env::var("PINFED_E2E_KUBECONFIG").unwrap_or_default();
        let _ = std::process::Command::new(support::kubectl_bin())
            .args([
                "--kubeconfig",
                &kc,
                "--context",
                "hub",
                "delete",
                "runtimeprofile",
                &self.0,
                "--ignore-not-found",
            ])
            .output();
        // And the hub's snapshots of its earlier contents.
        let _ = std::process::Command::new(support::kubectl_bin())
            .args([
                "--kubeconfig",
                &kc,
                "--context",
                "hub",
                "delete",
                "runtimeprofile",
                "-l",
                &format!("rollout.pinterest.com/snapshot-of={}", self.0),
                "--ignore-not-found",
            ])
            .output();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn destructive_a_runtime_profile_upgrade_rolls_member_by_member_and_a_broken_one_is_rolled_back()
 {
    let fed = Federation::connect().await;
    let daemons = federation(&fed, "profile-rollout").await;
    let logs = || daemons[0].log_tail();
    let hub = fed.hub();
    let ns = TestNamespace::create(&hub, "rt-rollout").await;
    let api: Api<PinterestService> = Api::namespaced(hub.clone(), &ns.name);
    let members = fed.member_names();
    let first = members[0].clone();
    let policy = serde_json::json!({
        "stages": [{"name": "canary", "clusters": [first], "soakSeconds": 2}, {"name": "rest"}],
        "progressDeadlineSeconds": 20,
    });
    api.create(&PostParams::default(), &service("web", 3, policy, true))
        .await
        .unwrap();
    support::eventually(WAIT, "revision 1 available everywhere", || async {
        let st = status(&api, "web").await;
        st["rollout"]["phase"] == "Complete" && st["availableReplicas"] == 3
    })
    .await;

    // A new default profile: a new revision of the service, the canary first.
    let _good = Profile::create(&fed, "rt-1-good", "registry.example/mesh:2").await;
    rolls_canary_first(&fed, &api, &ns.name, "2", 2, &logs).await;

    // The same profile edited in place (same version, a new sidecar): a new revision too,
    // rolled out the same way. The old content is kept on the hub as a snapshot, which
    // the members not yet there run meanwhile.
    let profiles: Api<RuntimeProfile> = Api::all(hub.clone());
    let edit = serde_json::json!({"spec": {"sidecars": [{"container": {"name": "mesh", "image": "registry.example/mesh:3"}}]}});
    profiles
        .patch("rt-1-good", &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .unwrap();
    rolls_canary_first(&fed, &api, &ns.name, "3", 3, &logs).await;
    let snapshots = profiles
        .list(
            &kube::api::ListParams::default().labels("rollout.pinterest.com/snapshot-of=rt-1-good"),
        )
        .await
        .unwrap();
    assert!(
        snapshots
            .items
            .iter()
            .any(|p| p
                .spec
                .sidecars
                .iter()
                .any(|s| s.container.image.as_deref() == Some("registry.example/mesh:2"))),
        "no snapshot of the profile's content before the edit: {:?}",
        snapshots
            .items
            .iter()
            .map(|p| (&p.metadata.name, &p.spec.sidecars))
            .collect::<Vec<_>>()
    );
    support::eventually(WAIT, "an EditedInPlace Event on the profile", || async {
        support::events(&hub, None)
            .await
            .iter()
            .any(|e| e.reason == "EditedInPlace" && e.name == "rt-1-good")
    })
    .await;

    // The profile edited in place again, into a sidecar that breaks pods: it stops at the
    // canary and is rolled back there, to content only the hub's snapshot still has.
    let broken = serde_json::json!({"spec": {"sidecars": [{"container": {"name": "mesh", "image": "registry.example/mesh:broken"}}]}});
    profiles
        .patch("rt-1-good", &PatchParams::default(), &Patch::Merge(&broken))
        .await
        .unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        for m in &members[1..] {
            let imgs = images(&fed, m, &ns.name, "web").await;
            assert!(
                !has_mesh(&imgs, "broken"),
                "{m} got the broken profile: {imgs:?}"
            );
        }
        let st = status(&api, "web").await;
        if st["rollout"]["phase"] == "RolledBack" {
            assert_eq!(st["rollout"]["revision"], 4, "{}", st["rollout"]);
            assert_eq!(gate(&st, &first), "RolledBack");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the broken profile was never rolled back: {}\n{}",
            serde_json::to_string_pretty(&st["rollout"]).unwrap(),
            logs()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    support::eventually(WAIT, "the canary runs the good profile again", || async {
        has_mesh(&images(&fed, &first, &ns.name, "web").await, "3")
            && status(&api, "web").await["availableReplicas"] == 3
    })
    .await;
    // Every member (push and pull) resolves the pin of the old content to the snapshot:
    // no slice says its runtime version is unknown.
    for m in &members {
        let slices: Api<PinterestService> = Api::namespaced(fed.client(m), &ns.name);
        support::eventually(
            WAIT,
            &format!("{m} runs the snapshot's content"),
            || async {
                let st = support::status_of(&slices, "web").await;
                let unknown = st["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["reason"] == "UnknownRuntimeVersion");
                !unknown && has_mesh(&images(&fed, m, &ns.name, "web").await, "3")
            },
        )
        .await;
    }
    ns.delete().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn destructive_a_member_stopped_mid_rollout_never_passes_and_gets_the_current_revision_back()
{
    let fed = Federation::connect().await;
    let daemons = federation(&fed, "stopped-rollout").await;
    let logs = || daemons[0].log_tail();
    let hub = fed.hub();
    let ns = TestNamespace::create(&hub, "stop-rollout").await;
    let api: Api<PinterestService> = Api::namespaced(hub.clone(), &ns.name);
    let members = fed.member_names();
    // A push member stops (the harness stops its API server; its agent goes quiet).
    let stopped = members
        .iter()
        .find(|m| !fed.is_pull(m) && **m != members[0])
        .unwrap()
        .clone();
    let policy = serde_json::json!({
        "stages": [{"name": "canary", "clusters": [members[0]], "soakSeconds": 2},
                   {"name": "rest", "approval": true}],
        "progressDeadlineSeconds": 60,
    });
    // Spread over every member: a hub that has just started may see only some members
    // Ready at the first decision (seen: all 6 on the pull member); a spread that is short
    // looks again until the member to stop holds a share.
    api.create(&PostParams::default(), &service("api", 6, policy, true))
        .await
        .unwrap();
    support::eventually(
        WAIT,
        "revision 1 available everywhere, the member to stop holding a share",
        || async {
            let st = status(&api, "api").await;
            let placed: Vec<&str> = st["placement"]["placements"]
                .as_array()
                .map(|ps| ps.iter().filter_map(|p| p["cluster"].as_str()).collect())
                .unwrap_or_default();
            st["rollout"]["phase"] == "Complete"
                && st["availableReplicas"] == 6
                && placed.contains(&stopped.as_str())
                && placed.contains(&members[0].as_str())
        },
    )
    .await;
    let patch = serde_json::json!({"spec": {"template": {"spec": {"containers": [
        {"name": "app", "image": "registry.example/app:2",
         "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}}}});
    api.patch("api", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    support::eventually(WAIT, "the rest waits for approval", || async {
        status(&api, "api").await["rollout"]["phase"] == "WaitingForApproval"
    })
    .await;
    let out = support::run_harness(&["stop", &stopped]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let restart = scopeguard(stopped.clone());
    let approve = serde_json::json!({"metadata": {"annotations": {
        pinfed::api::rollout::ANNOTATION_APPROVED: "2/1"}}});
    api.patch("api", &PatchParams::default(), &Patch::Merge(&approve))
        .await
        .unwrap();
    // The stopped member never passes; once its work fails over it leaves the rollout
    // (Skipped) and the rollout completes on the others.
    let deadline = Instant::now() + WAIT;
    loop {
        let st = status(&api, "api").await;
        assert_ne!(
            gate(&st, &stopped),
            "Passed",
            "a stopped member passed: {}",
            st["rollout"]
        );
        if st["rollout"]["phase"] == "Complete" {
            assert_eq!(gate(&st, &stopped), "Skipped", "{}", st["rollout"]);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the rollout never completed without the stopped member: {}\n{}",
            serde_json::to_string_pretty(&st["rollout"]).unwrap(),
            logs()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    drop(restart);
    // Back, it fails back and runs the current revision (2), not a half-rolled one.
    support::eventually(WAIT, "the returned member runs revision 2", || async {
        images(&fed, &stopped, &ns.name, "api")
            .await
            .first()
            .map(String::as_str)
            == Some("registry.example/app:2")
            && status(&api, "api").await["clusters"]
                .as_array()
                .is_some_and(|c| {
                    c.iter()
                        .any(|e| e["cluster"] == stopped.as_str() && e["revision"] == 2)
                })
    })
    .await;
    ns.delete().await;
}

/// Starts a stopped member when dropped (also while a failing test unwinds).
struct StartOnDrop(Option<String>);

fn scopeguard(member: String) -> StartOnDrop {
    StartOnDrop(Some(member))
}

impl Drop for StartOnDrop {
    fn drop(&mut self) {
        if let Some(c) = self.0.take() {
            let out = support::run_harness(&["start", &c]);
            if !out.status.success() && !std::thread::panicking() {
                panic!(
                    "pinfed-e2e start {c}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
}
