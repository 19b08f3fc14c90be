//! `pinfed expand` and `pinfed crds` as a user runs them: the built binary, files in,
//! YAML or a clear error out. Pure: no cluster.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn pinfed(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pinfed"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run pinfed")
}

fn example(name: &str) -> String {
    format!("examples/{name}")
}

/// A scratch file under the target directory (unique per test).
fn scratch(name: &str, content: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("expand_cli");
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, content).unwrap();
    p
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn expands_every_example_into_a_yaml_stream() {
    for (file, first_kind) in [
        ("service.yaml", "ConfigMap"),
        ("jobset.yaml", "ConfigMap"),
        ("cronjob.yaml", "CronJob"),
        ("daemon.yaml", "DaemonSet"),
        ("training-pytorch.yaml", "Service"),
        ("training-tensorflow.yaml", "Service"),
        ("statefulset.yaml", "Service"),
    ] {
        let o = pinfed(&["expand", "-f", &example(file), "--cluster", "use1a"]);
        assert!(o.status.success(), "{file}: {}", stderr(&o));
        let out = stdout(&o);
        assert!(out.starts_with("---\n"), "{file}");
        let docs: Vec<serde_json::Value> = pinfed::api::yaml::documents(&out).unwrap();
        assert_eq!(docs[0]["kind"].as_str(), Some(first_kind), "{file}");
        for d in &docs {
            assert_eq!(
                d["metadata"]["labels"]["app.kubernetes.io/managed-by"].as_str(),
                Some("pinfed"),
                "{file}"
            );
            // The examples carry no uid, so there are no owner references.
            assert!(d["metadata"].get("ownerReferences").is_none(), "{file}");
        }
        // Deterministic across runs.
        let again = pinfed(&["expand", "-f", &example(file), "--cluster", "use1a"]);
        assert_eq!(out, stdout(&again), "{file}");
    }
}

#[test]
fn owner_references_use_the_uid() {
    let text = std::fs::read_to_string(example("daemon.yaml"))
        .unwrap()
        .replace(
            "  namespace: infra\n",
            "  namespace: infra\n  uid: 11111111-2222-4333-8444-555555555555\n",
        );
    let f = scratch("with-uid.yaml", &text);
    let o = pinfed(&["expand", "-f", f.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("uid: 11111111-2222-4333-8444-555555555555"));
    assert!(stdout(&o).contains("kind: PinterestDaemon"));
}

#[test]
fn a_runtime_profile_file_is_injected() {
    let o = pinfed(&[
        "expand",
        "-f",
        &example("service.yaml"),
        "--runtime",
        &example("runtime-profile.yaml"),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("pinterest.com/runtime-version: \"2024.06\""));
    assert!(stdout(&o).contains("cert-agent:2.2.0"));
}

fn fails_with(args: &[&str], needles: &[&str]) {
    let o = pinfed(args);
    assert!(!o.status.success(), "{args:?} should fail");
    assert!(
        o.stdout.is_empty(),
        "{args:?}: nothing on stdout on failure"
    );
    let e = stderr(&o);
    for n in needles {
        assert!(e.contains(n), "{args:?}: stderr lacks {n:?}:\n{e}");
    }
    assert!(!e.contains("panicked"), "{e}");
}

#[test]
fn broken_yaml_names_line_and_column() {
    let f = scratch(
        "broken.yaml",
        "apiVersion: compute.pinterest.com/v1alpha1\nkind: PinterestService\nmetadata: {name: x\n",
    );
    fails_with(
        &["expand", "-f", f.to_str().unwrap()],
        // The bracket never closed.
        &["broken.yaml", "line 3, column 11", "unclosed bracket"],
    );
}

#[test]
fn unknown_kind_is_named() {
    let f = scratch(
        "unknown.yaml",
        "apiVersion: compute.pinterest.com/v1alpha1\nkind: PinterestWidget\nmetadata: {name: x}\n",
    );
    fails_with(
        &["expand", "-f", f.to_str().unwrap()],
        &["unknown kind \"PinterestWidget\"", "PinterestService"],
    );
}

#[test]
fn wrong_types_unknown_fields_and_invalid_values_name_the_field() {
    let svc = std::fs::read_to_string(example("service.yaml")).unwrap();
    let bad = svc.replace("replicas: 6", "replicas: six");
    let line = bad
        .lines()
        .position(|l| l.contains("replicas: six"))
        .unwrap()
        + 1;
    let f = scratch("wrong-type.yaml", &bad);
    fails_with(
        &["expand", "-f", f.to_str().unwrap()],
        &["spec.replicas", &format!("line {line} column 13")],
    );
    let f = scratch("typo.yaml", &svc.replace("replicas: 6", "replica: 6"));
    fails_with(
        &["expand", "-f", f.to_str().unwrap()],
        &["spec.replica: unknown field"],
    );
    let f = scratch("negative.yaml", &svc.replace("replicas: 6", "replicas: -2"));
    fails_with(
        &["expand", "-f", f.to_str().unwrap()],
        &["spec.replicas: must be at least 0"],
    );

    let js = std::fs::read_to_string(example("jobset.yaml")).unwrap();
    let f = scratch(
        "shards.yaml",
        &js.replace("shards: 8", "shards: 8\n  assignedShards: \"5-9\""),
    );
    fails_with(
        &["expand", "-f", f.to_str().unwrap()],
        &["spec.assignedShards", "index 9 is out of range"],
    );

    let tj = std::fs::read_to_string(example("training-pytorch.yaml")).unwrap();
    let f = scratch("role.yaml", &tj.replace("    Worker:", "    Chief:"));
    fails_with(
        &["expand", "-f", f.to_str().unwrap()],
        &["spec.replicaSpecs.Chief", "unknown role"],
    );
    let f = scratch(
        "framework.yaml",
        &tj.replace("framework: pytorch", "framework: jax"),
    );
    fails_with(
        &["expand", "-f", f.to_str().unwrap()],
        &["spec.framework", "unknown variant `jax`"],
    );
}

#[test]
fn other_bad_input_fails_cleanly() {
    fails_with(
        &["expand", "-f", "examples/does-not-exist.yaml"],
        &["does-not-exist.yaml"],
    );
    fails_with(
        &["expand", "-f", &example("runtime-profile.yaml")],
        &["not a workload", "--runtime"],
    );
    fails_with(
        &[
            "expand",
            "-f",
            &example("service.yaml"),
            "--runtime",
            &example("service.yaml"),
        ],
        &["--runtime expects a RuntimeProfile"],
    );
    fails_with(
        &[
            "expand",
            "-f",
            &example("service.yaml"),
            "--cluster",
            "Not_A_Name",
        ],
        &["--cluster"],
    );
    let svc = std::fs::read_to_string(example("service.yaml")).unwrap();
    let f = scratch(
        "pinned.yaml",
        &svc.replace(
            "  replicas: 6",
            "  runtimeVersion: \"1999.01\"\n  replicas: 6",
        ),
    );
    fails_with(
        &["expand", "-f", f.to_str().unwrap()],
        &["spec.runtimeVersion", "1999.01", "builtin-1"],
    );
    let f = scratch("empty.yaml", "");
    fails_with(
        &["expand", "-f", f.to_str().unwrap()],
        &["no resource found"],
    );
    let f = scratch("binary.yaml", "\u{0}\u{1}garbage: [");
    fails_with(&["expand", "-f", f.to_str().unwrap()], &["binary.yaml"]);
}

#[test]
fn crds_prints_every_crd() {
    let o = pinfed(&["crds"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let kinds = [
        "PinterestService",
        "PinterestJobSet",
        "PinterestCronJob",
        "PinterestDaemon",
        "PinterestTrainingJob",
        "PinterestStatefulSet",
        "RuntimeProfile",
        "MemberCluster",
        "FederatedQuota",
        "MemberSlice",
        "MemberReport",
    ];
    assert_eq!(
        out.matches("kind: CustomResourceDefinition").count(),
        kinds.len()
    );
    for kind in kinds {
        assert!(out.contains(&format!("kind: {kind}\n")), "{kind}");
    }
}

#[test]
fn a_members_overrides_apply_as_the_hub_would_resolve_them() {
    let svc = scratch(
        "overridden.yaml",
        "apiVersion: compute.pinterest.com/v1alpha1\nkind: PinterestService\n\
         metadata: {name: web, namespace: ads}\n\
         spec:\n  owner: {team: ads, contact: ads@pinterest.com}\n  replicas: 2\n\
         \x20 template:\n    spec:\n      containers:\n        - {name: app, image: registry.example/web:1}\n\
         \x20 overrides:\n    - name: mirror\n      clusterSelector: {matchLabels: {topology.kubernetes.io/zone: us-east-1a}}\n\
         \x20     image: {registry: 'mirror.{{zone}}.example'}\n",
    );
    let file = svc.display().to_string();
    let run = |cluster: &str| {
        let o = pinfed(&[
            "expand",
            "-f",
            &file,
            "--cluster",
            cluster,
            "--topology",
            "clusters/local-3.yaml",
        ]);
        assert!(o.status.success(), "{cluster}: {}", stderr(&o));
        stdout(&o)
    };
    assert!(run("use1a").contains("image: mirror.us-east-1a.example/web:1"));
    assert!(run("use1b").contains("image: registry.example/web:1"));
    // A member the topology lacks is named.
    let o = pinfed(&[
        "expand",
        "-f",
        &file,
        "--cluster",
        "nowhere",
        "--topology",
        "clusters/local-3.yaml",
    ]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("\"nowhere\" is not a member"),
        "{}",
        stderr(&o)
    );
}
