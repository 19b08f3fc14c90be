//! The controller-manager of every cluster and the scheduler of every member. Both run
//! without leader election (one of each per cluster) and go down and come back with the
//! API server (`e2e/stop`, `e2e/start`; see docs/e2e.md).

use std::path::Path;

use crate::pki::Pki;
use crate::state::Component;

/// Components that a real control plane runs with leader election and restarts when they
/// lose their lease: they go down with the API server and start afresh after it.
pub fn restarts_with_apiserver(component: &str) -> bool {
    matches!(
        component,
        "kube-controller-manager"
            | "kube-scheduler"
            | "karmada-controller-manager"
            | "karmada-scheduler"
    )
}

/// The kube-controller-manager of cluster `name`, its secure port on 127.0.0.1:`kcm`.
pub fn controller_manager(
    bin: &Path,
    pki: &Pki,
    logs: &Path,
    name: &str,
    kc: &str,
    kcm: u16,
) -> Component {
    Component {
        name: "kube-controller-manager".into(),
        argv: vec![
            bin.join("kube-controller-manager").display().to_string(),
            format!("--kubeconfig={kc}"),
            format!("--authentication-kubeconfig={kc}"),
            format!("--authorization-kubeconfig={kc}"),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={kcm}"),
            "--leader-elect=false".into(),
            format!(
                "--service-account-private-key-file={}",
                pki.sa_key().display()
            ),
            format!("--root-ca-file={}", pki.ca_crt().display()),
            "--kube-api-qps=500".into(),
            "--kube-api-burst=1000".into(),
            "--concurrent-job-syncs=20".into(),
            "--concurrent-deployment-syncs=20".into(),
            "--concurrent-replicaset-syncs=20".into(),
            "--concurrent-gc-syncs=50".into(),
            "--concurrent-namespace-syncs=20".into(),
            "--profiling=false".into(),
        ],
        port: kcm,
        pid: None,
        log: logs.join(format!("{name}-kube-controller-manager.log")),
        env: Vec::new(),
    }
}

/// The kube-scheduler of member `name` (its configuration file goes to `cdir`), its secure
/// port on 127.0.0.1:`sched`.
pub fn scheduler(
    bin: &Path,
    cdir: &Path,
    logs: &Path,
    name: &str,
    kc: &str,
    sched: u16,
) -> anyhow::Result<Component> {
    let sched_config = cdir.join("kube-scheduler.yaml");
    std::fs::write(
        &sched_config,
        format!(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
             clientConnection: {{kubeconfig: {kc:?}, qps: 500, burst: 1000}}\n\
             leaderElection: {{leaderElect: false}}\n"
        ),
    )?;
    Ok(Component {
        name: "kube-scheduler".into(),
        argv: vec![
            bin.join("kube-scheduler").display().to_string(),
            format!("--config={}", sched_config.display()),
            format!("--authentication-kubeconfig={kc}"),
            format!("--authorization-kubeconfig={kc}"),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={sched}"),
            "--profiling=false".into(),
        ],
        port: sched,
        pid: None,
        log: logs.join(format!("{name}-kube-scheduler.log")),
        env: Vec::new(),
    })
}
