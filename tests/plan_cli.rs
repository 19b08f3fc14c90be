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
fn every_quota_given_holds_and_the_tightest_wins() {
    let dir = std::env::temp_dir().join(format!("pinfed-plan-quota-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let quota = |name: &str, spec: &str| {
        format!(
            "apiVersion: federation.pinterest.com/v1alpha1\nkind: FederatedQuota\n\
             metadata: {{name: {name}, namespace: ads}}\nspec: {spec}\n"
        )
    };
    // A loose quota alone places all 6 replicas of the example service.
    let loose = dir.join("loose.yaml");
    std::fs::write(&loose, quota("loose", "{hard: {pods: 100}}")).unwrap();
    let args = |extra: &[&str]| {
        let mut a = vec![
            "-f",
            "examples/service.yaml",
            "--topology",
            "clusters/local-3.yaml",
        ];
        a.extend_from_slice(extra);
        a.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let run = |extra: &[&str]| {
        let a = args(extra);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let (ok, out, err) = plan(&a);
        assert!(ok, "{err}");
        json(&out)
    };
    assert_eq!(run(&["--quota", loose.to_str().unwrap()])["unplaced"], 0);
    // A second file with two more: a total of 4 pods and a cap of 1 in use1a.
    let tight = dir.join("tight.yaml");
    std::fs::write(
        &tight,
        format!(
            "{}---\n{}",
            quota("total", "{hard: {pods: 4}}"),
            quota(
                "caps",
                "{hard: {pods: 100}, perCluster: {use1a: {pods: 1}}}"
            )
        ),
    )
    .unwrap();
    let d = run(&[
        "--quota",
        loose.to_str().unwrap(),
        "--quota",
        tight.to_str().unwrap(),
    ]);
    assert_eq!(d["unplaced"], 2, "{d}");
    let placed: Vec<(&str, i64)> = d["placements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["cluster"].as_str().unwrap(),
                p["replicas"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(placed.iter().map(|p| p.1).sum::<i64>(), 4, "{d}");
    assert!(placed.iter().all(|(c, n)| *c != "use1a" || *n <= 1), "{d}");
    assert!(d["reason"].as_str().unwrap().contains("quota"), "{d}");
    // Something else in a quota file is named.
    let (ok, _, err) = plan(&{
        let mut a = vec![
            "-f",
            "examples/service.yaml",
            "--topology",
            "clusters/local-3.yaml",
        ];
        a.extend(["--quota", "examples/service.yaml"]);
        a
    });
    assert!(!ok);
    assert!(
        err.contains("examples/service.yaml: --quota expects FederatedQuotas"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
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
