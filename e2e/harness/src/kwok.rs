//! kwok, the nodes of every member: one process per member runs the kubelets of all its
//! fake nodes (the stock "fast" stages, and ours for bad images), and the Node objects it
//! manages.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, PostParams};
use pinfed::topology::GPU_RESOURCE;

use crate::state::Component;
use crate::wait_until;

/// The kwok of member `name`, its server on 127.0.0.1:`kwok`.
pub fn component(
    bin: &Path,
    logs: &Path,
    name: &str,
    kc: &str,
    kwok_config: &Path,
    kwok: u16,
) -> Component {
    Component {
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
        env: Vec::new(),
    }
}

pub fn write_config(dir: &Path, bin: &Path) -> anyhow::Result<PathBuf> {
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
        docs.push(match s {
            // Pods with a `:broken` image are left to our own stages (bad_image_stages).
            "pod/fast/pod-ready.yaml" => {
                with_expression(&text, &tag_expression(ALL_TAGS, "NotIn", TAG_BROKEN))?
            }
            // Job pods succeed at once unless the pod asks for a run time with the
            // `pod-complete.stage.kwok.x-k8s.io/delay` annotation (e.g. "20s"): failover
            // tests need shards that are still running when a member goes away. Job pods
            // with a `:fails` image fail instead (bad_image_stages).
            "pod/general/pod-complete.yaml" => with_expression(
                &immediate_unless_delayed(&text)?,
                &tag_expression(CONTAINER_TAGS, "NotIn", TAG_FAILS),
            )?,
            _ => text,
        });
    }
    for stage in bad_image_stages() {
        docs.push(pinfed::api::yaml::to_string(&stage)?);
    }
    let path = dir.join("kwok.yaml");
    std::fs::write(&path, docs.join("\n---\n"))?;
    Ok(path)
}

/// The image tag that makes a pod run but never become Ready (a bad change for rollout
/// tests: docs/e2e.md, "Bad images for rollout tests").
pub const TAG_BROKEN: &str = "broken";
/// The image tag that makes a Job's pod fail (exit code 1) instead of succeeding.
pub const TAG_FAILS: &str = "fails";

/// The tag of an image (`registry:5000/app:v1@sha256:…` has the tag `v1`; an image
/// without one has none), a Go regexp for jq's `capture`.
const TAG_PATTERN: &str = "^[^@]*:(?<tag>[^:/@]+)(@.*)?$";
/// jq (kwok's selector keys): the tags of the images of a pod's containers.
const CONTAINER_TAGS: &str = ".spec.containers[]?";
/// jq: the tags of the images of a pod's containers and init containers.
const ALL_TAGS: &str = "(.spec.containers[]?, .spec.initContainers[]?)";

/// A selector expression on the image tags of `containers` (CONTAINER_TAGS or ALL_TAGS):
/// `In` matches a pod where any of them is `tag`, `NotIn` one where none is. (kwok runs
/// the key with gojq and compares every value it yields.)
fn tag_expression(containers: &str, operator: &str, tag: &str) -> serde_json::Value {
    serde_json::json!({
        "key": format!(r#"{containers} | .image // "" | capture("{TAG_PATTERN}") | .tag"#),
        "operator": operator,
        "values": [tag],
    })
}

/// A Go template condition (sprig's regexMatch) true when `image` (a template
/// expression) has the tag `tag`: the same test as TAG_PATTERN.
fn has_tag(image: &str, tag: &str) -> String {
    format!(r#"regexMatch "^[^@]*:{tag}(@.*)?$" {image}"#)
}

/// `stage` (the text of a stock stage) with `expression` added to its selector's
/// matchExpressions, as a JSON flow mapping (valid YAML) before the first one.
fn with_expression(stage: &str, expression: &serde_json::Value) -> anyhow::Result<String> {
    let lines: Vec<&str> = stage.lines().collect();
    let at: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].trim() == "matchExpressions:")
        .collect();
    let first = match at[..] {
        [i] => lines
            .get(i + 1)
            .filter(|l| l.trim_start().starts_with("- ")),
        _ => None,
    };
    let Some(first) = first else {
        anyhow::bail!("a kwok stage changed shape (expected one list of matchExpressions)");
    };
    let indent = &first[..first.len() - first.trim_start().len()];
    let mut out = String::with_capacity(stage.len() + 200);
    for (i, line) in lines.iter().enumerate() {
        if i == at[0] + 1 {
            out.push_str(&format!("{indent}- {expression}\n"));
        }
        out.push_str(line);
        out.push('\n');
    }
    Ok(out)
}

/// How long a `:broken` container runs before it crashes and is restarted.
const BROKEN_RESTART_MS: u64 = 10_000;

/// Our stages for bad images (docs/e2e.md, "Bad images for rollout tests"); the stock
/// pod-ready and pod-complete stages leave these pods alone (write_config):
///
/// - `pinfed-pod-broken-run`: a Pending pod with a `:broken` image in any container or
///   init container runs (phase Running) with those containers not ready, so the pod is
///   never Ready;
/// - `pinfed-pod-broken-restart`: every 10 s its `:broken` containers crash (exit code 1)
///   and restart: their restartCount grows, as in a crash loop;
/// - `pinfed-pod-fails`: a running pod of a Job with a `:fails` image in a container
///   fails (phase Failed; those containers exit with 1, the others with 0), when the
///   stock pod-complete stage would have made it succeed (and after the same delay).
fn bad_image_stages() -> Vec<serde_json::Value> {
    use serde_json::json;
    let not_deleted = json!({"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"});
    let phase = |p: &str| json!({"key": ".status.phase", "operator": "In", "values": [p]});
    let stage = |name: &str, spec: serde_json::Value| {
        let mut spec = spec;
        spec["resourceRef"] = json!({"apiGroup": "v1", "kind": "Pod"});
        json!({"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": name}, "spec": spec})
    };
    let broken = tag_expression(ALL_TAGS, "In", TAG_BROKEN);
    let fails = tag_expression(CONTAINER_TAGS, "In", TAG_FAILS);
    vec![
        stage(
            "pinfed-pod-broken-run",
            json!({
                "selector": {"matchExpressions": [not_deleted, phase("Pending"), broken]},
                "next": {"statusTemplate": broken_run_template()},
            }),
        ),
        stage(
            "pinfed-pod-broken-restart",
            json!({
                "selector": {"matchExpressions": [not_deleted, phase("Running"), broken]},
                "delay": {"durationMilliseconds": BROKEN_RESTART_MS},
                "next": {"statusTemplate": broken_restart_template()},
            }),
        ),
        stage(
            "pinfed-pod-fails",
            json!({
                "selector": {"matchExpressions": [
                    not_deleted,
                    phase("Running"),
                    {"key": r#".status.conditions.[] | select( .type == "Ready" ) | .status"#, "operator": "In", "values": ["True"]},
                    {"key": ".metadata.ownerReferences.[].kind", "operator": "In", "values": ["Job"]},
                    fails,
                ]},
                // As our pod-complete: at once unless the pod asks for a run time.
                "delay": {
                    "durationMilliseconds": 0,
                    "durationFrom": {"expressionFrom": r#".metadata.annotations["pod-complete.stage.kwok.x-k8s.io/delay"]"#},
                    "jitterDurationFrom": {"expressionFrom": r#".metadata.annotations["pod-complete.stage.kwok.x-k8s.io/jitter-delay"]"#},
                },
                "next": {"delete": false, "statusTemplate": fails_template()},
            }),
        ),
    ]
}

/// Pending to Running as the stock pod-ready stage, except that containers with a
/// `:broken` image run not ready, and so the pod is not Ready.
fn broken_run_template() -> String {
    BROKEN_RUN
        .replace("%BROKEN%", &has_tag(".image", TAG_BROKEN))
        .replace("%TAG%", TAG_BROKEN)
}

const BROKEN_RUN: &str = r#"{{ $now := Now }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Initialized
- lastTransitionTime: {{ $now | Quote }}
  message: "containers with unready status (an image tagged %TAG%)"
  reason: ContainersNotReady
  status: "False"
  type: Ready
- lastTransitionTime: {{ $now | Quote }}
  message: "containers with unready status (an image tagged %TAG%)"
  reason: ContainersNotReady
  status: "False"
  type: ContainersReady
{{ range .spec.readinessGates }}
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: {{ .conditionType | Quote }}
{{ end }}
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: {{ not ( %BROKEN% ) }}
  restartCount: 0
  started: true
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
initContainerStatuses:
{{ range .spec.initContainers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  restartCount: 0
  {{ if %BROKEN% }}
  ready: false
  started: true
  state:
    running:
      startedAt: {{ $now | Quote }}
  {{ else if eq .restartPolicy "Always" }}
  ready: true
  started: true
  state:
    running:
      startedAt: {{ $now | Quote }}
  {{ else }}
  ready: true
  state:
    terminated:
      exitCode: 0
      finishedAt: {{ $now | Quote }}
      reason: Completed
      startedAt: {{ $now | Quote }}
  {{ end }}
{{ end }}
{{ $hostIPs := NodeIPsWith .spec.nodeName }}
{{ with $hostIPs }}
hostIP: {{ index . 0 | Quote }}
hostIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
{{ $podIPs := PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
{{ with $podIPs }}
podIP: {{ index . 0 | Quote }}
podIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
phase: Running
startTime: {{ $now | Quote }}
"#;

/// A crash and restart of every `:broken` container. The others are written back as they
/// are: a status patch replaces these lists whole.
fn broken_restart_template() -> String {
    let broken = has_tag(".image", TAG_BROKEN);
    let list = |field: &str| {
        BROKEN_RESTART_LIST
            .replace("%LIST%", field)
            .replace("%BROKEN%", &broken)
    };
    format!(
        "{{{{ $now := Now }}}}\n{}{}",
        list("containerStatuses"),
        list("initContainerStatuses")
    )
}

const BROKEN_RESTART_LIST: &str = r#"{{ with .status.%LIST% }}
%LIST%:
{{ range . }}
{{ if %BROKEN% }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  restartCount: {{ add1 ( or .restartCount 0 ) }}
  started: true
  lastState:
    terminated:
      exitCode: 1
      finishedAt: {{ $now | Quote }}
      reason: Error
      startedAt: {{ with .state.running }}{{ .startedAt | Quote }}{{ else }}{{ $now | Quote }}{{ end }}
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ else }}
- {{ toJson . }}
{{ end }}
{{ end }}
{{ end }}
"#;

/// Running to Failed: containers with a `:fails` image exit with 1, the others with 0.
fn fails_template() -> String {
    FAILS.replace("%FAILS%", &has_tag(".image", TAG_FAILS))
}

const FAILS: &str = r#"{{ $now := Now }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  reason: PodFailed
  status: "False"
  type: Ready
- lastTransitionTime: {{ $now | Quote }}
  reason: PodFailed
  status: "False"
  type: ContainersReady
containerStatuses:
{{ range .spec.containers }}
{{ $fails := %FAILS% }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  restartCount: 0
  started: false
  state:
    terminated:
      exitCode: {{ if $fails }}1{{ else }}0{{ end }}
      finishedAt: {{ $now | Quote }}
      reason: {{ if $fails }}Error{{ else }}Completed{{ end }}
      startedAt: {{ $now | Quote }}
{{ end }}
phase: Failed
"#;

/// The general pod-complete stage with no default delay and no default jitter.
///
/// The jitter default is dropped, not zeroed: kwok takes a jitter at or below the delay
/// as the whole delay, so a zero jitter would make every pod complete at once whatever
/// its delay annotation asks. Without a default, a pod without the jitter annotation
/// waits exactly its delay.
fn immediate_unless_delayed(stage: &str) -> anyhow::Result<String> {
    let mut out = String::with_capacity(stage.len());
    let (mut delay, mut jitter) = (0, 0);
    for line in stage.lines() {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        if trimmed.starts_with("durationMilliseconds:") {
            out.push_str(&format!("{indent}durationMilliseconds: 0\n"));
            delay += 1;
        } else if trimmed.starts_with("jitterDurationMilliseconds:") {
            jitter += 1;
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    anyhow::ensure!(
        (delay, jitter) == (1, 1),
        "kwok's general pod-complete stage changed shape (expected a delay and a jitter)"
    );
    Ok(out)
}

/// The default StorageClass whose claims kwok's volume stages provision and bind.
pub async fn create_storage_class(client: &kube::Client) -> anyhow::Result<()> {
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

pub fn node_object(n: &pinfed::topology::NodeSpec) -> serde_json::Value {
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

pub async fn wait_nodes_ready(
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    const STAGE: &str = "spec:\n  delay:\n    durationMilliseconds: 1000\n    durationFrom:\n      expressionFrom: '.metadata.annotations[\"d\"]'\n    jitterDurationMilliseconds: 5000\n    jitterDurationFrom:\n      expressionFrom: '.metadata.annotations[\"j\"]'\n";

    #[test]
    fn the_delay_defaults_to_zero_and_the_jitter_has_no_default() {
        let out = immediate_unless_delayed(STAGE).unwrap();
        assert!(out.contains("    durationMilliseconds: 0\n"), "{out}");
        assert!(!out.contains("jitterDurationMilliseconds"), "{out}");
        // What a pod asks for still reaches kwok.
        assert!(
            out.contains("annotations[\"d\"]") && out.contains("annotations[\"j\"]"),
            "{out}"
        );
    }

    #[test]
    fn a_stage_of_another_shape_is_refused() {
        let without_jitter = STAGE.replace("    jitterDurationMilliseconds: 5000\n", "");
        let err = immediate_unless_delayed(&without_jitter).unwrap_err();
        assert!(err.to_string().contains("changed shape"), "{err}");
    }

    /// The selector and delay of kwok's stock pod-ready and pod-complete stages, as v0.8.0
    /// writes them.
    const POD_READY: &str = "apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata:\n  name: pod-ready\nspec:\n  resourceRef:\n    apiGroup: v1\n    kind: Pod\n  selector:\n    matchExpressions:\n    - key: '.metadata.deletionTimestamp'\n      operator: 'DoesNotExist'\n    - key: '.status.phase'\n      operator: 'In'\n      values:\n      - 'Pending'\n  next:\n    statusTemplate: |\n      phase: Running\n";
    const POD_COMPLETE: &str = "apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata:\n  name: pod-complete\nspec:\n  resourceRef:\n    apiGroup: v1\n    kind: Pod\n  selector:\n    matchExpressions:\n    - key: '.metadata.deletionTimestamp'\n      operator: 'DoesNotExist'\n    - key: '.metadata.ownerReferences.[].kind'\n      operator: 'In'\n      values:\n      - 'Job'\n  delay:\n    durationMilliseconds: 1000\n    jitterDurationMilliseconds: 5000\n  next:\n    statusTemplate: |\n      phase: Succeeded\n";

    /// write_config's output with the stock stages replaced by `POD_READY`, `POD_COMPLETE`
    /// and empty stages, one document per stage.
    fn config() -> Vec<Value> {
        // One directory per call: the tests run in parallel.
        static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let root =
            std::env::temp_dir().join(format!("pinfed-kwok-config-{}-{call}", std::process::id()));
        for (path, text) in [
            ("node/fast/node-initialize.yaml", "kind: Stage\n"),
            (
                "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
                "kind: Stage\n",
            ),
            ("pod/fast/pod-ready.yaml", POD_READY),
            ("pod/general/pod-complete.yaml", POD_COMPLETE),
            ("pod/fast/pod-delete.yaml", "kind: Stage\n"),
            ("volume/fast/pvc-provision.yaml", "kind: Stage\n"),
            ("volume/fast/pv-bind.yaml", "kind: Stage\n"),
            ("volume/fast/pv-delete.yaml", "kind: Stage\n"),
            ("volume/fast/pvc-delete.yaml", "kind: Stage\n"),
        ] {
            let path = root.join("kwok-stages").join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        let written = write_config(&root, &root).unwrap();
        let text = std::fs::read_to_string(written).unwrap();
        std::fs::remove_dir_all(&root).unwrap();
        pinfed::api::yaml::documents(&text).unwrap()
    }

    fn stage<'a>(config: &'a [Value], name: &str) -> &'a Value {
        config
            .iter()
            .find(|d| d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no stage {name}"))
    }

    fn expressions(stage: &Value) -> &Vec<Value> {
        stage["spec"]["selector"]["matchExpressions"]
            .as_array()
            .unwrap()
    }

    const ALL_TAGS_KEY: &str = r#"(.spec.containers[]?, .spec.initContainers[]?) | .image // "" | capture("^[^@]*:(?<tag>[^:/@]+)(@.*)?$") | .tag"#;
    const CONTAINER_TAGS_KEY: &str =
        r#".spec.containers[]? | .image // "" | capture("^[^@]*:(?<tag>[^:/@]+)(@.*)?$") | .tag"#;

    #[test]
    fn stock_pod_ready_leaves_broken_images_to_our_stage() {
        let config = config();
        assert_eq!(config.len(), 9 + 3, "{config:#?}");
        let ready = expressions(stage(&config, "pod-ready"));
        assert_eq!(
            ready[0],
            json!({"key": ALL_TAGS_KEY, "operator": "NotIn", "values": ["broken"]})
        );
        // The stock expressions are all still there.
        assert_eq!(ready.len(), 3, "{ready:#?}");
        assert_eq!(ready[2]["values"], json!(["Pending"]));

        let run = stage(&config, "pinfed-pod-broken-run");
        assert_eq!(
            expressions(run),
            &vec![
                json!({"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"}),
                json!({"key": ".status.phase", "operator": "In", "values": ["Pending"]}),
                json!({"key": ALL_TAGS_KEY, "operator": "In", "values": ["broken"]}),
            ]
        );
        assert_eq!(
            run["spec"]["resourceRef"],
            json!({"apiGroup": "v1", "kind": "Pod"})
        );
        let template = run["spec"]["next"]["statusTemplate"].as_str().unwrap();
        // The template reaches kwok whole, and decides per container.
        assert_eq!(template, broken_run_template());
        assert!(
            template.contains(r#"ready: {{ not ( regexMatch "^[^@]*:broken(@.*)?$" .image ) }}"#),
            "{template}"
        );
        assert!(template.contains("type: Ready") && template.contains("phase: Running"));
        assert!(!template.contains('%'), "a placeholder left: {template}");
    }

    #[test]
    fn broken_containers_restart_every_ten_seconds() {
        let config = config();
        let restart = stage(&config, "pinfed-pod-broken-restart");
        let exprs = expressions(restart);
        assert_eq!(exprs[1]["values"], json!(["Running"]));
        assert_eq!(
            exprs[2],
            json!({"key": ALL_TAGS_KEY, "operator": "In", "values": ["broken"]})
        );
        assert_eq!(
            restart["spec"]["delay"],
            json!({"durationMilliseconds": 10000})
        );
        let template = restart["spec"]["next"]["statusTemplate"].as_str().unwrap();
        assert_eq!(template, broken_restart_template());
        assert!(template.starts_with("{{ $now := Now }}\n"), "{template}");
        for list in ["containerStatuses", "initContainerStatuses"] {
            assert!(template.contains(&format!("{{{{ with .status.{list} }}}}\n{list}:\n")));
        }
        assert!(template.contains("restartCount: {{ add1 ( or .restartCount 0 ) }}"));
        assert!(!template.contains('%'), "a placeholder left: {template}");
    }

    #[test]
    fn job_pods_with_a_failing_image_fail_instead_of_completing() {
        let config = config();
        let complete = stage(&config, "pod-complete");
        assert_eq!(
            expressions(complete)[0],
            json!({"key": CONTAINER_TAGS_KEY, "operator": "NotIn", "values": ["fails"]})
        );
        assert_eq!(
            complete["spec"]["delay"],
            json!({"durationMilliseconds": 0})
        );

        let fails = stage(&config, "pinfed-pod-fails");
        let exprs = expressions(fails);
        // The stock pod-complete's conditions, then the tag.
        assert_eq!(exprs.len(), 5, "{exprs:#?}");
        assert_eq!(exprs[2]["values"], json!(["True"]));
        assert_eq!(exprs[3]["values"], json!(["Job"]));
        assert_eq!(
            exprs[4],
            json!({"key": CONTAINER_TAGS_KEY, "operator": "In", "values": ["fails"]})
        );
        // The same delay as pod-complete: none, unless the pod asks.
        let delay = &fails["spec"]["delay"];
        assert_eq!(delay["durationMilliseconds"], 0);
        assert!(delay.get("jitterDurationMilliseconds").is_none());
        assert!(
            delay["durationFrom"]["expressionFrom"]
                .as_str()
                .unwrap()
                .contains("pod-complete.stage.kwok.x-k8s.io/delay")
        );
        let template = fails["spec"]["next"]["statusTemplate"].as_str().unwrap();
        assert_eq!(template, fails_template());
        assert!(template.contains(r#"{{ $fails := regexMatch "^[^@]*:fails(@.*)?$" .image }}"#));
        assert!(template.contains("exitCode: {{ if $fails }}1{{ else }}0{{ end }}"));
        assert!(template.contains("phase: Failed"));
    }

    #[test]
    fn an_expression_goes_first_in_the_list_at_its_indent() {
        let stage = "spec:\n  selector:\n    matchExpressions:\n      - key: a\n        operator: Exists\n  next: {}\n";
        let out = with_expression(stage, &json!({"key": "b", "operator": "Exists"})).unwrap();
        assert_eq!(
            out,
            "spec:\n  selector:\n    matchExpressions:\n      - {\"key\":\"b\",\"operator\":\"Exists\"}\n      - key: a\n        operator: Exists\n  next: {}\n"
        );
    }

    #[test]
    fn a_selector_of_another_shape_is_refused() {
        let e = json!({"key": "b", "operator": "Exists"});
        for stage in [
            "spec:\n  selector:\n    matchLabels: {a: b}\n",
            "spec:\n  selector:\n    matchExpressions: []\n",
            "a:\n  matchExpressions:\n  - key: x\nb:\n  matchExpressions:\n  - key: y\n",
        ] {
            let err = with_expression(stage, &e).unwrap_err();
            assert!(err.to_string().contains("changed shape"), "{err}");
        }
    }
}
