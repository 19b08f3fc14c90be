//! `pinfed plan` as the contract in SPEC.md describes it (offline, no cluster).

use std::process::Command;

fn plan(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_pinfed"))
        .arg("plan")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run pinfed plan");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

#[test]
fn every_kind_gets_a_decision_in_the_contract_shape() {
    let cases = [
        ("examples/service.yaml", "Divided", "replicas"),
        ("examples/jobset.yaml", "Divided", "shards"),
        ("examples/daemon.yaml", "Duplicated", ""),
        ("examples/cronjob.yaml", "Single", ""),
        ("examples/statefulset.yaml", "Single", "replicas"),
        (
            "e2e/demo-workloads/training-pytorch.yaml",
            "Single",
            "replicas",
        ),
    ];
    for (file, strategy, share) in cases {
        let (ok, out, err) = plan(&["-f", file, "--topology", "clusters/local-3.yaml"]);
        assert!(ok, "{file}: {err}");
        let d = json(&out);
        assert_eq!(d["strategy"], strategy, "{file}");
        assert_eq!(d["unplaced"], 0, "{file}: {d}");
        assert!(d["reason"].is_null(), "{file}");
        let ps = d["placements"].as_array().unwrap();
        let names: Vec<&str> = ps.iter().map(|p| p["cluster"].as_str().unwrap()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted, "{file}: entries sorted by cluster name");
        for p in ps {
            let keys: Vec<&String> = p.as_object().unwrap().keys().collect();
            if share.is_empty() {
                assert_eq!(keys, ["cluster"], "{file}: {p}");
            } else {
                assert!(p.get(share).is_some(), "{file}: {p}");
            }
        }
    }
}

#[test]
fn service_replicas_are_conserved_and_a_replan_with_the_same_inputs_moves_nothing() {
    let (ok, out, err) = plan(&[
        "-f",
        "examples/service.yaml",
        "--topology",
        "clusters/local-3.yaml",
    ]);
    assert!(ok, "{err}");
    let d = json(&out);
    let total: i64 = d["placements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["replicas"].as_i64().unwrap())
        .sum();
    assert_eq!(total, 6);
    let current = std::env::temp_dir().join(format!("pinfed-plan-{}.json", std::process::id()));
    std::fs::write(&current, &out).unwrap();
    let (ok, again, err) = plan(&[
        "-f",
        "examples/service.yaml",
        "--topology",
        "clusters/local-3.yaml",
        "--current",
        current.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert_eq!(
        json(&again),
        d,
        "unchanged inputs keep the current placement"
    );
    std::fs::remove_file(current).ok();
}

#[test]
fn a_gang_that_fits_nowhere_is_unplaced_with_a_reason_and_exit_zero() {
    // The stock example does not tolerate the GPU pool's taint: no node takes its pods.
    let (ok, out, err) = plan(&[
        "-f",
        "examples/training-pytorch.yaml",
        "--topology",
        "clusters/local-3.yaml",
    ]);
    assert!(ok, "a decision was made, so exit 0: {err}");
    let d = json(&out);
    assert_eq!(d["unplaced"], 4);
    assert!(d["placements"].as_array().unwrap().is_empty());
    assert!(d["reason"].as_str().is_some_and(|r| !r.is_empty()), "{d}");
}

#[test]
fn bad_input_names_the_file_and_the_problem() {
    let (ok, _, err) = plan(&[
        "-f",
        "examples/runtime-profile.yaml",
        "--topology",
        "clusters/local-3.yaml",
    ]);
    assert!(!ok);
    assert!(
        err.contains("examples/runtime-profile.yaml") && err.contains("workload"),
        "{err}"
    );
    let bad_topo =
        std::env::temp_dir().join(format!("pinfed-plan-topo-{}.yaml", std::process::id()));
    std::fs::write(&bad_topo, "hub: {name: hub}\nmembers:\n  - name: a\n    nodePools: [{name: p, count: 1, cpu: x, memory: 1Gi}]\n").unwrap();
    let (ok, _, err) = plan(&[
        "-f",
        "examples/service.yaml",
        "--topology",
        bad_topo.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(err.contains("members[0].nodePools[0].cpu"), "{err}");
    let (ok, _, err) = plan(&[
        "-f",
        "examples/service.yaml",
        "--topology",
        "clusters/local-3.yaml",
        "--current",
        "README.md",
    ]);
    assert!(!ok && err.contains("README.md"), "{err}");
    std::fs::remove_file(bad_topo).ok();
}
