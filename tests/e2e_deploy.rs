//! The manifests in deploy/ are valid for a real API server (server-side dry run), and
//! crds/kustomization.yaml lists every generated CRD.

mod support;

use std::path::PathBuf;
use std::process::Command;

use support::{Federation, join_all};

fn kubectl() -> PathBuf {
    let dir = std::env::var_os("PINFED_BIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let cache = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    PathBuf::from(std::env::var("HOME").expect("HOME")).join(".cache")
                });
            cache.join("pinfed/bin")
        });
    let k = dir.join("kubectl");
    assert!(
        k.is_file(),
        "kubectl not found at {} (run e2e/toolchain/build)",
        k.display()
    );
    k
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

#[tokio::test]
async fn deploy_manifests_pass_a_server_side_dry_run() {
    let fed = Federation::connect().await;
    join_all(&fed); // creates pinfed-system in members and the hub
    for (dir, cluster, component) in [
        (
            "deploy/agent",
            fed.member_names()[0].clone(),
            "pinfed-agent",
        ),
        ("deploy/hub", fed.topology.hub.name.clone(), "pinfed-hub"),
    ] {
        let path = format!("{}/{dir}", env!("CARGO_MANIFEST_DIR"));
        let out = Command::new(kubectl())
            .args([
                "--kubeconfig",
                fed.kubeconfig.to_str().unwrap(),
                "--context",
                &cluster,
            ])
            .args([
                "apply",
                "--dry-run=server",
                "--server-side",
                "--force-conflicts",
                "--field-manager=pinfed-deploy-test",
                "-k",
                &path,
            ])
            .output()
            .expect("run kubectl");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{dir} dry run failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        for want in [
            format!("deployment.apps/{component}"),
            format!("clusterrole.rbac.authorization.k8s.io/{component}"),
            "customresourcedefinition.apiextensions.k8s.io/pinterestservices.compute.pinterest.com"
                .to_string(),
        ] {
            assert!(
                stdout.contains(&want),
                "{dir}: {want} missing from the dry run:\n{stdout}"
            );
        }
    }
}
