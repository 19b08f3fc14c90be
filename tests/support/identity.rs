//! Daemons in e2e run as the identities `deploy/` ships, not as the topology's admin: the
//! roles from `deploy/` are applied first, and each daemon gets a kubeconfig that
//! impersonates its ServiceAccount (`as:`). A permission the shipped roles lack then fails
//! a test here instead of a user's rollout.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

use kube::config::Kubeconfig;

use super::Federation;

/// The namespace the manifests in `deploy/` install pinfed into.
pub const SYSTEM_NAMESPACE: &str = "pinfed-system";

/// The daemons pinfed ships, each with its ServiceAccount and the clusters its roles go to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Daemon {
    Hub,
    Agent,
    Jss,
}

impl Daemon {
    /// The daemon a `pinfed` command line starts, if it is one.
    pub fn of_args(args: &[String]) -> Option<Daemon> {
        match args.first().map(String::as_str) {
            Some("hub") => Some(Daemon::Hub),
            Some("agent") => Some(Daemon::Agent),
            Some("jss") => Some(Daemon::Jss),
            _ => None,
        }
    }

    pub fn service_account(self) -> &'static str {
        match self {
            Daemon::Hub => "pinfed-hub",
            Daemon::Agent => "pinfed-agent",
            Daemon::Jss => "pinfed-jss",
        }
    }

    /// The user the API server sees for this daemon's ServiceAccount.
    pub fn user(self) -> String {
        format!(
            "system:serviceaccount:{SYSTEM_NAMESPACE}:{}",
            self.service_account()
        )
    }

    /// The roles `deploy/` ships for it.
    fn rbac_file(self) -> PathBuf {
        let dir = match self {
            Daemon::Hub => "hub",
            Daemon::Agent => "agent",
            Daemon::Jss => "jss",
        };
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("deploy")
            .join(dir)
            .join("rbac.yaml")
    }
}

/// The daemon `name` names (`hub`, `agent`), for tests that ask about its identity.
pub fn identity_daemon(name: &str) -> Daemon {
    Daemon::of_args(&[name.to_string()]).unwrap_or_else(|| panic!("no shipped daemon {name}"))
}

/// The control-plane toolchain's kubectl (built by `e2e/toolchain/build`).
pub fn kubectl_bin() -> PathBuf {
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

/// kubectl against one cluster of the topology, with `stdin`; panics with its output when
/// it fails.
pub fn kubectl_in(fed: &Federation, context: &str, args: &[&str], stdin: &str) -> String {
    let mut child = Command::new(kubectl_bin())
        .args(["--kubeconfig", &fed.kubeconfig.to_string_lossy()])
        .args(["--context", context])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run kubectl");
    use std::io::Write;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write to kubectl");
    let out = child.wait_with_output().expect("kubectl");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "kubectl {args:?} in {context} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// `kubectl apply --server-side` of a manifest in one cluster of the topology; panics with
/// kubectl's message when the API server refuses it.
pub fn kubectl_apply(fed: &Federation, context: &str, manifest: &str) {
    kubectl_in(
        fed,
        context,
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager",
            "pinfed-e2e",
            "-f",
            "-",
        ],
        manifest,
    );
}

/// Applies the shipped roles once per test process: the hub's and the
/// JSS's on the hub cluster, the agent's on every member (with the `pinfed-system`
/// namespace they live in).
pub fn apply_shipped_rbac(fed: &Federation) {
    static APPLIED: OnceLock<()> = OnceLock::new();
    APPLIED.get_or_init(|| {
        let namespace =
            format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {SYSTEM_NAMESPACE}\n");
        let hub = fed.topology.hub.name.clone();
        let mut targets = vec![(hub.clone(), Daemon::Hub), (hub, Daemon::Jss)];
        targets.extend(fed.member_names().into_iter().map(|m| (m, Daemon::Agent)));
        for (cluster, daemon) in targets {
            let file = daemon.rbac_file();
            let roles = std::fs::read_to_string(&file)
                .unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
            kubectl_apply(fed, &cluster, &namespace);
            kubectl_apply(fed, &cluster, &roles);
        }
    });
}

/// A copy of the topology's kubeconfig in which every user impersonates `daemon`'s
/// ServiceAccount; written once per daemon and test process.
pub fn kubeconfig_as(fed: &Federation, daemon: Daemon) -> PathBuf {
    static WRITTEN: Mutex<Vec<(Daemon, PathBuf)>> = Mutex::new(Vec::new());
    apply_shipped_rbac(fed);
    let mut written = WRITTEN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, path)) = written.iter().find(|(d, _)| *d == daemon) {
        return path.clone();
    }
    let mut kc = Kubeconfig::read_from(&fed.kubeconfig)
        .unwrap_or_else(|e| panic!("reading {}: {e}", fed.kubeconfig.display()));
    for named in &mut kc.auth_infos {
        if let Some(user) = named.auth_info.as_mut() {
            user.impersonate = Some(daemon.user());
            user.impersonate_groups = Some(vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{SYSTEM_NAMESPACE}"),
                "system:authenticated".into(),
            ]);
        }
    }
    let path = std::env::temp_dir().join(super::unique_name(&format!(
        "kubeconfig-{}",
        daemon.service_account()
    )));
    let text = pinfed::api::yaml::to_string(&kc).expect("serialize kubeconfig");
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    written.push((daemon, path.clone()));
    path
}
