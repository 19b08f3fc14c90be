//! The kustomize overlays in deploy/overlays install for real. Each test renders an
//! overlay through a throwaway overlay of its own on top (a unique namespace and name
//! suffix, so tests running in parallel on the shared topology never touch each other's
//! or the real `pinfed-*` ClusterRoles), applies it server-side to a member of the
//! running topology, and sees the pods admitted by Pod Security `restricted` and Running
//! on the kwok nodes (kwok fakes the pods, so the image need not be pullable there). The
//! CRDs the overlays carry are checked and dry-run but not applied: the topology's members
//! already serve them (`join` installs them), and other tests depend on them.

mod support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, PostParams};
use support::{Federation, join_all, kubectl_in, unique_name};

fn kubectl() -> PathBuf {
    support::kubectl_bin()
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `dir` relative to `from` (kustomize refuses absolute resource paths).
fn relative(from: &Path, dir: &Path) -> String {
    let up = from.components().count() - 1;
    format!(
        "{}{}",
        "../".repeat(up),
        dir.to_str().unwrap().trim_start_matches('/')
    )
}

/// An overlay rendered into a namespace and with a name suffix of the test's own.
struct Rendered {
    namespace: String,
    suffix: String,
    crds: Vec<serde_json::Value>,
    objects: Vec<serde_json::Value>,
}

/// Renders `deploy/overlays/<overlay>` with `kubectl kustomize` under a throwaway overlay
/// that sets a unique namespace and name suffix and adds `patches` (kustomize `patches:`
/// entries, YAML).
fn render(overlay: &str, patches: &str) -> Rendered {
    let id = unique_name("deploytest");
    let dir = std::env::temp_dir().join(&id);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let base = relative(&dir, &repo().join("deploy/overlays").join(overlay));
    let suffix = id.trim_start_matches("deploytest").to_string();
    std::fs::write(
        dir.join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
             resources:\n  - {base}\nnamespace: {id}\nnameSuffix: \"{suffix}\"\npatches:\n{patches}"
        ),
    )
    .expect("write the test overlay");
    let out = Command::new(kubectl())
        .arg("kustomize")
        .arg(&dir)
        .output()
        .expect("kubectl kustomize");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "kubectl kustomize of deploy/overlays/{overlay} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let (crds, objects): (Vec<_>, Vec<_>) =
        pinfed::api::yaml::documents::<serde_json::Value>(&text)
            .expect("rendered YAML")
            .into_iter()
            .partition(|v| v["kind"] == "CustomResourceDefinition");
    Rendered {
        namespace: id,
        suffix,
        crds,
        objects,
    }
}

fn to_yaml(objs: &[serde_json::Value]) -> String {
    objs.iter()
        .map(|o| pinfed::api::yaml::to_string(o).expect("yaml"))
        .collect::<Vec<_>>()
        .join("---\n")
}

/// What a test applied to one cluster; deleted however the test ends (the CRDs never).
struct Applied<'a> {
    fed: &'a Federation,
    context: String,
    manifest: String,
}

impl Drop for Applied<'_> {
    fn drop(&mut self) {
        let _ = Command::new(kubectl())
            .args(["--kubeconfig", self.fed.kubeconfig.to_str().unwrap()])
            .args(["--context", &self.context])
            .args(["delete", "--ignore-not-found", "--wait=false", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .and_then(|mut c| {
                c.stdin
                    .take()
                    .expect("stdin")
                    .write_all(self.manifest.as_bytes())?;
                c.wait()
            });
    }
}

impl Rendered {
    /// The rendered overlay carries every CRD, and the cluster serves each (the test does
    /// not apply them: they are shared), and a server-side dry run accepts them.
    async fn check_crds(&self, fed: &Federation, context: &str) {
        let want: Vec<String> = pinfed::api::workload::crds()
            .iter()
            .map(|c| c.metadata.name.clone().unwrap())
            .collect();
        let got: Vec<&str> = self
            .crds
            .iter()
            .filter_map(|c| c["metadata"]["name"].as_str())
            .collect();
        for name in &want {
            assert!(got.contains(&name.as_str()), "the overlay lacks CRD {name}");
            let crd = Api::<CustomResourceDefinition>::all(fed.client(context))
                .get(name)
                .await
                .unwrap_or_else(|e| panic!("CRD {name} in {context}: {e}"));
            assert!(crd.status.is_some(), "{name} in {context} has no status");
        }
        kubectl_in(
            fed,
            context,
            &[
                "apply",
                "--dry-run=server",
                "--server-side",
                "--force-conflicts",
                "--field-manager=pinfed-deploy-test",
                "-f",
                "-",
            ],
            &to_yaml(&self.crds),
        );
    }

    /// The namespace the overlay creates enforces Pod Security `restricted`.
    fn check_namespace(&self) {
        let ns = self
            .objects
            .iter()
            .find(|o| o["kind"] == "Namespace")
            .expect("the overlay creates its namespace");
        assert_eq!(ns["metadata"]["name"], self.namespace.as_str());
        assert_eq!(
            ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"], "restricted",
            "{ns}"
        );
    }

    /// Applies everything but the CRDs (plus `extra`, in the overlay's namespace).
    fn apply<'a>(&self, fed: &'a Federation, context: &str, extra: &str) -> Applied<'a> {
        let manifest = to_yaml(&self.objects);
        let applied = Applied {
            fed,
            context: context.to_string(),
            manifest: manifest.clone(),
        };
        let out = kubectl_in(
            fed,
            context,
            &[
                "apply",
                "--server-side",
                "--field-manager=pinfed-deploy-test",
                "-f",
                "-",
            ],
            &manifest,
        );
        eprintln!("{context}:\n{out}");
        if !extra.is_empty() {
            kubectl_in(
                fed,
                context,
                &["apply", "-n", &self.namespace, "-f", "-"],
                extra,
            );
        }
        applied
    }
}

/// A privileged pod is refused in the namespace: Pod Security `restricted` is enforced
/// there, so the pods that do run passed it.
async fn assert_restricted_is_enforced(fed: &Federation, context: &str, namespace: &str) {
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "privileged-probe"},
        "spec": {"containers": [{"name": "c", "image": "pinfed:0.0.0",
                 "securityContext": {"privileged": true}}]}
    }))
    .unwrap();
    let err = Api::<Pod>::namespaced(fed.client(context), namespace)
        .create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &pod,
        )
        .await
        .expect_err("a privileged pod must be refused under Pod Security restricted");
    assert!(
        err.to_string()
            .contains("violates PodSecurity \"restricted"),
        "{err}"
    );
}

/// Waits until `replicas` pods of `app` (plus the suffix) are Running on kwok nodes.
async fn assert_running_on_kwok(
    fed: &Federation,
    context: &str,
    namespace: &str,
    app: &str,
    replicas: usize,
) {
    let pods: Api<Pod> = Api::namespaced(fed.client(context), namespace);
    let lp = ListParams::default().labels(&format!("app.kubernetes.io/name={app}"));
    let running = || async {
        pods.list(&lp).await.is_ok_and(|l| {
            l.items
                .iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .count()
                == replicas
        })
    };
    let start = std::time::Instant::now();
    while !running().await {
        if start.elapsed() > Duration::from_secs(120) {
            // Why not: a pod Pod Security refused shows as the ReplicaSet's FailedCreate.
            let events = kubectl_in(
                fed,
                context,
                &[
                    "get",
                    "events",
                    "-n",
                    namespace,
                    "--field-selector",
                    "type=Warning",
                ],
                "",
            );
            panic!(
                "timed out after 120s waiting for {replicas} pods of {app} Running in \
                 {context}/{namespace}; warnings there:\n{events}"
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let nodes: Api<Node> = Api::all(fed.client(context));
    for p in pods.list(&lp).await.expect("list pods").items {
        let spec = p.spec.expect("pod spec");
        let node = spec.node_name.expect("a Running pod has a node");
        let n = nodes.get(&node).await.expect("node");
        assert_eq!(
            n.metadata
                .annotations
                .unwrap_or_default()
                .get("kwok.x-k8s.io/node")
                .map(String::as_str),
            Some("fake"),
            "{node} is a kwok node"
        );
        let c = &spec.containers[0];
        assert_eq!(
            c.image.as_deref(),
            Some(pinfed::hub::join::DEFAULT_AGENT_IMAGE)
        );
        let sc = c.security_context.as_ref().expect("a securityContext");
        assert_eq!(sc.read_only_root_filesystem, Some(true));
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert!(c.readiness_probe.is_some() && c.liveness_probe.is_some());
        let limits = c
            .resources
            .as_ref()
            .and_then(|r| r.limits.clone())
            .unwrap_or_default();
        assert!(limits.contains_key("memory"), "{app} has a memory limit");
    }
}

#[test]
fn crds_kustomization_lists_every_crd() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/crds");
    let text = std::fs::read_to_string(format!("{dir}/kustomization.yaml"))
        .expect("crds/kustomization.yaml");
    for crd in pinfed::api::workload::crds() {
        let file = pinfed::api::workload::crd_file_name(&crd);
        assert!(
            text.contains(&format!("- {file}")),
            "crds/kustomization.yaml does not list {file}"
        );
    }
}

#[test]
fn the_overlays_render_with_their_parts() {
    for (overlay, deployments) in [
        ("hub-cluster", &["pinfed-hub", "pinfed-jss"][..]),
        ("member-cluster", &["pinfed-agent"][..]),
        (
            "single-cluster",
            &["pinfed-hub", "pinfed-jss", "pinfed-agent"][..],
        ),
    ] {
        let r = render(overlay, "  []\n");
        r.check_namespace();
        // The hub's pod policy goes with the hub, never into a member (where it would
        // refuse the hub's own slices).
        let pod_policy = r.objects.iter().any(|o| {
            o["kind"] == "ValidatingAdmissionPolicy"
                && o["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("pinfed-hub-pod-policy"))
        });
        assert_eq!(
            pod_policy,
            overlay != "member-cluster",
            "{overlay}: the hub's pod policy"
        );
        // So does the policy that sets the hub's finalizer on each new workload.
        let finalizer_policy = r.objects.iter().any(|o| {
            o["kind"] == "MutatingAdmissionPolicy"
                && o["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("pinfed-hub-finalizer"))
        });
        assert_eq!(
            finalizer_policy,
            overlay != "member-cluster",
            "{overlay}: the hub's finalizer policy"
        );
        for d in r.objects.iter().filter(|o| o["kind"] == "Deployment") {
            let spec = &d["spec"]["template"]["spec"];
            assert_eq!(
                spec["containers"][0]["image"],
                pinfed::hub::join::DEFAULT_AGENT_IMAGE,
                "{overlay}: the image deploy/image/build tags for this version"
            );
            assert_eq!(
                spec["securityContext"]["runAsNonRoot"], true,
                "{overlay}: {d}"
            );
            assert_eq!(
                spec["securityContext"]["seccompProfile"]["type"], "RuntimeDefault",
                "{overlay}: {d}"
            );
            assert_eq!(
                spec["containers"][0]["securityContext"]["capabilities"]["drop"],
                serde_json::json!(["ALL"]),
                "{overlay}: {d}"
            );
        }
        for d in deployments {
            let name = format!("{d}{}", r.suffix);
            for kind in [
                "Deployment",
                "PodDisruptionBudget",
                "ServiceAccount",
                "ClusterRole",
            ] {
                assert!(
                    r.objects
                        .iter()
                        .any(|o| o["kind"] == kind && o["metadata"]["name"] == name.as_str()),
                    "{overlay}: no {kind} {name}"
                );
            }
        }
    }
}

#[tokio::test]
async fn the_member_overlay_runs_the_agent_under_pod_security_restricted() {
    let fed = Federation::connect().await;
    join_all(&fed); // the members serve the CRDs
    let member = fed.member_names()[0].clone();
    // The member's name, patched in as a user of the overlay does.
    let r = render(
        "member-cluster",
        &format!(
            "  - patch: |-\n      apiVersion: apps/v1\n      kind: Deployment\n      metadata:\n        \
             name: pinfed-agent\n        namespace: pinfed-system\n      spec:\n        template:\n          \
             spec:\n            containers:\n              - name: agent\n                env:\n                  \
             - name: PINFED_CLUSTER_NAME\n                    value: {member}\n"
        ),
    );
    r.check_namespace();
    r.check_crds(&fed, &member).await;
    let deployment = r
        .objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("a Deployment");
    let env = &deployment["spec"]["template"]["spec"]["containers"][0]["env"];
    assert!(
        env.as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "PINFED_CLUSTER_NAME" && e["value"] == member.as_str()),
        "{env}"
    );
    let _applied = r.apply(&fed, &member, "");
    assert_restricted_is_enforced(&fed, &member, &r.namespace).await;
    assert_running_on_kwok(&fed, &member, &r.namespace, "pinfed-agent", 2).await;
}

#[tokio::test]
async fn the_hub_overlay_runs_the_hub_and_the_jss_under_pod_security_restricted() {
    let fed = Federation::connect().await;
    join_all(&fed);
    // A member stands in for a hub cluster: it serves the same CRDs.
    let members = fed.member_names();
    let cluster = members.get(1).unwrap_or(&members[0]).clone();
    let r = render("hub-cluster", "  []\n");
    r.check_namespace();
    r.check_crds(&fed, &cluster).await;
    // The Secrets docs/install.md has the user create first (named as the Deployment
    // refers to them: the suffix renames only what the overlay itself holds).
    let cert = rcgen::generate_simple_self_signed(vec!["pinfed-jss.pinfed-system.svc".into()])
        .expect("self-signed certificate");
    let secrets = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
         "metadata": {"name": "pinfed-jss-tls"},
         "stringData": {"tls.crt": cert.cert.pem(), "tls.key": cert.key_pair.serialize_pem()}},
        {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
         "metadata": {"name": "pinfed-jss-auth"},
         "stringData": {"tokens.yaml": "tokens:\n  - {user: alice, token: not-a-real-token, teams: [ads]}\n\
                        teams:\n  ads: {namespaces: [ads]}\n"}},
    ]});
    let _applied = r.apply(&fed, &cluster, &serde_json::to_string(&secrets).unwrap());
    assert_restricted_is_enforced(&fed, &cluster, &r.namespace).await;
    assert_running_on_kwok(&fed, &cluster, &r.namespace, "pinfed-hub", 2).await;
    assert_running_on_kwok(&fed, &cluster, &r.namespace, "pinfed-jss", 2).await;
    let svc = Api::<Service>::namespaced(fed.client(&cluster), &r.namespace)
        .get(&format!("pinfed-jss{}", r.suffix))
        .await
        .expect("the JSS Service");
    let port = &svc.spec.unwrap().ports.unwrap()[0];
    assert_eq!((port.port, port.name.as_deref()), (443, Some("https")));
    let pvc = Api::<PersistentVolumeClaim>::namespaced(fed.client(&cluster), &r.namespace)
        .get(&format!("pinfed-jss-artifacts{}", r.suffix))
        .await
        .expect("the artifact store's claim");
    assert_eq!(
        pvc.status.and_then(|s| s.phase).as_deref(),
        Some("Bound"),
        "the artifact store's claim is bound (by the topology's default StorageClass)"
    );
}

/// Runs `pinfed` against the topology for at most 60 s (a daemon that should have refused
/// to start would run on).
fn pinfed_refusal(fed: &Federation, args: &[&str]) -> (bool, String) {
    let out = Command::new("timeout")
        .arg("60")
        .arg(support::pinfed_bin())
        .args(args)
        .env("KUBECONFIG", &fed.kubeconfig)
        .output()
        .expect("run pinfed under timeout");
    let timed_out = out.status.code() == Some(124);
    (
        !out.status.success() && !timed_out,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn the_hub_and_the_agent_refuse_the_wrong_side_of_a_federation() {
    let fed = Federation::connect().await;
    join_all(&fed);
    let hub = fed.topology.hub.name.clone();
    let member = fed.member_names()[0].clone();
    let port = support::free_port().to_string();
    let metrics = format!("127.0.0.1:{port}");
    // The member overlay applied to the hub cluster, named for a real member.
    let (refused, stderr) = pinfed_refusal(
        &fed,
        &[
            "agent",
            "--context",
            &hub,
            "--cluster-name",
            &member,
            "--no-leader-election",
            "--metrics-addr",
            &metrics,
        ],
    );
    assert!(
        refused && stderr.contains("this cluster is a federation hub"),
        "an agent in the hub cluster: {stderr}"
    );
    // The hub overlay applied to a member.
    let (refused, stderr) = pinfed_refusal(
        &fed,
        &[
            "hub",
            "--context",
            &member,
            "--no-leader-election",
            "--metrics-addr",
            &metrics,
        ],
    );
    assert!(
        refused && stderr.contains("this cluster is a member of a federation"),
        "a hub in a member cluster: {stderr}"
    );
}
