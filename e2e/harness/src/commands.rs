//! The commands: `up` (validate, build the toolchain if needed, start every component and
//! wait for it), `down`, `status`, and `stop`/`start` of one cluster (see docs/e2e.md for
//! what they do to each component).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use kube::api::{Api, Patch, PatchParams, PostParams};
use pinfed::api::quantity::Milli;
use pinfed::topology::Topology;
use sha2::Digest;
use testkit::{Sample, detached};

use crate::pki::Pki;
use crate::state::{ClusterState, Component, State};
use crate::{
    Progress, apiserver, controllers, etcd, karmada, kwok, load_topology, marker, repo_root,
    wait_until,
};

pub async fn up(
    dir: &Path,
    file: &Path,
    bin_dir: Option<PathBuf>,
    timeout: Duration,
    start_batch: usize,
) -> anyhow::Result<()> {
    let p = Progress(Instant::now());
    // Validate before anything starts.
    let topology = load_topology(file)?;
    let text = std::fs::read(file)?;
    let digest = format!("{:x}", sha2::Sha256::digest(&text));
    let file = std::fs::canonicalize(file)?;

    if let Some(old) = State::load(dir).unwrap_or(None) {
        let all_alive = old.all_components().all(|c| {
            c.pid
                .is_some_and(|pid| detached::is_ours(pid, &marker(dir)))
        });
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

    // A Karmada peer needs its build (e2e/peers/karmada/build); checked before anything starts.
    let karmada_dirs = if topology.peers.karmada {
        Some(karmada::Dirs::find()?)
    } else {
        None
    };
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
    let result = bring_up(
        &p,
        &dir,
        &file,
        &digest,
        &topology,
        &bin,
        karmada_dirs.as_ref(),
        timeout,
        start_batch,
    )
    .await;
    if result.is_err() {
        p.say(format!(
            "bring-up failed; logs are in {} (e2e/down removes them)",
            dir.display()
        ));
    }
    result
}

pub fn build_toolchain(p: &Progress) -> anyhow::Result<PathBuf> {
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

#[allow(clippy::too_many_arguments)]
async fn bring_up(
    p: &Progress,
    dir: &Path,
    file: &Path,
    digest: &str,
    topology: &Topology,
    bin: &Path,
    karmada_dirs: Option<&karmada::Dirs>,
    timeout: Duration,
    start_batch: usize,
) -> anyhow::Result<()> {
    let pki = Pki::ensure(&dir.join("pki"))?;
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs)?;
    let kwok_config = kwok::write_config(dir, bin)?;

    let names = topology.cluster_names();
    // etcd client + peer, and per cluster: apiserver, controller-manager, scheduler, kwok.
    let karmada_ports = if karmada_dirs.is_some() {
        karmada::Ports::COUNT
    } else {
        0
    };
    let ports = testkit::free_ports(2 + names.len() * 4 + karmada_ports)?;
    let mut ports = ports.into_iter();
    let mut next = || ports.next().expect("enough ports were reserved");

    let (etcd_port, peer_port) = (next(), next());
    let etcd = etcd::component(bin, dir, &logs, etcd_port, peer_port);

    let mut clusters = BTreeMap::new();
    for name in &names {
        let is_hub = *name == topology.hub.name;
        let light = topology.member(name).is_some_and(|m| m.light);
        let cdir = dir.join("clusters").join(name);
        std::fs::create_dir_all(&cdir)?;
        let (api, kcm, sched, kwok) = (next(), next(), next(), next());
        let kubeconfig = cdir.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            apiserver::kubeconfig_yaml(&pki, &[(name.to_string(), api)])?,
        )?;
        let kc = kubeconfig.display().to_string();
        // The hub's API server audits pinfed's writes (one-writer tests read it).
        let audit = if is_hub && topology.hub.audit {
            apiserver::audit_args(dir, &logs, name)?
        } else {
            Vec::new()
        };
        let mut server = if light {
            apiserver::component(
                bin,
                &pki,
                &logs,
                name,
                etcd_port,
                api,
                apiserver::lean_args(),
            )
        } else {
            apiserver::component(bin, &pki, &logs, name, etcd_port, api, audit)
        };
        if light {
            server.env = apiserver::lean_env();
        }
        let mut components = vec![server];
        // A light member is its API server alone (nodes Ready once, nothing runs pods).
        if !light {
            components.push(controllers::controller_manager(
                bin, &pki, &logs, name, &kc, kcm,
            ));
        }
        if !is_hub && !light {
            components.push(controllers::scheduler(bin, &cdir, &logs, name, &kc, sched)?);
            components.push(kwok::component(bin, &logs, name, &kc, &kwok_config, kwok));
        }
        clusters.insert(
            name.to_string(),
            ClusterState {
                name: name.to_string(),
                role: match (is_hub, light) {
                    (true, _) => "hub",
                    (false, true) => "light",
                    (false, false) => "member",
                }
                .into(),
                apiserver_port: api,
                components,
            },
        );
    }

    // The Karmada peer: a cluster of the state like the others, started in its own stage.
    let mut client_names = names.clone();
    if let Some(kd) = karmada_dirs {
        let ports = karmada::Ports::take(&mut next);
        let cdir = dir.join("clusters").join(karmada::NAME);
        std::fs::create_dir_all(&cdir)?;
        let kc = cdir.join("kubeconfig");
        std::fs::write(
            &kc,
            apiserver::kubeconfig_yaml(&pki, &[(karmada::NAME.to_string(), ports.api)])?,
        )?;
        clusters.insert(
            karmada::NAME.to_string(),
            karmada::cluster_state(bin, kd, &pki, &logs, &kc, etcd_port, &ports),
        );
        client_names.push(karmada::NAME);
    }

    let kubeconfig = dir.join("kubeconfig");
    let contexts: Vec<(String, u16)> = client_names
        .iter()
        .map(|n| (n.to_string(), clusters[*n].apiserver_port))
        .collect();
    std::fs::write(&kubeconfig, apiserver::kubeconfig_yaml(&pki, &contexts)?)?;
    let mut state = State {
        topology_file: file.to_path_buf(),
        topology_digest: digest.to_string(),
        bin_dir: bin.to_path_buf(),
        kubeconfig: kubeconfig.clone(),
        etcd,
        clusters,
    };

    p.say(format!("starting etcd on 127.0.0.1:{etcd_port}"));
    state.etcd.pid = Some(spawn_control_plane(&state.etcd)?);
    state.save(dir)?;
    wait_until(timeout, "etcd to accept connections", || async {
        testkit::port_open(etcd_port)
    })
    .await?;

    // API servers start `start_batch` at a time, each batch once the last is ready: the
    // first seconds of an API server (its caches, bootstrap objects, post-start hooks) are
    // CPU-bound, and fifty at once on two cores missed a 300 s readiness limit.
    let clients = apiserver::clients(&kubeconfig, &client_names).await?;
    let order: Vec<String> = state.clusters.keys().cloned().collect();
    let batches = order.len().div_ceil(start_batch);
    for (i, batch) in order.chunks(start_batch).enumerate() {
        for name in batch {
            let c = state
                .clusters
                .get_mut(name)
                .expect("a cluster of the state");
            p.say(format!(
                "starting kube-apiserver for {} ({}) on https://127.0.0.1:{}",
                c.name, c.role, c.apiserver_port
            ));
            let api = &mut c.components[0];
            api.pid = Some(spawn_control_plane(api)?);
        }
        state.save(dir)?;
        // The Karmada peer's API server is waited for in karmada::bring_up.
        let ours = batch.iter().filter(|n| names.contains(&n.as_str()));
        futures::future::try_join_all(ours.map(|n| {
            let client = clients[n.as_str()].clone();
            let c = &state.clusters[n];
            async move {
                apiserver::wait_ready(&client, timeout)
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
        if batches > 1 {
            p.say(format!("API servers: batch {} of {batches} ready", i + 1));
        }
    }

    for c in state.clusters.values_mut() {
        if c.role == karmada::ROLE {
            continue; // started in order by karmada::bring_up
        }
        for comp in c.components.iter_mut().skip(1) {
            comp.pid = Some(spawn_control_plane(comp)?);
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
            let mut object = kwok::node_object(n);
            if m.light {
                // No kwok to report it: Ready once, and no node controller to take it back.
                object["status"]["conditions"] = serde_json::json!([{
                    "type": "Ready", "status": "True", "reason": "LightMember",
                    "message": "registered Ready by the e2e harness (light member)",
                    "lastHeartbeatTime": k8s_openapi::jiff::Timestamp::now().to_string(),
                    "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string(),
                }]);
            }
            let taints = object["spec"]["taints"].clone();
            let node: Node = serde_json::from_value(object)?;
            match api.create(&PostParams::default(), &node).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => {
                    return Err(e)
                        .with_context(|| format!("creating node {} in {}", n.name, m.name));
                }
            }
            if m.light {
                // The API server taints a new node not-ready (TaintNodesByCondition); the
                // node controller that lifts it does not run in a light member.
                api.patch(
                    &n.name,
                    &PatchParams::default(),
                    &Patch::Merge(serde_json::json!({"spec": {"taints": taints}})),
                )
                .await
                .with_context(|| format!("untainting node {} in {}", n.name, m.name))?;
            }
        }
        if m.light {
            p.say(format!(
                "registered {} Ready nodes in {} (light)",
                nodes.len(),
                m.name
            ));
            continue;
        }
        p.say(format!("created {} kwok nodes in {}", nodes.len(), m.name));
        kwok::create_storage_class(&clients[m.name.as_str()])
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
        let light = topology.member(n).is_some_and(|m| m.light);
        async move {
            kwok::wait_nodes_ready(&client, expected, timeout)
                .await
                .with_context(|| format!("nodes of {n}"))?;
            if light {
                return anyhow::Ok(());
            }
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

    if let Some(kd) = karmada_dirs {
        let members: Vec<&str> = topology.members.iter().map(|m| m.name.as_str()).collect();
        karmada::bring_up(p, &mut state, dir, &pki, kd, &clients, &members, timeout).await?;
    }

    summary(p, &state, topology).await;
    println!("KUBECONFIG={}", kubeconfig.display());
    Ok(())
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
        .filter_map(|c| c.pid.and_then(|pid| Sample::of(pid).map(|s| s.rss_bytes)))
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

pub fn down(dir: &Path) -> anyhow::Result<()> {
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
                detached::stop(pid, &m, Duration::from_secs(10));
            }
        }
    }
    // Anything else still running from this state directory (e.g. a crashed up).
    for pid in stray_pids(&m) {
        detached::stop(pid, &m, Duration::from_secs(5));
    }
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    eprintln!("e2e: down; removed {}", dir.display());
    Ok(())
}

/// Processes whose command line mentions the state directory, other than this one.
fn stray_pids(marker: &str) -> Vec<u32> {
    detached::pids_with(&format!("={marker}/"))
}

fn loaded(dir: &Path) -> anyhow::Result<State> {
    State::load(dir)?.with_context(|| {
        format!(
            "nothing is up (no state in {}); run e2e/up FILE",
            dir.display()
        )
    })
}

pub fn status(dir: &Path) -> anyhow::Result<()> {
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
        let alive = c.pid.is_some_and(|p| detached::is_ours(p, &m));
        let rss = c
            .pid
            .filter(|_| alive)
            .and_then(|pid| Sample::of(pid).map(|s| s.rss_bytes))
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

pub fn stop(dir: &Path, name: &str, only: &[String]) -> anyhow::Result<()> {
    let mut state = loaded(dir)?;
    let m = marker(dir);
    let c = cluster_mut(&mut state, name)?;
    if let Some(bad) = only
        .iter()
        .find(|o| !c.components.iter().any(|comp| comp.name == **o))
    {
        let known: Vec<&str> = c.components.iter().map(|c| c.name.as_str()).collect();
        bail!(
            "{name} has no component {bad:?}; its components: {}",
            known.join(", ")
        );
    }
    // The controller-manager and scheduler first (a real one exits once its lease cannot
    // be renewed), then the API server; kwok (the nodes' kubelets) keeps running.
    let mut stopped = Vec::new();
    for comp in c.components.iter_mut().rev() {
        let chosen = if only.is_empty() {
            comp.name == "kube-apiserver" || controllers::restarts_with_apiserver(&comp.name)
        } else {
            only.contains(&comp.name)
        };
        if !chosen {
            continue;
        }
        if let Some(pid) = comp.pid.take() {
            detached::stop(pid, &m, Duration::from_secs(10));
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

pub async fn start(dir: &Path, name: &str, timeout: Duration) -> anyhow::Result<()> {
    let mut state = loaded(dir)?;
    let m = marker(dir);
    let kubeconfig = state.kubeconfig.clone();
    let c = cluster_mut(&mut state, name)?;
    let api = &mut c.components[0];
    if api.pid.is_some_and(|p| detached::is_ours(p, &m)) {
        eprintln!("e2e: the kube-apiserver of {name} already runs");
    } else {
        if testkit::port_open(api.port) {
            bail!(
                "port {} of {name}'s kube-apiserver is taken by another process",
                api.port
            );
        }
        api.pid = Some(spawn_control_plane(api)?);
    }
    let log = api.log.clone();
    state.save(dir)?;
    let client = apiserver::clients(&kubeconfig, &[name])
        .await?
        .remove(name)
        .expect("client for the named cluster");
    apiserver::wait_ready(&client, timeout)
        .await
        .with_context(|| format!("see {}", log.display()))?;
    eprintln!("e2e: the kube-apiserver of {name} is ready");

    // Then every other component that does not run (the controller-manager and scheduler
    // that `stop` took down, or anything that exited), with fresh caches, as a kubelet
    // restarts a control-plane container.
    let c = cluster_mut(&mut state, name)?;
    let mut started = Vec::new();
    for comp in c.components.iter_mut().skip(1) {
        if comp.pid.is_some_and(|p| detached::is_ours(p, &m)) {
            continue;
        }
        if testkit::port_open(comp.port) {
            bail!(
                "port {} of {name}'s {} is taken by another process",
                comp.port,
                comp.name
            );
        }
        comp.pid = Some(spawn_control_plane(comp)?);
        started.push((comp.name.clone(), comp.port, comp.log.clone()));
    }
    state.save(dir)?;
    for (component, port, log) in &started {
        wait_until(
            timeout,
            &format!("{component} of {name} to serve"),
            || async { testkit::port_open(*port) },
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

/// Starts a control-plane process (etcd, an API server, a controller-manager, a scheduler,
/// kwok) with the Go garbage collector set by `PINFED_E2E_GOGC` (400 unless set).
///
/// Profiles of the API servers under the e2e suite (`PINFED_E2E_PROFILING=1`, `go tool
/// pprof`) showed a third of their CPU in the collector at Go's default of 100; the suite
/// is bound by that CPU on two cores, and the machine has memory to spare. The figures are
/// in docs/benchmarks.md; the benchmarks that compare with Karmada start both sides' API
/// servers this way.
///
/// A component's own `env` (a light member's API server: `apiserver::LEAN_ENV`) comes last
/// and wins.
fn spawn_control_plane(c: &Component) -> anyhow::Result<u32> {
    let gogc = std::env::var("PINFED_E2E_GOGC").unwrap_or_else(|_| "400".to_string());
    let mut env: Vec<(&str, String)> = vec![("GOGC", gogc)];
    env.retain(|(k, _)| !c.env.iter().any(|(o, _)| o == k));
    env.extend(c.env.iter().map(|(k, v)| (k.as_str(), v.clone())));
    detached::spawn_with_env(&c.argv, &c.log, &env)
}
