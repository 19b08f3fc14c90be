//! Bad input to the harness is rejected before anything starts.

use std::process::Command;

fn harness(state_dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_pinfed-e2e"))
        .args(args)
        .env("PINFED_E2E_DIR", state_dir)
        .env("PINFED_BIN_DIR", "/nonexistent/pinfed-bin")
        .output()
        .expect("run pinfed-e2e")
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("pinfed-e2e-badinput-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn a_malformed_topology_names_the_field_and_starts_nothing() {
    let state = temp_dir("malformed");
    let file = std::env::temp_dir().join(format!("bad-topology-{}.yaml", std::process::id()));
    std::fs::write(
        &file,
        "hub: {name: hub}\nmembers:\n  - name: use1a\n    nodePools:\n      - {name: general, count: 2, cpu: eight, memory: 32Gi}\n",
    )
    .unwrap();
    let out = harness(&state, &["up", file.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("members[0].nodePools[0].cpu"), "{err}");
    assert!(
        !state.exists(),
        "nothing may be started or written for a bad topology"
    );

    std::fs::write(
        &file,
        "hub: {name: hub}\nmembers:\n  - name: use1a\n    colour: blue\n    nodePools: []\n",
    )
    .unwrap();
    let out = harness(&state, &["check", file.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("members[0]") && err.contains("colour"),
        "{err}"
    );
    std::fs::remove_file(file).ok();
}

#[test]
fn stop_and_status_without_a_running_topology_say_so() {
    let state = temp_dir("nothing");
    for args in [&["status"][..], &["stop", "use1a"], &["start", "use1a"]] {
        let out = harness(&state, args);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("nothing is up"), "{args:?}: {err}");
    }
}

#[test]
fn the_shipped_topologies_pass_check() {
    for f in [
        "local-1.yaml",
        "local-3.yaml",
        "bench.yaml",
        "fleet-20.yaml",
    ] {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../clusters/").to_string() + f;
        let out = harness(&temp_dir("check"), &["check", &path]);
        assert!(
            out.status.success(),
            "{f}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
