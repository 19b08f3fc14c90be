//! pinfed-e2e: brings a topology file up as local control planes on 127.0.0.1 and manages
//! them (`up`, `down`, `status`, `stop CLUSTER`, `start CLUSTER`). Called through the
//! scripts in `e2e/`. One etcd serves every cluster under its own key prefix; each
//! cluster gets its own kube-apiserver and controller-manager, and members also get a
//! scheduler and kwok with the fake nodes of their pools.

mod pki;
mod procs;
mod state;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use pinfed::api::quantity::Milli;
use pinfed::topology::{GPU_RESOURCE, Topology};
use sha2::Digest;

use crate::pki::Pki;
use crate::state::{ClusterState, Component, State};

#[derive(Debug, Parser)]
#[command(
    name = "pinfed-e2e",
    about = "Local multi-cluster Kubernetes control planes for pinfed e2e tests"
)]
struct Cli {
    /// Where clusters keep their data, logs, certificates and kubeconfig.
    #[arg(long, env = "PINFED_E2E_DIR", global = true)]
    state_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Validate a topology file; start nothing.
    Check { file: PathBuf },
    /// Bring a topology up; prints `KUBECONFIG=<path>` as the last line of stdout.
    Up {
        file: PathBuf,
        /// Directory with kube-apiserver, kube-controller-manager, kube-scheduler, etcd, kwok
        /// (default: build or reuse them with e2e/toolchain/build).
        #[arg(long, env = "PINFED_BIN_DIR")]
        bin_dir: Option<PathBuf>,
        /// How long to wait for API servers and nodes to become ready.
        #[arg(long, default_value = "300")]
        timeout_secs: u64,
    },
    /// Stop everything and remove all state.
    Down,
    /// Show what runs: clusters, components, ports, memory.
    Status,
    /// Stop one cluster's API server with its controller-manager and scheduler, keeping
    /// its data (kwok's nodes keep running).
    Stop { cluster: String },
    /// Start a stopped cluster's API server, then its controller-manager and scheduler
    /// afresh (and anything else of the cluster that does not run).
    Start {
        cluster: String,
        #[arg(long, default_value = "120")]
        timeout_secs: u64,
    },
    /// Print the kubeconfig path of the running topology.
    Kubeconfig,
    /// Print the kwok Node objects of one member as a JSON List (for `kubectl apply -f -`).
    Nodes { file: PathBuf, member: String },
}

fn main() {
    let cli = Cli::parse();
    let dir = cli.state_dir.clone().unwrap_or_else(default_state_dir);
    let result = match cli.command {
        Cmd::Check { file } => load_topology(&file).map(|t| {
            eprintln!("{}: valid ({} members)", file.display(), t.members.len());
        }),
        Cmd::Up {
            file,
            bin_dir,
            timeout_secs,
        } => run_async(up(&dir, &file, bin_dir, Duration::from_secs(timeout_secs))),
        Cmd::Down => down(&dir),
        Cmd::Status => status(&dir),
        Cmd::Stop { cluster } => stop_cluster(&dir, &cluster),
        Cmd::Start {
            cluster,
            timeout_secs,
        } => run_async(start_cluster(
            &dir,
            &cluster,
            Duration::from_secs(timeout_secs),
        )),
        Cmd::Nodes { file, member } => load_topology(&file).and_then(|t| {
            let known = t
                .members
                .iter()
                .map(|m| m.name.as_str())
                .collect::<Vec<_>>()
                .join(", ");
            let m = t
                .member(&member)
                .with_context(|| format!("unknown member {member:?}; members: {known}"))?;
            let items: Vec<_> = Topology::nodes(m).iter().map(node_object).collect();
            println!(
                "{}",
                serde_json::to_string_pretty(
                    &serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items})
                )?
            );
            Ok(())
        }),
        Cmd::Kubeconfig => State::load(&dir).and_then(|s| {
            let s = s.context("nothing is up (no state in the state directory)")?;
            println!("KUBECONFIG={}", s.kubeconfig.display());
            Ok(())
        }),
    };
    if let Err(e) = result {
        eprintln!("e2e: error: {e:#}");
        std::process::exit(1);
    }
}

fn run_async(f: impl Future<Output = anyhow::Result<()>>) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(f)
}

fn default_state_dir() -> PathBuf {
    let base = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    base.join("pinfed/e2e")
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

struct Progress(Instant);
impl Progress {
    fn say(&self, msg: impl AsRef<str>) {
        eprintln!(
            "[e2e {:>5.1}s] {}",
            self.0.elapsed().as_secs_f64(),
            msg.as_ref()
        );
    }
}

fn load_topology(file: &Path) -> anyhow::Result<Topology> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("reading topology {}", file.display()))?;
    Ok(Topology::from_yaml(&file.display().to_string(), &text)?)
}

fn marker(dir: &Path) -> String {
    dir.display().to_string()
}

async fn up(
    dir: &Path,
    file: &Path,
    bin_dir: Option<PathBuf>,
    timeout: Duration,
) -> anyhow::Result<()> {
    let p = Progress(Instant::now());
    // Validate before anything starts.
    let topology = load_topology(file)?;
    let text = std::fs::read(file)?;
    let digest = format!("{:x}", sha2::Sha256::digest(&text));
    let file = std::fs::canonicalize(file)?;

    if let Some(old) = State::load(dir).unwrap_or(None) {
        let all_alive = old
            .all_components()
            .all(|c| c.pid.is_some_and(|pid| procs::is_ours(pid, &marker(dir))));
        if all_alive && old.topology_digest == digest {
            p.say(format!("{} is already up; reusing it", file.display()));
            summary(&p, &old, &topology).await;
            println!("KUBECONFIG={}", old.kubeconfig.display());
            return Ok(());
        }
        if old.topology_digest != digest {
            p.say(format!(
                "a different topology ({}) is up; taking it down first",
                old.topology_file.display()
            ));
        } else {
            p.say("cleaning up the leftovers of an earlier run");
        }
        down(dir)?;
    } else if dir.exists() {
        p.say("removing a stale state directory");
        std::fs::remove_dir_all(dir)?;
    }

    let bin = match bin_dir {
        Some(b) => b,
        None => build_toolchain(&p)?,
    };
    for b in [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kwok",
    ] {
        if !bin.join(b).is_file() {
            bail!(
                "{} is missing; run e2e/toolchain/build (or point --bin-dir/PINFED_BIN_DIR at the binaries)",
                bin.join(b).display()
            );
        }
    }

    std::fs::create_dir_all(dir)?;
    let dir = std::fs::canonicalize(dir)?;
    let result = bring_up(&p, &dir, &file, &digest, &topology, &bin, timeout).await;
    if result.is_err() {
        p.say(format!(
            "bring-up failed; logs are in {} (e2e/down removes them)",
            dir.display()
        ));
    }
    result
}

fn build_toolchain(p: &Progress) -> anyhow::Result<PathBuf> {
    let script = repo_root().join("e2e/toolchain/build");
    p.say(format!(
        "checking the control-plane toolchain ({})",
        script.display()
    ));
    let out = std::process::Command::new(&script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !out.status.success() {
        bail!("{} failed", script.display());
    }
    let bin = String::from_utf8(out.stdout)?
        .trim()
        .lines()
        .last()
        .unwrap_or_default()
        .to_string();
    Ok(PathBuf::from(bin))
}

async fn bring_up(
    p: &Progress,
    dir: &Path,
    file: &Path,
    digest: &str,
    topology: &Topology,
    bin: &Path,
    timeout: Duration,
) -> anyhow::Result<()> {
    let pki = Pki::ensure(&dir.join("pki"))?;
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs)?;
    let kwok_config = write_kwok_config(dir, bin)?;

    let names = topology.cluster_names();
    // etcd client + peer, and per cluster: apiserver, controller-manager, scheduler, kwok.
    let ports = procs::free_ports(2 + names.len() * 4)?;
    let mut ports = ports.into_iter();
    let mut next = || ports.next().expect("enough ports were reserved");

    let (etcd_port, peer_port) = (next(), next());
    let etcd = Component {
        name: "etcd".into(),
        argv: vec![
            bin.join("etcd").display().to_string(),
            format!("--data-dir={}", dir.join("etcd").display()),
            format!("--listen-client-urls=http://127.0.0.1:{etcd_port}"),
            format!("--advertise-client-urls=http://127.0.0.1:{etcd_port}"),
            format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"),
            format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}"),
            format!("--initial-cluster=default=http://127.0.0.1:{peer_port}"),
            "--unsafe-no-fsync".into(),
            "--quota-backend-bytes=8589934592".into(),
            "--log-level=warn".into(),
        ],
        port: etcd_port,
        pid: None,
        log: logs.join("etcd.log"),
    };

    let mut clusters = BTreeMap::new();
    for name in &names {
        let is_hub = *name == topology.hub.name;
        let cdir = dir.join("clusters").join(name);
        std::fs::create_dir_all(&cdir)?;
        let (api, kcm, sched, kwok) = (next(), next(), next(), next());
        let kubeconfig = cdir.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            kubeconfig_yaml(&pki, &[(name.to_string(), api)])?,
        )?;
        let kc = kubeconfig.display().to_string();
        let mut components = vec![Component {
            name: "kube-apiserver".into(),
            argv: vec![
                bin.join("kube-apiserver").display().to_string(),
                format!("--etcd-servers=http://127.0.0.1:{etcd_port}"),
                format!("--etcd-prefix=/pinfed-e2e/{name}"),
                "--bind-address=127.0.0.1".into(),
                "--advertise-address=127.0.0.1".into(),
                format!("--secure-port={api}"),
                format!("--tls-cert-file={}", pki.serving_crt().display()),
                format!("--tls-private-key-file={}", pki.serving_key().display()),
                format!("--client-ca-file={}", pki.ca_crt().display()),
                format!("--service-account-key-file={}", pki.sa_pub().display()),
                format!(
                    "--service-account-signing-key-file={}",
                    pki.sa_key().display()
                ),
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
                "--service-cluster-ip-range=10.96.0.0/16".into(),
                "--authorization-mode=RBAC".into(),
                "--endpoint-reconciler-type=none".into(),
                "--allow-privileged=true".into(),
                "--profiling=false".into(),
                "--max-requests-inflight=1000".into(),
                "--max-mutating-requests-inflight=500".into(),
            ],
            port: api,
            pid: None,
            log: logs.join(format!("{name}-kube-apiserver.log")),
        }];
        components.push(Component {
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
        });
        if !is_hub {
            let sched_config = cdir.join("kube-scheduler.yaml");
            std::fs::write(
                &sched_config,
                format!(
                    "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
                     clientConnection: {{kubeconfig: {kc:?}, qps: 500, burst: 1000}}\n\
                     leaderElection: {{leaderElect: false}}\n"
                ),
            )?;
            components.push(Component {
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
            });
            components.push(Component {
                name: "kwok".into(),
                argv: vec![
                    bin.join("kwok").display().to_string(),
                    format!("--kubeconfig={kc}"),
                    format!("--config={}", kwok_config.display()),
                    "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake".into(),
                    format!("--server-address=127.0.0.1:{kwok}"),
                    "--cidr=10.0.0.0/16".into(),
                    "--node-ip=10.1.0.1".into(),
                    "--node-lease-duration-seconds=40".into(),
                ],
                port: kwok,
                pid: None,
                log: logs.join(format!("{name}-kwok.log")),
            });
        }
        clusters.insert(
            name.to_string(),
            ClusterState {
                name: name.to_string(),
                role: if is_hub { "hub" } else { "member" }.into(),
                apiserver_port: api,
                components,
            },
        );
    }

    let kubeconfig = dir.join("kubeconfig");
    let contexts: Vec<(String, u16)> = names
        .iter()
        .map(|n| (n.to_string(), clusters[*n].apiserver_port))
        .collect();
    std::fs::write(&kubeconfig, kubeconfig_yaml(&pki, &contexts)?)?;
    let mut state = State {
        topology_file: file.to_path_buf(),
        topology_digest: digest.to_string(),
        bin_dir: bin.to_path_buf(),
        kubeconfig: kubeconfig.clone(),
        etcd,
        clusters,
    };

    p.say(format!("starting etcd on 127.0.0.1:{etcd_port}"));
    state.etcd.pid = Some(procs::spawn(&state.etcd.argv, &state.etcd.log)?);
    state.save(dir)?;
    wait_until(timeout, "etcd to accept connections", || async {
        procs::port_open(etcd_port)
    })
    .await?;

    for c in state.clusters.values_mut() {
        p.say(format!(
            "starting kube-apiserver for {} ({}) on https://127.0.0.1:{}",
            c.name, c.role, c.apiserver_port
        ));
        let api = &mut c.components[0];
        api.pid = Some(procs::spawn(&api.argv, &api.log)?);
    }
    state.save(dir)?;
    let clients = clients(&kubeconfig, &names).await?;
    futures::future::try_join_all(names.iter().map(|n| {
        let client = clients[*n].clone();
        let c = &state.clusters[*n];
        async move {
            wait_apiserver_ready(&client, timeout)
                .await
                .with_context(|| {
                    format!(
                        "kube-apiserver of {n} did not become ready; see {}",
                        c.components[0].log.display()
                    )
                })?;
            p.say(format!("kube-apiserver of {n} is ready"));
            anyhow::Ok(())
        }
    }))
    .await?;

    for c in state.clusters.values_mut() {
        for comp in c.components.iter_mut().skip(1) {
            comp.pid = Some(procs::spawn(&comp.argv, &comp.log)?);
        }
        let started: Vec<_> = c
            .components
            .iter()
            .skip(1)
            .map(|c| format!("{}:{}", c.name, c.port))
            .collect();
        p.say(format!("started {} for {}", started.join(", "), c.name));
    }
    state.save(dir)?;

    let mut node_count = 0;
    for m in &topology.members {
        let nodes = Topology::nodes(m);
        node_count += nodes.len();
        let api: Api<Node> = Api::all(clients[m.name.as_str()].clone());
        for n in &nodes {
            let node: Node = serde_json::from_value(node_object(n))?;
            match api.create(&PostParams::default(), &node).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => {
                    return Err(e)
                        .with_context(|| format!("creating node {} in {}", n.name, m.name));
                }
            }
        }
        p.say(format!("created {} kwok nodes in {}", nodes.len(), m.name));
        create_storage_class(&clients[m.name.as_str()])
            .await
            .with_context(|| format!("storage class in {}", m.name))?;
    }

    p.say(format!(
        "waiting for {node_count} nodes to be Ready and for the controller-managers to serve"
    ));
    futures::future::try_join_all(names.iter().map(|n| {
        let client = clients[*n].clone();
        let expected = topology
            .member(n)
            .map(|m| Topology::nodes(m).len())
            .unwrap_or(0);
        async move {
            wait_nodes_ready(&client, expected, timeout)
                .await
                .with_context(|| format!("nodes of {n}"))?;
            // The default ServiceAccount appears once the controller-manager runs.
            let sa: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
            wait_until(
                timeout,
                &format!("the controller-manager of {n} (default ServiceAccount)"),
                || {
                    let sa = sa.clone();
                    async move { sa.get_opt("default").await.ok().flatten().is_some() }
                },
            )
            .await?;
            anyhow::Ok(())
        }
    }))
    .await?;

    summary(p, &state, topology).await;
    println!("KUBECONFIG={}", kubeconfig.display());
    Ok(())
}

fn write_kwok_config(dir: &Path, bin: &Path) -> anyhow::Result<PathBuf> {
    // The stock "fast" stages: nodes become Ready and keep a Lease; pods run at once,
    // pods owned by Jobs succeed, deleted pods go away.
    let stages = [
        "node/fast/node-initialize.yaml",
        "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
        "pod/fast/pod-ready.yaml",
        "pod/general/pod-complete.yaml",
        "pod/fast/pod-delete.yaml",
        // PVCs of the `kwok-volume` class (the default) get a PV and bind at once.
        "volume/fast/pvc-provision.yaml",
        "volume/fast/pv-bind.yaml",
        "volume/fast/pv-delete.yaml",
        "volume/fast/pvc-delete.yaml",
    ];
    let mut docs = Vec::new();
    for s in stages {
        let path = bin.join("kwok-stages").join(s);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading kwok stage {}", path.display()))?;
        docs.push(if s == "pod/general/pod-complete.yaml" {
            // Job pods succeed at once unless the pod asks for a run time with the
            // `pod-complete.stage.kwok.x-k8s.io/delay` annotation (e.g. "20s"): failover
            // tests need shards that are still running when a member goes away.
            immediate_unless_delayed(&text)?
        } else {
            text
        });
    }
    let path = dir.join("kwok.yaml");
    std::fs::write(&path, docs.join("\n---\n"))?;
    Ok(path)
}

/// The general pod-complete stage with no default delay or jitter.
fn immediate_unless_delayed(stage: &str) -> anyhow::Result<String> {
    let mut out = String::with_capacity(stage.len());
    let mut replaced = 0;
    for line in stage.lines() {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        if trimmed.starts_with("durationMilliseconds:") {
            out.push_str(&format!("{indent}durationMilliseconds: 0\n"));
            replaced += 1;
        } else if trimmed.starts_with("jitterDurationMilliseconds:") {
            out.push_str(&format!("{indent}jitterDurationMilliseconds: 0\n"));
            replaced += 1;
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    anyhow::ensure!(
        replaced == 2,
        "kwok's general pod-complete stage changed shape (expected a delay and a jitter)"
    );
    Ok(out)
}

/// The default StorageClass whose claims kwok's volume stages provision and bind.
async fn create_storage_class(client: &kube::Client) -> anyhow::Result<()> {
    use k8s_openapi::api::storage::v1::StorageClass;
    let sc: StorageClass = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "kwok-volume", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": "kwok.x-k8s.io/volume",
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
    }))?;
    match Api::<StorageClass>::all(client.clone())
        .create(&PostParams::default(), &sc)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn node_object(n: &pinfed::topology::NodeSpec) -> serde_json::Value {
    let mut capacity = serde_json::json!({
        "cpu": n.cpu.to_string(),
        "memory": binary_quantity(n.memory.units()),
        "pods": n.pods.to_string(),
        "ephemeral-storage": "1Ti",
    });
    if n.gpu > 0 {
        capacity[GPU_RESOURCE] = serde_json::json!(n.gpu.to_string());
    }
    let taints: Vec<_> = n
        .taints
        .iter()
        .map(|t| serde_json::json!({"key": t.key, "value": t.value.clone().unwrap_or_default(), "effect": t.effect}))
        .collect();
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": n.name,
            "labels": n.labels,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"taints": taints},
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "nodeInfo": {"kubeletVersion": "kwok", "architecture": "amd64", "operatingSystem": "linux"},
            "phase": "Running",
        },
    })
}

/// Bytes as the largest exact binary unit ("32Gi"), as people write node memory.
fn binary_quantity(bytes: i128) -> String {
    for (shift, unit) in [(40, "Ti"), (30, "Gi"), (20, "Mi"), (10, "Ki")] {
        if bytes > 0 && bytes % (1 << shift) == 0 {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

fn kubeconfig_yaml(pki: &Pki, clusters: &[(String, u16)]) -> anyhow::Result<String> {
    use base64::Engine;
    let b64 = |p: PathBuf| -> anyhow::Result<String> {
        Ok(base64::engine::general_purpose::STANDARD.encode(std::fs::read(p)?))
    };
    let (ca, crt, key) = (
        b64(pki.ca_crt())?,
        b64(pki.admin_crt())?,
        b64(pki.admin_key())?,
    );
    let mut y = String::from("apiVersion: v1\nkind: Config\nclusters:\n");
    for (name, port) in clusters {
        y += &format!(
            "- name: {name}\n  cluster:\n    server: https://127.0.0.1:{port}\n    certificate-authority-data: {ca}\n"
        );
    }
    y += "users:\n- name: pinfed-e2e-admin\n  user:\n";
    y += &format!("    client-certificate-data: {crt}\n    client-key-data: {key}\n");
    y += "contexts:\n";
    for (name, _) in clusters {
        y += &format!(
            "- name: {name}\n  context:\n    cluster: {name}\n    user: pinfed-e2e-admin\n"
        );
    }
    y += &format!("current-context: {}\n", clusters[0].0);
    Ok(y)
}

async fn clients(
    kubeconfig: &Path,
    names: &[&str],
) -> anyhow::Result<BTreeMap<String, kube::Client>> {
    let kc = Kubeconfig::read_from(kubeconfig)?;
    let mut out = BTreeMap::new();
    for n in names {
        let opts = KubeConfigOptions {
            context: Some(n.to_string()),
            ..Default::default()
        };
        let mut cfg = kube::Config::from_custom_kubeconfig(kc.clone(), &opts).await?;
        cfg.connect_timeout = Some(Duration::from_secs(2));
        cfg.read_timeout = Some(Duration::from_secs(10));
        out.insert(n.to_string(), kube::Client::try_from(cfg)?);
    }
    Ok(out)
}

async fn wait_until<F, Fut>(timeout: Duration, what: &str, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if check().await {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("timed out after {}s waiting for {what}", timeout.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn readyz(client: &kube::Client) -> bool {
    let Ok(req) = http::Request::get("/readyz").body(Vec::new()) else {
        return false;
    };
    matches!(client.request_text(req).await, Ok(body) if body.trim() == "ok")
}

async fn wait_apiserver_ready(client: &kube::Client, timeout: Duration) -> anyhow::Result<()> {
    wait_until(timeout, "/readyz", || readyz(client)).await
}

async fn wait_nodes_ready(
    client: &kube::Client,
    expected: usize,
    timeout: Duration,
) -> anyhow::Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    wait_until(timeout, &format!("{expected} Ready nodes"), || {
        let api = api.clone();
        async move {
            let Ok(list) = api.list(&Default::default()).await else {
                return false;
            };
            let ready = list
                .items
                .iter()
                .filter(|n| {
                    n.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|cs| {
                            cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                        })
                })
                .count();
            ready >= expected
        }
    })
    .await
}

async fn summary(p: &Progress, state: &State, topology: &Topology) {
    p.say(format!("topology {} is up", state.topology_file.display()));
    eprintln!(
        "  {:<10} {:<7} {:<24} {:>5} {:>8} {:>10} {:>6} {:>5}",
        "CLUSTER", "ROLE", "ENDPOINT", "NODES", "CPU", "MEMORY", "PODS", "GPU"
    );
    for c in state.clusters.values() {
        let nodes = topology
            .member(&c.name)
            .map(Topology::nodes)
            .unwrap_or_default();
        let cpu = nodes.iter().fold(Milli::ZERO, |a, n| a + n.cpu);
        let mem_gi = nodes.iter().fold(Milli::ZERO, |a, n| a + n.memory).units() >> 30;
        let pods: u32 = nodes.iter().map(|n| n.pods).sum();
        let gpu: u32 = nodes.iter().map(|n| n.gpu).sum();
        eprintln!(
            "  {:<10} {:<7} {:<24} {:>5} {:>8} {:>8}Gi {:>6} {:>5}",
            c.name,
            c.role,
            format!("https://127.0.0.1:{}", c.apiserver_port),
            nodes.len(),
            cpu.to_string(),
            mem_gi,
            pods,
            gpu
        );
    }
    let rss: u64 = state
        .all_components()
        .filter_map(|c| c.pid.and_then(procs::rss_bytes))
        .sum();
    eprintln!("  memory (RSS of all components): {} MiB", rss >> 20);
    eprintln!(
        "  kubeconfig: {} (contexts: {})",
        state.kubeconfig.display(),
        state
            .clusters
            .keys()
            .cloned()
            .collect::<Vec<_>>()
            .join(", ")
    );
}

fn down(dir: &Path) -> anyhow::Result<()> {
    let m = marker(dir);
    if let Some(state) = State::load(dir).unwrap_or(None) {
        // Clients first, etcd last, so nothing logs storms of storage errors.
        let mut comps: Vec<&Component> = state
            .clusters
            .values()
            .flat_map(|c| c.components.iter().rev())
            .collect();
        comps.push(&state.etcd);
        for c in comps {
            if let Some(pid) = c.pid {
                procs::stop(pid, &m, Duration::from_secs(10));
            }
        }
    }
    // Anything else still running from this state directory (e.g. a crashed up).
    for pid in stray_pids(&m) {
        procs::stop(pid, &m, Duration::from_secs(5));
    }
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    eprintln!("e2e: down; removed {}", dir.display());
    Ok(())
}

/// Processes whose command line mentions the state directory, other than this one.
fn stray_pids(marker: &str) -> Vec<u32> {
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me && procs::is_ours(pid, &format!("={marker}/")))
        .collect()
}

fn loaded(dir: &Path) -> anyhow::Result<State> {
    State::load(dir)?.with_context(|| {
        format!(
            "nothing is up (no state in {}); run e2e/up FILE",
            dir.display()
        )
    })
}

fn status(dir: &Path) -> anyhow::Result<()> {
    let state = loaded(dir)?;
    let m = marker(dir);
    println!("topology: {}", state.topology_file.display());
    println!("kubeconfig: {}", state.kubeconfig.display());
    println!(
        "{:<10} {:<24} {:>6} {:>8} {:<8} {:>8}",
        "CLUSTER", "COMPONENT", "PORT", "PID", "STATE", "RSS"
    );
    let mut total = 0;
    let row = |cluster: &str, c: &Component, total: &mut u64| {
        let alive = c.pid.is_some_and(|p| procs::is_ours(p, &m));
        let rss = c
            .pid
            .filter(|_| alive)
            .and_then(procs::rss_bytes)
            .unwrap_or(0);
        *total += rss;
        println!(
            "{:<10} {:<24} {:>6} {:>8} {:<8} {:>6}Mi",
            cluster,
            c.name,
            c.port,
            c.pid.map(|p| p.to_string()).unwrap_or("-".into()),
            if alive { "running" } else { "stopped" },
            rss >> 20
        );
    };
    row("-", &state.etcd, &mut total);
    for c in state.clusters.values() {
        for comp in &c.components {
            row(&c.name, comp, &mut total);
        }
    }
    println!("total RSS: {} MiB", total >> 20);
    Ok(())
}

fn cluster_mut<'a>(state: &'a mut State, name: &str) -> anyhow::Result<&'a mut ClusterState> {
    let known = state
        .clusters
        .keys()
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    state
        .clusters
        .get_mut(name)
        .with_context(|| format!("unknown cluster {name:?}; known clusters: {known}"))
}

/// Components that a real control plane runs with leader election and restarts when they
/// lose their lease: they go down with the API server and start afresh after it.
fn restarts_with_apiserver(component: &str) -> bool {
    matches!(component, "kube-controller-manager" | "kube-scheduler")
}

fn stop_cluster(dir: &Path, name: &str) -> anyhow::Result<()> {
    let mut state = loaded(dir)?;
    let m = marker(dir);
    let c = cluster_mut(&mut state, name)?;
    // The controller-manager and scheduler first (a real one exits once its lease cannot
    // be renewed), then the API server; kwok (the nodes' kubelets) keeps running.
    let mut stopped = Vec::new();
    for comp in c.components.iter_mut().rev() {
        if comp.name != "kube-apiserver" && !restarts_with_apiserver(&comp.name) {
            continue;
        }
        if let Some(pid) = comp.pid.take() {
            procs::stop(pid, &m, Duration::from_secs(10));
            stopped.push(comp.name.clone());
        }
    }
    let port = c.apiserver_port;
    state.save(dir)?;
    eprintln!(
        "e2e: stopped {} of {name} (API server port {port}); its data is kept",
        if stopped.is_empty() {
            "nothing (already stopped)".to_string()
        } else {
            stopped.join(", ")
        }
    );
    Ok(())
}

async fn start_cluster(dir: &Path, name: &str, timeout: Duration) -> anyhow::Result<()> {
    let mut state = loaded(dir)?;
    let m = marker(dir);
    let kubeconfig = state.kubeconfig.clone();
    let c = cluster_mut(&mut state, name)?;
    let api = &mut c.components[0];
    if api.pid.is_some_and(|p| procs::is_ours(p, &m)) {
        eprintln!("e2e: the kube-apiserver of {name} already runs");
    } else {
        if procs::port_open(api.port) {
            bail!(
                "port {} of {name}'s kube-apiserver is taken by another process",
                api.port
            );
        }
        api.pid = Some(procs::spawn(&api.argv, &api.log)?);
    }
    let log = api.log.clone();
    state.save(dir)?;
    let client = clients(&kubeconfig, &[name])
        .await?
        .remove(name)
        .expect("client for the named cluster");
    wait_apiserver_ready(&client, timeout)
        .await
        .with_context(|| format!("see {}", log.display()))?;
    eprintln!("e2e: the kube-apiserver of {name} is ready");

    // Then every other component that does not run (the controller-manager and scheduler
    // that `stop` took down, or anything that exited), with fresh caches, as a kubelet
    // restarts a control-plane container.
    let c = cluster_mut(&mut state, name)?;
    let mut started = Vec::new();
    for comp in c.components.iter_mut().skip(1) {
        if comp.pid.is_some_and(|p| procs::is_ours(p, &m)) {
            continue;
        }
        if procs::port_open(comp.port) {
            bail!(
                "port {} of {name}'s {} is taken by another process",
                comp.port,
                comp.name
            );
        }
        comp.pid = Some(procs::spawn(&comp.argv, &comp.log)?);
        started.push((comp.name.clone(), comp.port, comp.log.clone()));
    }
    state.save(dir)?;
    for (component, port, log) in &started {
        wait_until(
            timeout,
            &format!("{component} of {name} to serve"),
            || async { procs::port_open(*port) },
        )
        .await
        .with_context(|| format!("see {}", log.display()))?;
    }
    if !started.is_empty() {
        let names: Vec<&str> = started.iter().map(|s| s.0.as_str()).collect();
        eprintln!("e2e: started {} of {name} afresh", names.join(", "));
    }
    Ok(())
}
