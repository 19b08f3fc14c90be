//! The JSS client commands: `pinfed submit | get | describe | delete | clusters | quota |
//! owners`. They talk to the Job Submission Service with a token, never to a cluster.
//! Human tables by default, `-o json|yaml` for scripts; a JSS error is printed with its
//! field paths (or quota numbers) and the command exits non-zero.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, ValueEnum};
use serde_json::{Value, json};

use crate::api::quantity::Milli;
use crate::jss::client::{JssClient, Reply};
use crate::jss::request::{kind_path, parse_kind};

#[derive(Debug, Clone, Copy, ValueEnum, Default)]
pub enum Output {
    #[default]
    Table,
    Json,
    Yaml,
}

/// How to reach the JSS.
#[derive(Clone, Args)]
pub struct ServerArgs {
    /// The JSS URL (`https://jss.example:8443`; `http://` only for loopback).
    #[arg(
        long,
        env = "PINFED_SERVER",
        default_value = "http://127.0.0.1:8443",
        global = true
    )]
    pub server: String,
    /// Bearer token.
    #[arg(long, env = "PINFED_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,
    /// File holding the bearer token (when --token is not given).
    #[arg(long, env = "PINFED_TOKEN_FILE", global = true)]
    pub token_file: Option<PathBuf>,
    /// PEM CA certificate to trust for an https server.
    #[arg(long, env = "PINFED_CA_CERT", global = true)]
    pub ca_cert: Option<PathBuf>,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Output::Table, global = true)]
    pub output: Output,
}

/// Never prints the token.
impl std::fmt::Debug for ServerArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerArgs")
            .field("server", &self.server)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("token_file", &self.token_file)
            .field("ca_cert", &self.ca_cert)
            .field("output", &self.output)
            .finish()
    }
}

impl ServerArgs {
    fn client(&self) -> anyhow::Result<JssClient> {
        let token = match (&self.token, &self.token_file) {
            (Some(t), _) => Some(t.clone()),
            (None, Some(f)) => Some(
                std::fs::read_to_string(f)
                    .with_context(|| format!("reading token file {}", f.display()))?
                    .trim()
                    .to_string(),
            ),
            (None, None) => None,
        };
        JssClient::new(&self.server, token, self.ca_cert.as_deref())
    }
}

#[derive(Debug, Args)]
pub struct SubmitArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    /// Artifact name (with --version), from the JSS's artifact store.
    #[arg(required_unless_present = "file", conflicts_with = "file")]
    pub name: Option<String>,
    /// Artifact version.
    #[arg(long, requires = "name")]
    pub version: Option<String>,
    /// Submit a resource file inline instead (if your team may).
    #[arg(short = 'f', long)]
    pub file: Option<PathBuf>,
    /// Namespace (when the resource does not name one).
    #[arg(short, long, env = "PINFED_NAMESPACE")]
    pub namespace: Option<String>,
}

#[derive(Debug, Args)]
pub struct GetArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    /// Kind: service, jobset, cronjob, daemon, trainingjob, statefulset.
    pub kind: Option<String>,
    /// Name (with a kind and --namespace).
    pub name: Option<String>,
    /// Namespace (all you may read when absent).
    #[arg(short, long, env = "PINFED_NAMESPACE")]
    pub namespace: Option<String>,
}

#[derive(Debug, Args)]
pub struct ObjectArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    pub kind: String,
    pub name: String,
    #[arg(short, long, env = "PINFED_NAMESPACE")]
    pub namespace: String,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub server: ServerArgs,
}

#[derive(Debug, Args)]
pub struct OwnersArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    /// Only workloads past their expiry (`pinterest.com/expires-at`, else creation plus the
    /// RuntimeProfile's `expiryDays`), with where they run.
    #[arg(long)]
    pub expired: bool,
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// A successful reply's body, or the JSS's error with its details as the command's error.
fn ok(r: Reply) -> anyhow::Result<Value> {
    if r.is_success() {
        Ok(r.body)
    } else {
        anyhow::bail!("{}", r.error_text())
    }
}

fn print(output: Output, v: &Value, table: impl FnOnce(&Value) -> String) -> anyhow::Result<()> {
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(v)?),
        Output::Yaml => print!("{}", crate::api::yaml::to_string(v)?),
        Output::Table => print!("{}", table(v)),
    }
    Ok(())
}

fn kind_segment(kind: &str) -> anyhow::Result<String> {
    parse_kind(kind).map(kind_path).with_context(|| {
        format!(
            "unknown kind {kind:?} (service, jobset, cronjob, daemon, trainingjob, statefulset)"
        )
    })
}

pub fn submit(args: SubmitArgs) -> anyhow::Result<()> {
    let client = args.server.client()?;
    let mut body = match (&args.file, &args.name) {
        (Some(f), _) => {
            let text =
                std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
            json!({ "resource": text })
        }
        (None, Some(name)) => {
            let version = args
                .version
                .clone()
                .context("--version is required with an artifact name")?;
            json!({ "artifact": { "name": name, "version": version } })
        }
        (None, None) => anyhow::bail!("give an artifact NAME --version V, or -f FILE"),
    };
    if let Some(ns) = &args.namespace {
        body["namespace"] = ns.clone().into();
    }
    let v = ok(runtime()?.block_on(client.post_json("/v1/submissions", &body))?)?;
    print(args.server.output, &v, |v| {
        format!(
            "{} {}/{} {} by {} for team {}{}\n",
            v["kind"].as_str().unwrap_or("-"),
            v["namespace"].as_str().unwrap_or("-"),
            v["name"].as_str().unwrap_or("-"),
            if v["created"] == true {
                "created"
            } else {
                "updated"
            },
            v["submittedBy"].as_str().unwrap_or("-"),
            v["team"].as_str().unwrap_or("-"),
            v["artifact"]
                .as_str()
                .map(|a| format!(" (artifact {a})"))
                .unwrap_or_default()
        )
    })
}

fn cond(s: &Value, t: &str) -> String {
    s["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == t))
        .and_then(|c| c["status"].as_str())
        .unwrap_or("-")
        .to_string()
}

fn progress(w: &Value) -> String {
    let s = &w["status"];
    match w["kind"].as_str().unwrap_or("") {
        "PinterestService" | "PinterestStatefulSet" => format!(
            "{}/{} avail",
            s["availableReplicas"].as_i64().unwrap_or(0),
            w["desired"]["replicas"].as_i64().unwrap_or(0)
        ),
        "PinterestJobSet" => format!(
            "{}/{} done",
            s["shardsSucceeded"].as_i64().unwrap_or(0),
            w["desired"]["shards"].as_i64().unwrap_or(0)
        ),
        "PinterestDaemon" => format!(
            "{}/{} ready",
            s["ready"].as_i64().unwrap_or(0),
            s["desired"].as_i64().unwrap_or(0)
        ),
        "PinterestTrainingJob" => format!(
            "{}/{} ready, complete={}",
            s["readyReplicas"].as_i64().unwrap_or(0),
            w["desired"]["replicas"].as_i64().unwrap_or(0),
            cond(s, "Complete")
        ),
        _ => format!("complete={}", cond(s, "Complete")),
    }
}

fn member_line(c: &Value) -> String {
    let num = |k: &str| c[k].as_i64().map(|n| n.to_string());
    let share = match (
        num("replicas"),
        num("readyReplicas"),
        num("availableReplicas"),
    ) {
        (Some(r), ready, avail) => format!(
            "replicas {r} ready {} available {}",
            ready.unwrap_or("0".into()),
            avail.unwrap_or("0".into())
        ),
        _ => match (
            num("shardsRunning"),
            num("shardsSucceeded"),
            num("shardsFailed"),
        ) {
            (None, None, None) => String::new(),
            (r, s, f) => format!(
                "shards running {} succeeded {} failed {}",
                r.unwrap_or("0".into()),
                s.unwrap_or("0".into()),
                f.unwrap_or("0".into())
            ),
        },
    };
    format!(
        "{:<10} {:<12} {}{}",
        c["cluster"].as_str().unwrap_or("?"),
        c["state"].as_str().unwrap_or("-"),
        share,
        c["message"]
            .as_str()
            .map(|m| format!("  ({m})"))
            .unwrap_or_default()
    )
}

fn split(w: &Value) -> String {
    let p = &w["status"]["placement"];
    let parts: Vec<String> = p["placements"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let c = p["cluster"].as_str().unwrap_or("?");
            match (p["replicas"].as_i64(), p["shards"].as_str()) {
                (Some(r), _) => format!("{c}:{r}"),
                (None, Some(s)) => format!("{c}:[{s}]"),
                _ => c.to_string(),
            }
        })
        .collect();
    let mut out = if parts.is_empty() {
        "-".into()
    } else {
        parts.join(" ")
    };
    if let Some(u) = p["unplaced"].as_i64().filter(|u| *u > 0) {
        out.push_str(&format!(" (+{u} unplaced)"));
    }
    out
}

/// The `get` table: one line per workload, then one indented line per member cluster.
pub fn workloads_table(items: &[Value]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<22} {:<36} {:<14} {:<28} {:<18} {:<6}",
        "KIND", "NAMESPACE/NAME", "TEAM", "SPLIT", "PROGRESS", "READY"
    );
    for w in items {
        let _ = writeln!(
            out,
            "{:<22} {:<36} {:<14} {:<28} {:<18} {:<6}",
            w["kind"].as_str().unwrap_or("-"),
            format!(
                "{}/{}",
                w["namespace"].as_str().unwrap_or("-"),
                w["name"].as_str().unwrap_or("-")
            ),
            w["team"].as_str().unwrap_or("-"),
            split(w),
            progress(w),
            cond(&w["status"], "Ready"),
        );
        for c in w["status"]["clusters"].as_array().into_iter().flatten() {
            let _ = writeln!(out, "  └ {}", member_line(c));
        }
    }
    if items.is_empty() {
        out.push_str("(no workloads)\n");
    }
    out
}

fn describe_text(w: &Value) -> String {
    let mut out = String::new();
    let s = &w["status"];
    let line = |out: &mut String, k: &str, v: String| {
        let _ = writeln!(out, "{k:<14} {v}");
    };
    let str_of = |v: &Value| v.as_str().unwrap_or("-").to_string();
    line(&mut out, "Kind:", str_of(&w["kind"]));
    line(&mut out, "Namespace:", str_of(&w["namespace"]));
    line(&mut out, "Name:", str_of(&w["name"]));
    line(
        &mut out,
        "Owner:",
        format!("{} ({})", str_of(&w["team"]), str_of(&w["contact"])),
    );
    line(&mut out, "Submitted by:", str_of(&w["submittedBy"]));
    line(&mut out, "Artifact:", str_of(&w["artifact"]));
    let r = &w["requested"];
    line(
        &mut out,
        "Requested:",
        format!(
            "cpu {} memory {} gpus {} pods {}",
            quantity("cpu", &r["cpu"]),
            quantity("memory", &r["memory"]),
            r["gpus"],
            r["pods"]
        ),
    );
    line(&mut out, "Strategy:", str_of(&s["placement"]["strategy"]));
    line(&mut out, "Split:", split(w));
    if let Some(reason) = s["placement"]["reason"].as_str() {
        line(&mut out, "Reason:", reason.to_string());
    }
    line(&mut out, "Progress:", progress(w));
    line(
        &mut out,
        "Generation:",
        format!("{} (observed {})", w["generation"], s["observedGeneration"]),
    );
    let _ = writeln!(out, "Clusters:");
    for c in s["clusters"].as_array().into_iter().flatten() {
        let _ = writeln!(out, "  {}", member_line(c));
    }
    let _ = writeln!(out, "Conditions:");
    for c in s["conditions"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "  {:<14} {:<8} {:<24} {}",
            str_of(&c["type"]),
            str_of(&c["status"]),
            str_of(&c["reason"]),
            c["message"].as_str().unwrap_or("")
        );
    }
    out
}

pub fn get(args: GetArgs) -> anyhow::Result<()> {
    let client = args.server.client()?;
    let path = match (&args.kind, &args.name, &args.namespace) {
        (Some(k), Some(n), Some(ns)) => format!("/v1/workloads/{ns}/{}/{n}", kind_segment(k)?),
        (Some(_), Some(_), None) => anyhow::bail!("give --namespace with a name"),
        (Some(k), None, Some(ns)) => format!("/v1/workloads/{ns}/{}", kind_segment(k)?),
        (Some(k), None, None) => format!("/v1/workloads?kind={}", kind_segment(k)?),
        (None, _, Some(ns)) => format!("/v1/workloads/{ns}"),
        (None, _, None) => "/v1/workloads".to_string(),
    };
    let v = ok(runtime()?.block_on(client.get(&path))?)?;
    print(args.server.output, &v, |v| match v["items"].as_array() {
        Some(items) => workloads_table(items),
        None => workloads_table(std::slice::from_ref(v)),
    })
}

pub fn describe(args: ObjectArgs) -> anyhow::Result<()> {
    let client = args.server.client()?;
    let path = format!(
        "/v1/workloads/{}/{}/{}",
        args.namespace,
        kind_segment(&args.kind)?,
        args.name
    );
    let v = ok(runtime()?.block_on(client.get(&path))?)?;
    print(args.server.output, &v, describe_text)
}

pub fn delete(args: ObjectArgs) -> anyhow::Result<()> {
    let client = args.server.client()?;
    let path = format!(
        "/v1/workloads/{}/{}/{}",
        args.namespace,
        kind_segment(&args.kind)?,
        args.name
    );
    let v = ok(runtime()?.block_on(client.delete(&path))?)?;
    print(args.server.output, &v, |v| {
        let d = &v["deleted"];
        format!(
            "{} {}/{} deleted (its slices are removed from every member)\n",
            d["kind"].as_str().unwrap_or("-"),
            d["namespace"].as_str().unwrap_or("-"),
            d["name"].as_str().unwrap_or("-")
        )
    })
}

fn units(v: &Value) -> String {
    v.as_str()
        .and_then(|q| Milli::parse(q).ok())
        .map(|m| m.units().to_string())
        .unwrap_or_else(|| "-".into())
}

/// A quantity as every pinfed surface prints it (`Milli::format_cpu`, `format_memory`);
/// other resources, and what does not parse, as given.
fn quantity(resource: &str, v: &Value) -> String {
    match v {
        Value::String(q) => match (resource, Milli::parse(q)) {
            ("cpu", Ok(m)) => m.format_cpu(),
            ("memory", Ok(m)) => m.format_memory(),
            _ => q.clone(),
        },
        Value::Number(n) => n.to_string(),
        _ => "-".into(),
    }
}

pub fn clusters_table(items: &[Value]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<10} {:<12} {:<12} {:<7} {:<9} {:>5} {:>13} {:>23} {:>9} {:>8}",
        "NAME",
        "REGION",
        "ZONE",
        "READY",
        "VERSION",
        "NODES",
        "CPU FREE/ALL",
        "MEM FREE/ALL",
        "GPU FREE",
        "PODS"
    );
    for c in items {
        let _ = writeln!(
            out,
            "{:<10} {:<12} {:<12} {:<7} {:<9} {:>5} {:>13} {:>23} {:>9} {:>8}",
            c["name"].as_str().unwrap_or("-"),
            c["region"].as_str().unwrap_or("-"),
            c["zone"].as_str().unwrap_or("-"),
            c["ready"].as_str().unwrap_or("-"),
            c["kubernetesVersion"].as_str().unwrap_or("-"),
            c["nodes"]
                .as_i64()
                .map(|n| n.to_string())
                .unwrap_or("-".into()),
            format!(
                "{}/{}",
                quantity("cpu", &c["available"]["cpu"]),
                quantity("cpu", &c["allocatable"]["cpu"])
            ),
            format!(
                "{}/{}",
                quantity("memory", &c["available"]["memory"]),
                quantity("memory", &c["allocatable"]["memory"])
            ),
            units(&c["available"]["gpus"]),
            format!(
                "{}/{}",
                units(&c["allocated"]["pods"]),
                units(&c["allocatable"]["pods"])
            ),
        );
    }
    if items.is_empty() {
        out.push_str("(no member clusters)\n");
    }
    out
}

pub fn clusters(args: ListArgs) -> anyhow::Result<()> {
    let client = args.server.client()?;
    let v = ok(runtime()?.block_on(client.get("/v1/clusters"))?)?;
    print(args.server.output, &v, |v| {
        clusters_table(v["items"].as_array().map(Vec::as_slice).unwrap_or(&[]))
    })
}

pub fn quotas_table(items: &[Value]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<28} {:<10} {:<8} {:>10} {:>10} {:>12}",
        "NAMESPACE/QUOTA", "SCOPE", "RESOURCE", "HARD", "USED", "REQUESTED"
    );
    for q in items {
        let name = format!(
            "{}/{}",
            q["namespace"].as_str().unwrap_or("-"),
            q["name"].as_str().unwrap_or("-")
        );
        for r in ["cpu", "memory", "gpus", "pods"] {
            if q["hard"][r].is_null() {
                continue;
            }
            let _ = writeln!(
                out,
                "{:<28} {:<10} {:<8} {:>10} {:>10} {:>12}",
                name,
                "total",
                r,
                quantity(r, &q["hard"][r]),
                quantity(r, &q["used"][r]),
                quantity(r, &q["requested"][r]),
            );
        }
        let mut clusters: Vec<String> = q["perCluster"]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        for c in q["usedPerCluster"]
            .as_object()
            .into_iter()
            .flat_map(|m| m.keys())
        {
            if !clusters.contains(c) {
                clusters.push(c.clone());
            }
        }
        clusters.sort();
        for c in clusters {
            for r in ["cpu", "memory", "gpus", "pods"] {
                let hard = &q["perCluster"][&c][r];
                let used = &q["usedPerCluster"][&c][r];
                if hard.is_null() && (used.is_null() || q["hard"][r].is_null()) {
                    continue;
                }
                let _ = writeln!(
                    out,
                    "{:<28} {:<10} {:<8} {:>10} {:>10} {:>12}",
                    name,
                    c,
                    r,
                    quantity(r, hard),
                    quantity(r, used),
                    "",
                );
            }
        }
    }
    if items.is_empty() {
        out.push_str("(no quotas in your namespaces)\n");
    }
    out
}

pub fn quota(args: ListArgs) -> anyhow::Result<()> {
    let client = args.server.client()?;
    let v = ok(runtime()?.block_on(client.get("/v1/quotas"))?)?;
    print(args.server.output, &v, |v| {
        quotas_table(v["items"].as_array().map(Vec::as_slice).unwrap_or(&[]))
    })
}

pub fn owners_table(v: &Value) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<18} {:<22} {:<32} {:<16} {:>7} {:>9} {:>5}  EXPIRES",
        "TEAM", "KIND", "NAMESPACE/NAME", "CLUSTERS", "CPU", "MEMORY", "GPUS"
    );
    for t in v["teams"].as_array().into_iter().flatten() {
        let team = t["team"].as_str().unwrap_or("-");
        for w in t["workloads"].as_array().into_iter().flatten() {
            let clusters: Vec<&str> = w["clusters"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let expires = match (w["expiresAt"].as_str(), w["expired"].as_bool()) {
                (Some(t), Some(true)) => format!("{t} (expired)"),
                (Some(t), _) => t.to_string(),
                (None, _) => "-".into(),
            };
            let _ = writeln!(
                out,
                "{:<18} {:<22} {:<32} {:<16} {:>7} {:>9} {:>5}  {}",
                team,
                w["kind"].as_str().unwrap_or("-"),
                format!(
                    "{}/{}",
                    w["namespace"].as_str().unwrap_or("-"),
                    w["name"].as_str().unwrap_or("-")
                ),
                if clusters.is_empty() {
                    "-".into()
                } else {
                    clusters.join(",")
                },
                quantity("cpu", &w["requested"]["cpu"]),
                quantity("memory", &w["requested"]["memory"]),
                w["requested"]["gpus"],
                expires,
            );
        }
        let _ = writeln!(
            out,
            "{:<18} {:<22} {:<32} {:<16} {:>7} {:>9} {:>5}",
            team,
            "TOTAL",
            format!(
                "contacts: {}",
                t["contacts"]
                    .as_array()
                    .map(|c| c
                        .iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(","))
                    .unwrap_or_default()
            ),
            "",
            quantity("cpu", &t["requested"]["cpu"]),
            quantity("memory", &t["requested"]["memory"]),
            t["requested"]["gpus"],
        );
    }
    out
}

pub fn owners(args: OwnersArgs) -> anyhow::Result<()> {
    let client = args.server.client()?;
    let path = if args.expired {
        "/v1/owners?expired=true"
    } else {
        "/v1/owners"
    };
    let v = ok(runtime()?.block_on(client.get(path))?)?;
    print(args.server.output, &v, owners_table)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_table_says_when_each_workload_expires() {
        let v = json!({"teams": [{
            "team": "ads", "contacts": ["a@x"], "requested": {"cpu": "1", "memory": "1Gi", "gpus": 0},
            "workloads": [
                {"kind": "PinterestJobSet", "namespace": "ads", "name": "old", "clusters": ["a", "b"],
                 "requested": {"cpu": "1", "memory": "1Gi", "gpus": 0},
                 "expiresAt": "2026-01-01T00:00:00Z", "expired": true},
                {"kind": "PinterestService", "namespace": "ads", "name": "web", "clusters": [],
                 "requested": {"cpu": "0", "memory": "0", "gpus": 0},
                 "expiresAt": null, "expired": false}
            ]
        }]});
        let t = owners_table(&v);
        let old = t.lines().find(|l| l.contains("ads/old")).unwrap();
        assert!(
            old.contains("a,b") && old.ends_with("2026-01-01T00:00:00Z (expired)"),
            "{t}"
        );
        let web = t.lines().find(|l| l.contains("ads/web")).unwrap();
        assert!(web.ends_with(" -"), "{t}");
    }

    #[test]
    fn clusters_and_quotas_show_exact_quantities() {
        let c = json!({"name": "use1a", "nodes": 2,
            "allocatable": {"cpu": "32", "memory": "1536Mi", "pods": "220"},
            "allocated": {"pods": "12"},
            "available": {"cpu": "24500m", "memory": "1610612736", "gpus": "0"}});
        let t = clusters_table(&[c]);
        assert!(t.contains(" 24500m/32 "), "{t}");
        assert!(t.contains(" 1536Mi/1536Mi "), "not 1Gi/1Gi: {t}");
        let q = json!({"namespace": "ads", "name": "team",
            "hard": {"cpu": "4", "memory": "2Gi"},
            "used": {"cpu": "2500m", "memory": "1610612736"},
            "requested": {"cpu": "1", "memory": "512Mi"}});
        let t = quotas_table(&[q]);
        let mem = t.lines().find(|l| l.contains("memory")).unwrap();
        assert!(mem.ends_with("2Gi     1536Mi        512Mi"), "{t}");
        assert!(t.contains(" 2500m "), "{t}");
    }

    #[test]
    fn get_table_shows_the_per_cluster_breakdown() {
        let w = json!({
            "kind": "PinterestService", "namespace": "ads", "name": "web", "team": "ads",
            "desired": {"replicas": 4},
            "status": {
                "availableReplicas": 4,
                "conditions": [{"type": "Ready", "status": "True"}],
                "placement": {"placements": [{"cluster": "a", "replicas": 3}, {"cluster": "b", "replicas": 1}]},
                "clusters": [
                    {"cluster": "a", "state": "Ready", "replicas": 3, "readyReplicas": 3, "availableReplicas": 3},
                    {"cluster": "b", "state": "Ready", "replicas": 1, "readyReplicas": 1, "availableReplicas": 1}
                ]
            }
        });
        let t = workloads_table(&[w]);
        assert!(t.contains("ads/web"), "{t}");
        assert!(t.contains("a:3 b:1"), "{t}");
        assert!(t.contains("4/4 avail"), "{t}");
        assert!(
            t.contains("└ a          Ready        replicas 3 ready 3 available 3"),
            "{t}"
        );
    }

    #[test]
    fn error_replies_show_field_paths_and_quota_numbers() {
        let r = Reply {
            status: 422,
            text: String::new(),
            body: json!({"error": "invalid", "reason": "Invalid", "details": [
                {"field": "spec.replicas", "message": "must be at least 0"},
                {"field": "resource", "message": "bad", "line": 3, "column": 4}]}),
        };
        let t = r.error_text();
        assert!(t.contains("\n  spec.replicas: must be at least 0"), "{t}");
        assert!(t.contains("(line 3, column 4)"), "{t}");
        let r = Reply {
            status: 409,
            text: String::new(),
            body: json!({"error": "quota", "reason": "QuotaExceeded", "details": [
                {"quota": "ads/q", "resource": "cpu", "requested": "2", "used": "3", "hard": "4"}]}),
        };
        assert!(
            r.error_text()
                .contains("ads/q: cpu: requested 2 + used 3 > hard 4")
        );
    }
}
