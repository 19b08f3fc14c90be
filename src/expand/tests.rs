//! Expansion tests over the YAML fixtures in `examples/` (one per kind).

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Container, PodSpec};
use kube::api::DynamicObject;
use serde_json::Value;

use super::*;
use crate::api::AnyWorkload;
use crate::api::parse::{Document, parse_one};
use crate::api::validation::{is_dns_label, is_label_value};

const SERVICE: &str = include_str!("../../examples/service.yaml");
const JOBSET: &str = include_str!("../../examples/jobset.yaml");
const CRONJOB: &str = include_str!("../../examples/cronjob.yaml");
const DAEMON: &str = include_str!("../../examples/daemon.yaml");
const PYTORCH: &str = include_str!("../../examples/training-pytorch.yaml");
const TENSORFLOW: &str = include_str!("../../examples/training-tensorflow.yaml");
const STATEFULSET: &str = include_str!("../../examples/statefulset.yaml");
const PROFILE: &str = include_str!("../../examples/runtime-profile.yaml");

const ALL: [&str; 7] = [
    SERVICE,
    JOBSET,
    CRONJOB,
    DAEMON,
    PYTORCH,
    TENSORFLOW,
    STATEFULSET,
];

fn workload(text: &str) -> AnyWorkload {
    match parse_one(text).unwrap() {
        Document::Workload(w) => w,
        other => panic!("not a workload: {}", other.kind()),
    }
}

fn profile(text: &str) -> RuntimeProfile {
    match parse_one(text).unwrap() {
        Document::RuntimeProfile(p) => p,
        other => panic!("not a profile: {}", other.kind()),
    }
}

fn run(w: &AnyWorkload) -> Vec<DynamicObject> {
    expand(&ExpandInput {
        cluster: Some("use1a"),
        ..ExpandInput::new(w.as_ref())
    })
    .unwrap()
}

fn kind_of(o: &DynamicObject) -> &str {
    o.types.as_ref().map(|t| t.kind.as_str()).unwrap_or("")
}

fn name_of(o: &DynamicObject) -> &str {
    o.metadata.name.as_deref().unwrap_or("")
}

fn kinds(objs: &[DynamicObject]) -> Vec<&str> {
    objs.iter().map(kind_of).collect()
}

/// The pod spec inside a workload object, if it has one.
fn pod_spec(o: &DynamicObject) -> Option<PodSpec> {
    let t = match kind_of(o) {
        "CronJob" => &o.data["spec"]["jobTemplate"]["spec"]["template"],
        "Deployment" | "StatefulSet" | "DaemonSet" | "Job" => &o.data["spec"]["template"],
        _ => return None,
    };
    Some(serde_json::from_value(t["spec"].clone()).unwrap())
}

fn pod_labels(o: &DynamicObject) -> Option<Value> {
    match kind_of(o) {
        "CronJob" => {
            Some(o.data["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"].clone())
        }
        "Deployment" | "StatefulSet" | "DaemonSet" | "Job" => {
            Some(o.data["spec"]["template"]["metadata"]["labels"].clone())
        }
        _ => None,
    }
}

fn env<'a>(c: &'a Container, name: &str) -> Option<&'a str> {
    c.env
        .iter()
        .flatten()
        .find(|e| e.name == name)
        .and_then(|e| e.value.as_deref())
}

fn container<'a>(p: &'a PodSpec, name: &str) -> &'a Container {
    p.containers
        .iter()
        .chain(p.init_containers.iter().flatten())
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

fn meta_mut(
    w: &mut AnyWorkload,
) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
    match w {
        AnyWorkload::Service(x) => &mut x.metadata,
        AnyWorkload::JobSet(x) => &mut x.metadata,
        AnyWorkload::CronJob(x) => &mut x.metadata,
        AnyWorkload::Daemon(x) => &mut x.metadata,
        AnyWorkload::TrainingJob(x) => &mut x.metadata,
        AnyWorkload::StatefulSet(x) => &mut x.metadata,
    }
}

#[test]
fn every_object_is_labelled_annotated_and_validly_named() {
    // Each fixture as written (no uid, as in a file) and as read from the API server.
    let fixtures = ALL.iter().flat_map(|text| {
        let mut with_uid = workload(text);
        meta_mut(&mut with_uid).uid = Some("5f0c1d2e-0000-4000-8000-000000000001".into());
        [workload(text), with_uid]
    });
    for w in fixtures {
        let objs = run(&w);
        assert!(!objs.is_empty());
        let mut seen = BTreeSet::new();
        for o in &objs {
            let what = format!("{} {}/{}", w.kind(), kind_of(o), name_of(o));
            assert!(is_dns_label(name_of(o)), "{what}: name");
            assert!(
                seen.insert((kind_of(o).to_string(), name_of(o).to_string())),
                "{what}: duplicate object"
            );
            let labels = o.metadata.labels.as_ref().unwrap();
            for k in [
                LABEL_MANAGED_BY,
                LABEL_WORKLOAD,
                LABEL_KIND,
                LABEL_TEAM,
                LABEL_OWNER,
            ] {
                let v = labels
                    .get(k)
                    .unwrap_or_else(|| panic!("{what}: no label {k}"));
                assert!(is_label_value(v) && !v.is_empty(), "{what}: {k}={v:?}");
            }
            assert_eq!(labels[LABEL_MANAGED_BY], "pinfed");
            assert_eq!(labels[LABEL_KIND], w.kind().as_str());
            let ann = o.metadata.annotations.as_ref().unwrap();
            assert_eq!(
                ann[ANNOTATION_CONTACT],
                w.as_ref().owner().contact,
                "{what}"
            );
            assert_eq!(ann[ANNOTATION_SPEC_HASH].len(), 16, "{what}");
            assert_eq!(
                o.metadata.namespace.as_deref(),
                w.as_ref().namespace(),
                "{what}"
            );
            // Owner references exactly when the input has a uid.
            match w.as_ref().metadata().uid.as_deref() {
                Some(uid) => {
                    let r = &o.metadata.owner_references.as_ref().unwrap()[0];
                    assert_eq!((r.uid.as_str(), r.kind.as_str()), (uid, w.kind().as_str()));
                    assert_eq!(r.controller, Some(true));
                }
                None => assert!(o.metadata.owner_references.is_none(), "{what}"),
            }
            if let Some(p) = pod_spec(o) {
                let pl = pod_labels(o).unwrap();
                assert_eq!(pl[LABEL_MANAGED_BY], "pinfed", "{what}: pod labels");
                let mut names = BTreeSet::new();
                for c in p
                    .containers
                    .iter()
                    .chain(p.init_containers.iter().flatten())
                {
                    assert!(
                        names.insert(c.name.clone()),
                        "{what}: duplicate container {}",
                        c.name
                    );
                    if c.name.starts_with("pinterest-") {
                        // Runtime containers: the profile's env only.
                        assert_eq!(
                            env(c, "PINTEREST_RUNTIME_DIR"),
                            Some("/etc/pinterest/runtime")
                        );
                        assert!(env(c, "PINTEREST_WORKLOAD").is_none(), "{what}");
                    } else {
                        assert_eq!(
                            env(c, "PINTEREST_WORKLOAD"),
                            w.as_ref().metadata().name.as_deref()
                        );
                        assert_eq!(env(c, "PINTEREST_CLUSTER"), Some("use1a"));
                    }
                }
                let vols: Vec<_> = p.volumes.iter().flatten().map(|v| &v.name).collect();
                let unique: BTreeSet<_> = vols.iter().collect();
                assert_eq!(vols.len(), unique.len(), "{what}: duplicate volume");
            }
        }
    }
}

#[test]
fn output_is_deterministic() {
    for text in ALL {
        let w = workload(text);
        let a = to_yaml_stream(&run(&w));
        let b = to_yaml_stream(&run(&workload(text)));
        assert_eq!(a, b);
    }
}

#[test]
fn every_pod_carries_the_profile_sidecars_natively_for_run_to_completion_kinds() {
    let builtin = builtin_profile();
    for text in ALL {
        let w = workload(text);
        let kind = w.kind();
        for o in run(&w) {
            let Some(p) = pod_spec(&o) else { continue };
            let init = p.init_containers.clone().unwrap_or_default();
            assert_eq!(init[0].name, "pinterest-config-init", "{kind}");
            assert_eq!(init[0].restart_policy, None);
            for s in &builtin.spec.sidecars {
                let applies = s.applies_to.is_empty() || s.applies_to.contains(&kind);
                let as_native = init.iter().find(|c| c.name == s.container.name);
                let as_container = p.containers.iter().find(|c| c.name == s.container.name);
                match (applies, kind.runs_to_completion()) {
                    (false, _) => assert!(as_native.is_none() && as_container.is_none()),
                    (true, true) => {
                        assert_eq!(as_native.unwrap().restart_policy.as_deref(), Some("Always"));
                        assert!(as_container.is_none(), "{kind}");
                    }
                    (true, false) => {
                        assert!(as_native.is_none(), "{kind}");
                        assert_eq!(as_container.unwrap().restart_policy, None);
                    }
                }
            }
            // The user's own container stays first (kubectl's default container).
            assert!(!p.containers[0].name.starts_with("pinterest-"), "{kind}");
        }
    }
}

#[test]
fn service_expands_to_its_native_objects() {
    let w = workload(SERVICE);
    let objs = run(&w);
    assert_eq!(
        kinds(&objs),
        [
            "ConfigMap",
            "Deployment",
            "Service",
            "Ingress",
            "PodDisruptionBudget"
        ]
    );
    let labels = objs[1].metadata.labels.as_ref().unwrap();
    assert_eq!(labels[LABEL_TEAM], "Ads-Ranking", "team sanitized");
    assert_eq!(labels[LABEL_OWNER], "Ads-Ranking");
    assert_eq!(
        objs[0].data["data"]["ranker.yaml"],
        "model: ctr-v7\nthreads: 8\n"
    );
    assert_eq!(objs[1].data["spec"]["replicas"], 6);
    let p = pod_spec(&objs[1]).unwrap();
    let app = container(&p, "ranker");
    assert!(
        app.volume_mounts
            .iter()
            .flatten()
            .any(|m| m.mount_path == "/etc/pinterest/config")
    );
    // Traffic registration learns the primary port.
    let traffic = container(&p, "pinterest-traffic");
    assert!(
        traffic
            .args
            .as_ref()
            .unwrap()
            .contains(&"--port=80".to_string())
    );
    assert!(
        traffic
            .args
            .as_ref()
            .unwrap()
            .contains(&"--zk-path=/discovery/ads/ads-ranker".to_string())
    );
    // The user's requests stay; the default memory limit (512Mi) would be below the
    // 1Gi request, so it is not added.
    let r = app.resources.as_ref().unwrap();
    assert_eq!(r.requests.as_ref().unwrap()["cpu"].0, "500m");
    assert!(r.limits.as_ref().is_none_or(|l| !l.contains_key("memory")));
    assert_eq!(objs[2].data["spec"]["ports"][0]["targetPort"], "http");
    assert_eq!(
        objs[3].data["spec"]["rules"][0]["host"],
        "ads-ranker.pinterest.example"
    );
    assert_eq!(
        objs[3].data["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["port"]["name"],
        "http"
    );
    assert_eq!(objs[4].data["spec"]["maxUnavailable"], "25%");
}

#[test]
fn a_disruption_budget_is_written_only_where_it_protects_something() {
    use crate::api::overrides::{ObjectPatch, Override, PatchOp};
    use crate::api::service::Disruption;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let with = |replicas: i32, budget: Option<IntOrString>, patched: bool| {
        let mut w = workload(SERVICE);
        let AnyWorkload::Service(s) = &mut w else {
            panic!("the service example is a PinterestService")
        };
        s.spec.replicas = replicas;
        s.spec.disruption = budget.map(|b| Disruption {
            max_unavailable: Some(b),
        });
        if patched {
            s.spec.overrides = vec![Override {
                name: "budget".into(),
                clusters: vec!["use1a".into()],
                patches: vec![ObjectPatch {
                    kind: "PodDisruptionBudget".into(),
                    op: PatchOp::Replace,
                    path: "/spec/maxUnavailable".into(),
                    value: Some(serde_json::json!(0)),
                    ..Default::default()
                }],
                ..Default::default()
            }];
        }
        run(&w)
            .into_iter()
            .filter(|o| kind_of(o) == "PodDisruptionBudget")
            .map(|o| o.data["spec"]["maxUnavailable"].clone())
            .collect::<Vec<_>>()
    };
    let pct = |s: &str| Some(IntOrString::String(s.into()));
    // One pod with the default budget (maxUnavailable 1): it would let the pod go.
    assert_eq!(with(1, None, false), Vec::<Value>::new());
    assert_eq!(with(2, None, false), vec![serde_json::json!(1)]);
    assert_eq!(
        with(1, Some(IntOrString::Int(0)), false),
        vec![serde_json::json!(0)]
    );
    assert_eq!(with(4, pct("100%"), false), Vec::<Value>::new());
    assert_eq!(with(4, pct("50%"), false), vec![serde_json::json!("50%")]);
    // An override patching the budget keeps it, and its patch applies.
    assert_eq!(with(1, None, true), vec![serde_json::json!(0)]);
}

#[test]
fn service_defaults_ingress_host_from_the_cluster() {
    let mut w = workload(SERVICE);
    if let AnyWorkload::Service(s) = &mut w {
        s.spec.ingress.as_mut().unwrap().host = None;
    }
    let objs = run(&w);
    let ing = objs.iter().find(|o| kind_of(o) == "Ingress").unwrap();
    assert_eq!(
        ing.data["spec"]["rules"][0]["host"],
        "ads-ranker.ads.use1a.pinterest.internal"
    );
}

#[test]
fn default_requests_and_limits_fill_what_the_user_left_out() {
    let w = workload(CRONJOB);
    let objs = run(&w);
    let p = pod_spec(&objs[0]).unwrap();
    let r = container(&p, "report").resources.clone().unwrap();
    assert_eq!(r.requests.unwrap()["cpu"].0, "100m");
    assert_eq!(r.limits.unwrap()["memory"].0, "512Mi");
}

fn shard_jobs(objs: &[DynamicObject]) -> Vec<(String, String, String)> {
    objs.iter()
        .filter(|o| kind_of(o) == "Job")
        .map(|o| {
            let p = pod_spec(o).unwrap();
            let c = container(&p, "embed");
            (
                name_of(o).to_string(),
                env(c, "SHARD_INDEX").unwrap().to_string(),
                env(c, "SHARD_COUNT").unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn jobset_has_one_job_per_shard_with_literal_shard_env() {
    let w = workload(JOBSET);
    let objs = run(&w);
    let jobs = shard_jobs(&objs);
    assert_eq!(jobs.len(), 8);
    for (i, (name, index, count)) in jobs.iter().enumerate() {
        assert_eq!(name, &format!("pin-embeddings-{i}"));
        assert_eq!(index, &i.to_string());
        assert_eq!(count, "8");
    }
    // Per shard: ConfigMap, PVC, Job, in shard order.
    assert_eq!(
        &kinds(&objs)[..3],
        ["ConfigMap", "PersistentVolumeClaim", "Job"]
    );
    let cm = &objs[3];
    assert_eq!(name_of(cm), "pin-embeddings-1-shard-config");
    assert_eq!(
        cm.data["data"]["input"],
        "s3://pins/embeddings/input/part-1-of-8"
    );
    assert_eq!(name_of(&objs[4]), "scratch-pin-embeddings-1");
    let job = &objs[5];
    assert_eq!(job.data["spec"]["completions"], 1);
    assert_eq!(job.data["spec"]["backoffLimit"], 3);
    let p = pod_spec(job).unwrap();
    assert_eq!(p.restart_policy.as_deref(), Some("Never"));
    let c = container(&p, "embed");
    assert_eq!(
        c.env_from.as_ref().unwrap()[0]
            .config_map_ref
            .as_ref()
            .unwrap()
            .name,
        "pin-embeddings-1-shard-config",
        "reference to the template points at the shard's ConfigMap"
    );
    let scratch = p
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "scratch")
        .unwrap();
    assert_eq!(
        scratch.persistent_volume_claim.as_ref().unwrap().claim_name,
        "scratch-pin-embeddings-1"
    );
    // No traffic registration for batch work.
    assert!(
        p.init_containers
            .iter()
            .flatten()
            .all(|c| c.name != "pinterest-traffic")
    );
    assert_eq!(job.metadata.labels.as_ref().unwrap()[LABEL_SHARD], "1");
}

#[test]
fn jobset_respects_assigned_completed_and_admitted_shards() {
    let mut w = workload(JOBSET);
    let AnyWorkload::JobSet(j) = &mut w else {
        unreachable!()
    };
    j.spec.assigned_shards = Some("2-3,6".into());
    let idx = |objs: &[DynamicObject]| -> Vec<String> {
        shard_jobs(objs).into_iter().map(|(_, i, _)| i).collect()
    };
    assert_eq!(idx(&run(&w)), ["2", "3", "6"]);
    let AnyWorkload::JobSet(j) = &mut w else {
        unreachable!()
    };
    j.status = Some(crate::api::jobset::PinterestJobSetStatus {
        completed_shards: Some("0-3".into()),
        ..Default::default()
    });
    let objs = run(&w);
    assert_eq!(idx(&objs), ["6"]);
    assert!(
        objs.iter().all(|o| !name_of(o).contains("-3")),
        "no ConfigMap or PVC for a completed shard either"
    );
    // The agent's parallelism admission narrows further.
    let AnyWorkload::JobSet(j) = &w else {
        unreachable!()
    };
    let none = RangeSet::new();
    let input = ExpandInput {
        admitted_shards: Some(&none),
        ..ExpandInput::new(j)
    };
    assert!(expand(&input).unwrap().is_empty());
    // Bad range lists are Invalid, naming the field.
    let AnyWorkload::JobSet(j) = &mut w else {
        unreachable!()
    };
    j.spec.assigned_shards = Some("7-8".into());
    let e = expand(&ExpandInput::new(&*j)).unwrap_err();
    assert_eq!(e.invalid().first_field(), "spec.assignedShards");
    assert!(e.to_string().contains("out of range"), "{e}");
}

#[test]
fn pytorch_replicas_get_rank_and_master_address() {
    let w = workload(PYTORCH);
    let objs = run(&w);
    assert_eq!(kinds(&objs), ["Service", "Job", "Job", "Job", "Job"]);
    assert_eq!(objs[0].data["spec"]["clusterIP"], "None");
    let mut ranks = vec![];
    for o in &objs[1..] {
        let p = pod_spec(o).unwrap();
        let c = container(&p, "trainer");
        assert_eq!(env(c, "WORLD_SIZE"), Some("4"));
        assert_eq!(env(c, "MASTER_PORT"), Some("23456"));
        assert_eq!(
            env(c, "MASTER_ADDR"),
            Some("homefeed-ranker-train-master-0.homefeed-ranker-train")
        );
        assert_eq!(p.hostname.as_deref(), Some(name_of(o)));
        assert_eq!(p.subdomain.as_deref(), Some("homefeed-ranker-train"));
        ranks.push((name_of(o).to_string(), env(c, "RANK").unwrap().to_string()));
        assert_eq!(o.data["spec"]["backoffLimit"], 1);
    }
    assert_eq!(
        ranks,
        [
            (
                "homefeed-ranker-train-master-0".to_string(),
                "0".to_string()
            ),
            (
                "homefeed-ranker-train-worker-0".to_string(),
                "1".to_string()
            ),
            (
                "homefeed-ranker-train-worker-1".to_string(),
                "2".to_string()
            ),
            (
                "homefeed-ranker-train-worker-2".to_string(),
                "3".to_string()
            ),
        ]
    );
}

/// `TF_CONFIG` as the kubelet gives it to the container: `$(PINFED_TF_CLUSTER)` replaced
/// by the ConfigMap key the variable refers to.
fn tf_config(objs: &[DynamicObject], c: &Container) -> Value {
    let reference = c
        .env
        .iter()
        .flatten()
        .find(|e| e.name == crate::expand::training::TF_CLUSTER_ENV)
        .and_then(|e| e.value_from.as_ref())
        .and_then(|v| v.config_map_key_ref.as_ref())
        .expect("PINFED_TF_CLUSTER from a ConfigMap");
    let cm = objs
        .iter()
        .find(|o| kind_of(o) == "ConfigMap" && o.metadata.name.as_deref() == Some(&reference.name))
        .expect("the cluster ConfigMap is generated");
    let cluster = cm.data["data"][&reference.key].as_str().unwrap();
    let raw = env(c, "TF_CONFIG").unwrap();
    let position = |name: &str| c.env.iter().flatten().position(|e| e.name == name).unwrap();
    assert!(
        position(crate::expand::training::TF_CLUSTER_ENV) < position("TF_CONFIG"),
        "a dependent variable must come after the one it refers to"
    );
    serde_json::from_str(&raw.replace("$(PINFED_TF_CLUSTER)", cluster)).unwrap()
}

#[test]
fn tensorflow_replicas_get_their_own_tf_config() {
    let w = workload(TENSORFLOW);
    let objs = run(&w);
    assert_eq!(
        kinds(&objs),
        ["Service", "ConfigMap", "Job", "Job", "Job", "Job", "Job"]
    );
    let mut tasks = vec![];
    for o in &objs[2..] {
        let p = pod_spec(o).unwrap();
        let tf = tf_config(&objs, &p.containers[0]);
        assert_eq!(
            tf["cluster"]["ps"],
            serde_json::json!([
                "related-pins-tf-ps-0.related-pins-tf:2222",
                "related-pins-tf-ps-1.related-pins-tf:2222"
            ])
        );
        assert_eq!(tf["cluster"]["chief"].as_array().unwrap().len(), 1);
        assert_eq!(tf["cluster"]["worker"].as_array().unwrap().len(), 2);
        tasks.push(format!(
            "{}/{}",
            tf["task"]["type"].as_str().unwrap(),
            tf["task"]["index"]
        ));
        assert!(env(&p.containers[0], "RANK").is_none());
    }
    assert_eq!(tasks, ["chief/0", "ps/0", "ps/1", "worker/0", "worker/1"]);
}

/// A TensorFlow job with `workers` workers (and the example's chief and parameter servers).
fn tensorflow_with_workers(workers: i32) -> AnyWorkload {
    let mut v: Value = crate::api::yaml::from_str(TENSORFLOW).unwrap();
    v["spec"]["replicaSpecs"]["Worker"]["replicas"] = workers.into();
    workload(&crate::api::yaml::to_string(&v).unwrap())
}

#[test]
fn no_tensorflow_object_grows_with_the_gang_and_the_cluster_spec_is_written_once() {
    let size = |o: &DynamicObject| serde_json::to_vec(o).unwrap().len();
    let small = run(&tensorflow_with_workers(10));
    let large = run(&tensorflow_with_workers(2_000));
    let largest_job = |objs: &[DynamicObject]| {
        objs.iter()
            .filter(|o| kind_of(o) == "Job")
            .map(size)
            .max()
            .unwrap()
    };
    // A pod of a 2,000-worker gang is as big as one of a 10-worker gang (names aside).
    assert!(
        largest_job(&large) <= largest_job(&small) + 16,
        "{} vs {}",
        largest_job(&large),
        largest_job(&small)
    );
    let maps: Vec<&DynamicObject> = large.iter().filter(|o| kind_of(o) == "ConfigMap").collect();
    assert_eq!(maps.len(), 1, "one cluster spec");
    // The whole output grows linearly: the cluster spec once plus one Job per replica.
    let total: usize = large.iter().map(size).sum();
    assert!(total < 2_003 * 8 * 1024, "{total} bytes for 2,003 replicas");
    // And the last worker's TF_CONFIG still names all 2,000 workers and itself.
    let last = pod_spec(large.last().unwrap()).unwrap();
    let tf = tf_config(&large, &last.containers[0]);
    assert_eq!(tf["cluster"]["worker"].as_array().unwrap().len(), 2_000);
    assert_eq!(
        tf["task"],
        serde_json::json!({"type": "worker", "index": 1999})
    );
}

#[test]
fn a_tensorflow_cluster_too_large_for_tf_config_is_refused_with_its_size() {
    let w = tensorflow_with_workers(5_000);
    let err = expand(&ExpandInput {
        cluster: Some("use1a"),
        ..ExpandInput::new(w.as_ref())
    })
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("spec.replicaSpecs") && err.contains("5003 replicas") && err.contains("byte"),
        "{err}"
    );
}

#[test]
fn cronjob_daemon_and_statefulset() {
    let objs = run(&workload(CRONJOB));
    assert_eq!(kinds(&objs), ["CronJob"]);
    assert_eq!(objs[0].data["spec"]["schedule"], "30 2 * * *");
    assert_eq!(objs[0].data["spec"]["timeZone"], "America/Los_Angeles");
    assert_eq!(objs[0].data["spec"]["concurrencyPolicy"], "Forbid");
    // The contact has a '#', so it only appears as an annotation.
    assert_eq!(
        objs[0].metadata.annotations.as_ref().unwrap()[ANNOTATION_CONTACT],
        "#analytics-oncall"
    );

    let objs = run(&workload(DAEMON));
    assert_eq!(kinds(&objs), ["DaemonSet"]);
    assert_eq!(
        objs[0].data["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"],
        "10%"
    );

    let objs = run(&workload(STATEFULSET));
    assert_eq!(
        kinds(&objs),
        ["Service", "StatefulSet", "PodDisruptionBudget"]
    );
    assert_eq!(objs[1].data["spec"]["serviceName"], "kv-store");
    assert_eq!(objs[1].data["spec"]["replicas"], 3);
    assert_eq!(
        objs[1].data["spec"]["volumeClaimTemplates"][0]["metadata"]["name"],
        "data"
    );
    assert_eq!(objs[0].data["spec"]["clusterIP"], "None");
}

#[test]
fn long_names_are_shortened_everywhere() {
    // A valid name (a DNS subdomain) far longer than a DNS label.
    let part = format!("{}x", "very-long-workload-name-".repeat(2));
    let long = format!("{part}.{part}.{part}.{part}.example");
    for text in ALL {
        let mut w = workload(text);
        meta_mut(&mut w).name = Some(long.clone());
        for o in run(&w) {
            let n = name_of(&o);
            assert!(is_dns_label(n), "{n}");
            let max = match kind_of(&o) {
                "StatefulSet" | "CronJob" => 52,
                _ => 63,
            };
            assert!(n.len() <= max, "{} {n}", kind_of(&o));
            let l = &o.metadata.labels.as_ref().unwrap()[LABEL_WORKLOAD];
            assert!(is_label_value(l), "{l}");
            if let Some(p) = pod_spec(&o)
                && let Some(h) = &p.hostname
            {
                assert!(is_dns_label(h), "{h}");
            }
        }
    }
}

#[test]
fn a_published_profile_replaces_the_builtin_one() {
    let w = workload(SERVICE);
    let p = profile(PROFILE);
    let objs = expand(&ExpandInput {
        profile: Some(&p),
        ..ExpandInput::new(w.as_ref())
    })
    .unwrap();
    let d = objs.iter().find(|o| kind_of(o) == "Deployment").unwrap();
    assert_eq!(
        d.metadata.annotations.as_ref().unwrap()[ANNOTATION_RUNTIME_VERSION],
        "2024.06"
    );
    let pod = pod_spec(d).unwrap();
    let app = container(&pod, "ranker");
    assert_eq!(env(app, "PINTEREST_ENV"), Some("production"));
    assert_eq!(env(app, "PINTEREST_RUNTIME_VERSION"), Some("2024.06"));
    assert!(env(app, "PINTEREST_CLUSTER").is_none(), "no cluster given");
    assert!(
        container(&pod, "pinterest-security")
            .image
            .as_deref()
            .unwrap()
            .ends_with("2.2.0")
    );
}

#[test]
fn conflicts_with_the_profile_name_the_field() {
    let mut w = workload(CRONJOB);
    let AnyWorkload::CronJob(c) = &mut w else {
        unreachable!()
    };
    c.spec.template.spec.as_mut().unwrap().containers[0].name = "pinterest-logs".into();
    let e = expand(&ExpandInput::new(&*c)).unwrap_err();
    assert_eq!(e.reason(), "RuntimeConflict");
    assert_eq!(
        e.invalid().first_field(),
        "spec.template.spec.containers[0].name"
    );
}

#[test]
fn invalid_resources_name_the_field() {
    let mut w = workload(PYTORCH);
    let AnyWorkload::TrainingJob(t) = &mut w else {
        unreachable!()
    };
    let worker = t.spec.replica_specs["Worker"].clone();
    t.spec.replica_specs.insert("Chief".into(), worker);
    t.spec.replica_specs.get_mut("Worker").unwrap().replicas = -1;
    let e = expand(&ExpandInput::new(&*t)).unwrap_err();
    let s = e.to_string();
    assert!(
        s.contains("spec.replicaSpecs.Chief: unknown role for pytorch"),
        "{s}"
    );
    assert!(
        s.contains("spec.replicaSpecs.Worker.replicas: must be at least 0"),
        "{s}"
    );
    assert_eq!(e.reason(), "InvalidSpec");
}

#[test]
fn identity_env_comes_first_and_the_user_wins_on_a_clash() {
    let mut w = workload(DAEMON);
    let AnyWorkload::Daemon(d) = &mut w else {
        unreachable!()
    };
    d.spec.template.spec.as_mut().unwrap().containers[0].env =
        Some(vec![k8s_openapi::api::core::v1::EnvVar {
            name: "PINTEREST_TEAM".into(),
            value: Some("mine".into()),
            value_from: None,
        }]);
    let objs = run(&w);
    let p = pod_spec(&objs[0]).unwrap();
    let c = container(&p, "exporter");
    assert_eq!(c.env.as_ref().unwrap()[0].name, "PINTEREST_WORKLOAD");
    assert_eq!(env(c, "PINTEREST_TEAM"), Some("mine"));
    assert_eq!(
        c.env
            .iter()
            .flatten()
            .filter(|e| e.name == "PINTEREST_TEAM")
            .count(),
        1
    );
}

/// What the agent watches for a kind is what its home says it generates
/// (`PinterestKind::GENERATES`): an object of a kind missing there would drift or vanish
/// unseen (3e8263f: a training job's ConfigMap was not watched).
#[test]
fn every_expanded_object_is_of_a_kind_its_home_declares() {
    let mut seen = BTreeSet::new();
    for text in ALL {
        let w = workload(text);
        let declared: Vec<&str> = w.as_ref().generates().iter().map(|n| n.as_str()).collect();
        for o in run(&w) {
            assert!(
                declared.contains(&kind_of(&o)),
                "{} generates a {} ({}) that its PinterestKind::GENERATES ({declared:?}) leaves out",
                w.kind(),
                kind_of(&o),
                name_of(&o)
            );
            seen.insert(kind_of(&o).to_string());
        }
    }
    // The fixtures reach most native kinds, so the check above is not vacuous.
    for k in [
        "ConfigMap",
        "Service",
        "Deployment",
        "Job",
        "CronJob",
        "DaemonSet",
    ] {
        assert!(seen.contains(k), "no fixture generates a {k}: {seen:?}");
    }
}
