//! A light member is its API server alone, with its nodes Ready: the member kind of the
//! 20-member fleet (clusters/fleet-20.yaml). Brings up a hub and one light member in a
//! state directory of its own and takes them down again.

use std::process::Command;

fn harness(state_dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_pinfed-e2e"))
        .args(args)
        .env("PINFED_E2E_DIR", state_dir)
        .output()
        .expect("run pinfed-e2e")
}

fn kubectl(kubeconfig: &str, context: &str, args: &[&str]) -> String {
    let bin = std::env::var("PINFED_BIN_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| {
            std::path::PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/pinfed/bin")
        });
    let out = Command::new(bin.join("kubectl"))
        .args(["--kubeconfig", kubeconfig, "--context", context])
        .args(args)
        .output()
        .expect("run kubectl (the toolchain's, e2e/toolchain/build)");
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into()
}

#[test]
fn a_light_member_runs_only_its_api_server_and_its_nodes_are_ready() {
    let state = std::env::temp_dir().join(format!("pinfed-e2e-light-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    let file = std::env::temp_dir().join(format!("light-topology-{}.yaml", std::process::id()));
    std::fs::write(
        &file,
        "hub: {name: hub}\nmembers:\n  - name: lite\n    light: true\n    nodePools:\n      - {name: general, count: 3, cpu: \"8\", memory: 32Gi, pods: 110}\n",
    )
    .unwrap();
    // One API server at a time: the hub's batch, then the member's (a fleet's bring-up).
    let up = harness(
        &state,
        &["up", file.to_str().unwrap(), "--start-batch", "1"],
    );
    let result = std::panic::catch_unwind(|| {
        let err = String::from_utf8_lossy(&up.stderr);
        assert!(up.status.success(), "up failed: {err}");
        let first = err.find("API servers: batch 1 of 2 ready").expect(&err);
        let second = err.find("API servers: batch 2 of 2 ready").expect(&err);
        let member_started = err.find("starting kube-apiserver for lite").expect(&err);
        assert!(
            first < member_started && member_started < second,
            "the member's API server starts after the first batch is ready:\n{err}"
        );
        assert!(
            err.contains("registered 3 Ready nodes in lite (light)"),
            "{err}"
        );
        let out = String::from_utf8_lossy(&up.stdout);
        let kubeconfig = out
            .lines()
            .last()
            .and_then(|l| l.strip_prefix("KUBECONFIG="))
            .expect("up prints KUBECONFIG=")
            .to_string();
        // Every node Ready, nothing else running for the member but its API server.
        let ready = kubectl(
            &kubeconfig,
            "lite",
            &[
                "get",
                "nodes",
                "-o",
                "jsonpath={.items[*].status.conditions[?(@.type==\"Ready\")].status}",
            ],
        );
        assert_eq!(
            ready.split_whitespace().collect::<Vec<_>>(),
            ["True"; 3],
            "{ready}"
        );
        // Schedulable: no not-ready taint left (nothing would lift it in a light member).
        let taints = kubectl(
            &kubeconfig,
            "lite",
            &[
                "get",
                "nodes",
                "-o",
                "jsonpath={.items[*].spec.taints[*].key}",
            ],
        );
        assert!(
            taints.trim().is_empty(),
            "taints left on light nodes: {taints}"
        );
        let status = harness(&state, &["status"]);
        let status = String::from_utf8_lossy(&status.stdout);
        let lite: Vec<&str> = status.lines().filter(|l| l.starts_with("lite ")).collect();
        assert_eq!(
            lite.len(),
            1,
            "only kube-apiserver for the light member:\n{status}"
        );
        assert!(
            lite[0].contains("kube-apiserver") && lite[0].contains("running"),
            "{status}"
        );
        // Lean (docs/e2e.md): no watch cache, a memory limit for Go's collector — and still
        // what a member of pinfed needs: its CRDs served, a workload stored.
        let st: serde_json::Value =
            serde_json::from_slice(&std::fs::read(state.join("state.json")).unwrap()).unwrap();
        let pid = st["clusters"]["lite"]["components"][0]["pid"]
            .as_u64()
            .expect("the light member's API server has a pid");
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
        let words = |b: &[u8]| -> Vec<String> {
            b.split(|c| *c == 0)
                .map(|w| String::from_utf8_lossy(w).into_owned())
                .collect()
        };
        assert!(
            words(&cmdline).iter().any(|w| w == "--watch-cache=false"),
            "{:?}",
            words(&cmdline)
        );
        let env = words(&environ);
        assert!(
            env.iter().any(|w| w == "GOMEMLIMIT=200MiB") && env.iter().any(|w| w == "GOGC=100"),
            "{env:?}"
        );
        let crds = concat!(env!("CARGO_MANIFEST_DIR"), "/../../crds");
        kubectl(&kubeconfig, "lite", &["apply", "--server-side", "-k", crds]);
        kubectl(
            &kubeconfig,
            "lite",
            &[
                "wait",
                "--for=condition=Established",
                "crd",
                "--all",
                "--timeout=60s",
            ],
        );
        let svc = std::env::temp_dir().join(format!("light-svc-{}.yaml", std::process::id()));
        std::fs::write(
            &svc,
            "apiVersion: compute.pinterest.com/v1alpha1\nkind: PinterestService\nmetadata: {name: web, namespace: default}\nspec:\n  replicas: 2\n  owner: {team: ads, contact: ads@example.com}\n  template:\n    spec:\n      containers: [{name: app, image: registry.example/app:1}]\n",
        )
        .unwrap();
        let created = kubectl(
            &kubeconfig,
            "lite",
            &["create", "-f", svc.to_str().unwrap()],
        );
        let _ = std::fs::remove_file(&svc);
        assert!(created.contains("pinterestservice"), "{created}");
        // The hub keeps its controller-manager.
        assert!(
            status
                .lines()
                .any(|l| l.starts_with("hub ") && l.contains("controller-manager")),
            "{status}"
        );
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
