//! The Karmada peer (`peers: {karmada: true}`): brings up a hub, two light members and a
//! Karmada control plane that joins them, then checks that a Deployment with a
//! PropagationPolicy dividing its replicas on Karmada reaches every member's API server.
//!
//! Needs Karmada v1.18.2 built by `e2e/peers/karmada/build KARMADA_SRC` (or
//! PINFED_KARMADA_BIN_DIR and PINFED_KARMADA_SRC_DIR); without it the test fails with the
//! harness's message saying so. Not part of `cargo test` (`test = false` in Cargo.toml: a
//! fresh machine has no Karmada source); run it with
//! `cargo test -p pinfed-e2e --test karmada_peer` (docs/e2e.md). Its state directory is
//! `PINFED_E2E_DIR` when set, else a fresh one under the temporary directory.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn harness(state_dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_pinfed-e2e"))
        .args(args)
        .env("PINFED_E2E_DIR", state_dir)
        .output()
        .expect("run pinfed-e2e")
}

fn kubectl(kubeconfig: &str, context: &str, args: &[&str], stdin: Option<&str>) -> (bool, String) {
    let bin = std::env::var("PINFED_BIN_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| {
            std::path::PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/pinfed/bin")
        });
    let mut child = Command::new(bin.join("kubectl"))
        .args(["--kubeconfig", kubeconfig, "--context", context])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run kubectl (the toolchain's, e2e/toolchain/build)");
    let mut input = child.stdin.take().unwrap();
    input
        .write_all(stdin.unwrap_or_default().as_bytes())
        .unwrap();
    drop(input);
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

const TOPOLOGY: &str = "hub: {name: hub}
peers: {karmada: true}
members:
  - name: kp-a
    light: true
    nodePools:
      - {name: general, count: 2, cpu: \"8\", memory: 32Gi, pods: 110}
  - name: kp-b
    light: true
    nodePools:
      - {name: general, count: 2, cpu: \"8\", memory: 32Gi, pods: 110}
";

const WORKLOAD: &str = "apiVersion: v1
kind: Namespace
metadata: {name: karmada-check}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: karmada-check}
spec:
  replicas: 4
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: registry.example/web:1}]
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {name: web, namespace: karmada-check}
spec:
  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, name: web}]
  placement:
    clusterAffinity: {clusterNames: [kp-a, kp-b]}
    replicaScheduling:
      replicaSchedulingType: Divided
      replicaDivisionPreference: Weighted
      weightPreference:
        staticWeightList:
          - {targetCluster: {clusterNames: [kp-a]}, weight: 1}
          - {targetCluster: {clusterNames: [kp-b]}, weight: 1}
";

#[test]
fn a_deployment_propagated_by_karmada_reaches_every_member_divided() {
    let state = std::env::var_os("PINFED_E2E_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::env::temp_dir().join(format!("pinfed-e2e-karmada-{}", std::process::id()))
        });
    let _ = std::fs::remove_dir_all(&state);
    let file = std::env::temp_dir().join(format!("karmada-topology-{}.yaml", std::process::id()));
    std::fs::write(&file, TOPOLOGY).unwrap();
    let up = harness(&state, &["up", file.to_str().unwrap()]);
    let result = std::panic::catch_unwind(|| {
        let err = String::from_utf8_lossy(&up.stderr);
        assert!(
            up.status.success(),
            "e2e up of a topology with a Karmada peer failed:\n{err}"
        );
        assert!(err.contains("every member's Cluster is Ready"), "{err}");
        let out = String::from_utf8_lossy(&up.stdout);
        let kubeconfig = out
            .lines()
            .last()
            .and_then(|l| l.strip_prefix("KUBECONFIG="))
            .expect("up prints KUBECONFIG=")
            .to_string();

        // Every Karmada component runs as a harness component.
        let status = harness(&state, &["status"]);
        let status = String::from_utf8_lossy(&status.stdout);
        for c in [
            "kube-apiserver",
            "karmada-aggregated-apiserver",
            "karmada-webhook",
            "karmada-scheduler",
            "karmada-controller-manager",
        ] {
            assert!(
                status
                    .lines()
                    .any(|l| l.starts_with("karmada ") && l.contains(c) && l.contains("running")),
                "{c} of karmada not running:\n{status}"
            );
        }

        let (ok, text) = kubectl(
            &kubeconfig,
            "karmada",
            &["apply", "-f", "-"],
            Some(WORKLOAD),
        );
        assert!(ok, "applying the workload on Karmada: {text}");
        // The webhook defaulted the policy (its permanent id), so it ran.
        let (_, labels) = kubectl(
            &kubeconfig,
            "karmada",
            &[
                "get",
                "propagationpolicy",
                "web",
                "-n",
                "karmada-check",
                "-o",
                "jsonpath={.metadata.labels}",
            ],
            None,
        );
        assert!(
            labels.contains("propagationpolicy.karmada.io/permanent-id"),
            "the webhook did not default the policy: {labels}"
        );
        let deadline = Instant::now() + Duration::from_secs(120);
        for member in ["kp-a", "kp-b"] {
            let replicas = loop {
                let (ok, text) = kubectl(
                    &kubeconfig,
                    member,
                    &[
                        "get",
                        "deployment",
                        "web",
                        "-n",
                        "karmada-check",
                        "-o",
                        "jsonpath={.spec.replicas}",
                    ],
                    None,
                );
                if ok && !text.trim().is_empty() {
                    break text.trim().to_string();
                }
                assert!(
                    Instant::now() < deadline,
                    "the Deployment never reached {member}: {text}"
                );
                std::thread::sleep(Duration::from_millis(500));
            };
            assert_eq!(
                replicas, "2",
                "4 replicas divided over 2 members, in {member}"
            );
        }
    });
    let down = harness(&state, &["down"]);
    let _ = std::fs::remove_file(&file);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    assert!(
        down.status.success(),
        "{}",
        String::from_utf8_lossy(&down.stderr)
    );
    assert!(!state.exists());
}
