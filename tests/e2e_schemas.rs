//! The workload CRDs' schemas on a real API server (the topology's hub): pod templates and
//! claim templates carry the Kubernetes types' own schemas, so the API server refuses a
//! wrongly typed field with its path, `kubectl explain` describes the template, a JobSet's
//! template stays immutable, and every example is stored as written (nothing pruned).
//! No hub runs: these are the API server's answers alone — but for a member joined with
//! open workload schemas, where the agent checks what its API server no longer does.

mod support;

use std::path::Path;

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use pinfed::api::common::TEMPLATE_IMMUTABLE_MESSAGE;
use pinfed::api::parse::{Document, parse_one};
use pinfed::api::workload::{AnyWorkload, COMPUTE_API_VERSION, WorkloadKind};
use serde_json::{Value, json};
use support::{Federation, TestNamespace, kubectl_in};

const MANAGER: &str = "pinfed-e2e-schemas";

/// Installs this build's CRDs on the hub (as `pinfed join` does) and returns its client.
async fn hub_with_crds(fed: &Federation) -> kube::Client {
    let hub = fed.hub();
    pinfed::hub::join::install_crds(&hub)
        .await
        .expect("the API server accepts every CRD");
    hub
}

fn api(hub: &kube::Client, ns: &str, kind: WorkloadKind) -> Api<DynamicObject> {
    let plural = format!("{}s", kind.as_str().to_lowercase());
    let ar = ApiResource {
        group: "compute.pinterest.com".into(),
        version: "v1alpha1".into(),
        api_version: COMPUTE_API_VERSION.into(),
        kind: kind.as_str().into(),
        plural,
    };
    Api::namespaced_with(hub.clone(), ns, &ar)
}

/// Server-side apply with strict field validation: a field the schema does not know (and
/// would prune) is an error, not a warning.
async fn apply(api: &Api<DynamicObject>, object: &Value) -> Result<DynamicObject, kube::Error> {
    let name = object["metadata"]["name"].as_str().expect("a name");
    api.patch(
        name,
        &PatchParams::apply(MANAGER).force().validation_strict(),
        &Patch::Apply(object),
    )
    .await
}

/// A plain create (POST), as `kubectl create` and client-side `kubectl apply` send.
async fn create(api: &Api<DynamicObject>, object: &Value) -> Result<DynamicObject, kube::Error> {
    let object: DynamicObject = serde_json::from_value(object.clone()).expect("an object");
    api.create(&PostParams::default(), &object).await
}

fn refusal(result: Result<DynamicObject, kube::Error>) -> (u16, String) {
    match result {
        Err(kube::Error::Api(s)) => (s.code, s.message),
        Err(e) => panic!("expected the API server's refusal, got {e}"),
        Ok(o) => panic!("the API server accepted {:?}", o.metadata.name),
    }
}

fn service(name: &str, container: Value) -> Value {
    json!({
        "apiVersion": COMPUTE_API_VERSION, "kind": "PinterestService",
        "metadata": {"name": name},
        "spec": {
            "owner": {"team": "ads", "contact": "ads@pinterest.com"},
            "template": {"spec": {"containers": [container]}},
        }
    })
}

#[tokio::test]
async fn a_wrongly_typed_pod_template_field_is_refused_with_its_path_and_nothing_is_stored() {
    let fed = Federation::connect().await;
    let hub = hub_with_crds(&fed).await;
    let ns = TestNamespace::create(&hub, "schema-types").await;
    let services = api(&hub, &ns.name, WorkloadKind::Service);

    let port_as_word = service(
        "web",
        json!({"name": "app", "image": "registry.example/app:1",
               "ports": [{"containerPort": "eighty"}]}),
    );
    let (code, message) = refusal(create(&services, &port_as_word).await);
    assert_eq!(code, 422, "{message}");
    assert!(
        message.contains("spec.template.spec.containers[0].ports[0].containerPort")
            && message.contains("must be of type integer"),
        "the refusal names the field and its type: {message}"
    );

    let mut containers_as_map = service("web", json!({}));
    containers_as_map["spec"]["template"]["spec"]["containers"] = json!({});
    let (code, message) = refusal(create(&services, &containers_as_map).await);
    assert_eq!(code, 422, "{message}");
    assert!(
        message.contains("spec.template.spec.containers") && message.contains("array"),
        "{message}"
    );

    let nameless = service("web", json!({"image": "registry.example/app:1"}));
    let (_, message) = refusal(create(&services, &nameless).await);
    assert!(
        message.contains("spec.template.spec.containers[0].name") && message.contains("Required"),
        "{message}"
    );

    // A field no Kubernetes pod has is refused under strict validation (it would be pruned).
    let typo = service(
        "web",
        json!({"name": "app", "image": "registry.example/app:1", "imagePullPolice": "Always"}),
    );
    let (_, message) = refusal(apply(&services, &typo).await);
    assert!(
        message.contains("spec.template.spec.containers[0].imagePullPolice"),
        "{message}"
    );

    // The same in the other kinds' templates and claim templates.
    let mut jobset = example("jobset.yaml");
    jobset["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] =
        json!({"cores": 2});
    jobset["spec"]["volumeClaimTemplates"][0]["spec"]["accessModes"] = json!("ReadWriteOnce");
    let (_, message) = refusal(create(&api(&hub, &ns.name, WorkloadKind::JobSet), &jobset).await);
    assert!(
        message.contains("spec.template.spec.containers[0].resources.requests.cpu")
            && message.contains("spec.volumeClaimTemplates[0].spec.accessModes"),
        "every wrong field is named: {message}"
    );
    let mut training = example("training-pytorch.yaml");
    training["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"] =
        json!([{"name": "EPOCHS", "value": 10}]);
    let (_, message) =
        refusal(create(&api(&hub, &ns.name, WorkloadKind::TrainingJob), &training).await);
    assert!(
        message.contains("spec.replicaSpecs.Worker.template.spec.containers[0].env[0].value"),
        "{message}"
    );

    for kind in [
        WorkloadKind::Service,
        WorkloadKind::JobSet,
        WorkloadKind::TrainingJob,
    ] {
        let stored = api(&hub, &ns.name, kind).list(&Default::default()).await;
        assert!(stored.unwrap().items.is_empty(), "{kind}: nothing stored");
    }
    ns.delete().await;
}

#[tokio::test]
async fn kubectl_explain_describes_the_pod_template_down_to_the_containers_fields() {
    let fed = Federation::connect().await;
    hub_with_crds(&fed).await;
    let hub = fed.topology.hub.name.clone();
    let explain = |path: &str| kubectl_in(&fed, &hub, &["explain", path], "");
    let out = explain("pinterestservices.spec.template.spec.containers");
    for (field, type_) in [
        ("image", "<string>"),
        ("resources", "<Object>"),
        ("ports", "<[]Object>"),
        ("name", "<string> -required-"),
    ] {
        assert!(
            out.lines().any(|l| {
                let mut words = l.split_whitespace();
                words.next() == Some(field) && words.collect::<Vec<_>>().join(" ") == type_
            }),
            "no field {field} {type_} in:\n{out}"
        );
    }
    // The Kubernetes descriptions come along.
    assert!(out.contains("Container image name"), "{out}");
    // Deeper fields of every kind's templates are there too (kubectl fails on a path the
    // schema does not have).
    for path in [
        "pinterestjobsets.spec.volumeClaimTemplates.spec.resources.requests",
        "pinterestcronjobs.spec.template.spec.securityContext.runAsUser",
        "pinterestdaemons.spec.template.spec.tolerations.effect",
        "pinteresttrainingjobs.spec.replicaSpecs.template.spec.containers.livenessProbe.httpGet.port",
        "pintereststatefulsets.spec.template.spec.volumes.persistentVolumeClaim.claimName",
        "pinterestservices.spec.template.metadata.labels",
    ] {
        let out = explain(path);
        assert!(out.contains("DESCRIPTION:"), "{path}:\n{out}");
    }
}

#[tokio::test]
async fn a_job_sets_template_is_immutable_on_the_server_while_its_other_fields_are_not() {
    let fed = Federation::connect().await;
    let hub = hub_with_crds(&fed).await;
    let ns = TestNamespace::create(&hub, "schema-immutable").await;
    let jobsets = api(&hub, &ns.name, WorkloadKind::JobSet);
    let jobset = example("jobset.yaml");
    apply(&jobsets, &jobset).await.expect("a valid JobSet");

    let mut edited = jobset.clone();
    edited["spec"]["template"]["spec"]["containers"][0]["image"] =
        json!("registry.pinterest.com/ml/embed:3.3.0");
    let (code, message) = refusal(apply(&jobsets, &edited).await);
    assert_eq!(code, 422, "{message}");
    assert!(
        message.contains("spec.template") && message.contains(TEMPLATE_IMMUTABLE_MESSAGE),
        "{message}"
    );
    let mut labelled = jobset.clone();
    labelled["spec"]["template"]["metadata"] = json!({"labels": {"tier": "batch"}});
    let (_, message) = refusal(apply(&jobsets, &labelled).await);
    assert!(message.contains(TEMPLATE_IMMUTABLE_MESSAGE), "{message}");

    // Re-applying the same template, and editing a mutable field, pass.
    apply(&jobsets, &jobset)
        .await
        .expect("an unchanged template");
    let mut more_parallel = jobset.clone();
    more_parallel["spec"]["parallelism"] = json!(6);
    let stored = apply(&jobsets, &more_parallel)
        .await
        .expect("parallelism may change");
    assert_eq!(stored.data["spec"]["parallelism"], 6);
    assert_eq!(
        stored.data["spec"]["template"], jobset["spec"]["template"],
        "the template is as first written"
    );
    ns.delete().await;
}

#[tokio::test]
async fn every_example_workload_is_stored_exactly_as_written() {
    let fed = Federation::connect().await;
    let hub = hub_with_crds(&fed).await;
    let ns = TestNamespace::create(&hub, "schema-examples").await;
    for file in [
        "service.yaml",
        "jobset.yaml",
        "cronjob.yaml",
        "daemon.yaml",
        "training-pytorch.yaml",
        "training-tensorflow.yaml",
        "statefulset.yaml",
    ] {
        let written = example(file);
        let Document::Workload(typed) = parse_one(&example_text(file)).unwrap() else {
            panic!("{file} is not a workload")
        };
        // Strict: a field the schema would prune is refused, so nothing the example says
        // is lost on the way in.
        let stored = apply(&api(&hub, &ns.name, typed.kind()), &written)
            .await
            .unwrap_or_else(|e| panic!("{file} refused: {e}"));
        // What the engine reads back is what it would have read from the file.
        let back = json!({
            "apiVersion": COMPUTE_API_VERSION, "kind": typed.kind().as_str(),
            "metadata": {"name": stored.metadata.name, "namespace": ns.name},
            "spec": stored.data["spec"],
        });
        let back = pinfed::api::parse::parse_one(&serde_json::to_string(&back).unwrap())
            .unwrap_or_else(|e| panic!("{file} as stored does not parse: {e}"));
        let Document::Workload(back) = back else {
            unreachable!()
        };
        assert_eq!(spec_json(&back), spec_json(&typed), "{file}");
        // And the stored template holds every key the file's template has.
        for (path, want) in templates(&written) {
            let got = stored.data.pointer(&path).cloned().unwrap_or(Value::Null);
            assert!(
                covers(&got, want),
                "{file}: {path} lost something:\n{want:#}\nstored:\n{got:#}"
            );
        }
    }
    ns.delete().await;
}

fn spec_json(w: &AnyWorkload) -> Value {
    let v = match w {
        AnyWorkload::Service(w) => serde_json::to_value(&w.spec),
        AnyWorkload::JobSet(w) => serde_json::to_value(&w.spec),
        AnyWorkload::CronJob(w) => serde_json::to_value(&w.spec),
        AnyWorkload::Daemon(w) => serde_json::to_value(&w.spec),
        AnyWorkload::TrainingJob(w) => serde_json::to_value(&w.spec),
        AnyWorkload::StatefulSet(w) => serde_json::to_value(&w.spec),
    };
    v.unwrap()
}

/// JSON pointers of the pod and claim templates in a workload, with their values.
fn templates(w: &Value) -> Vec<(String, &Value)> {
    let mut out = vec![];
    let spec = &w["spec"];
    for key in ["template", "volumeClaimTemplates"] {
        if !spec[key].is_null() {
            out.push((format!("/spec/{key}"), &spec[key]));
        }
    }
    if let Some(roles) = spec["replicaSpecs"].as_object() {
        for (role, r) in roles {
            out.push((
                format!("/spec/replicaSpecs/{role}/template"),
                &r["template"],
            ));
        }
    }
    out
}

/// Whether `got` has every key and value of `want` (the server may add defaults).
fn covers(got: &Value, want: &Value) -> bool {
    match (got, want) {
        (Value::Object(g), Value::Object(w)) => w
            .iter()
            .all(|(k, wv)| g.get(k).is_some_and(|gv| covers(gv, wv))),
        (Value::Array(g), Value::Array(w)) => {
            g.len() == w.len() && g.iter().zip(w).all(|(g, w)| covers(g, w))
        }
        _ => got == want,
    }
}

fn example_text(file: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// An example as JSON, without its namespace (the test's namespace is used).
fn example(file: &str) -> Value {
    let mut v: Value = pinfed::api::yaml::from_str(&example_text(file)).unwrap();
    v["metadata"].as_object_mut().unwrap().remove("namespace");
    v
}

/// A member joined with `--member-schemas open` takes a slice its kind cannot (the hub
/// validates what it writes; a slice made in the member directly is not checked there).
/// An agent that starts with such a slice present lists it with the rest: it refuses that
/// one as Invalid (reason Undecodable, the field named) with a Warning Event, and runs the
/// kind's other slices — a typed watch fails its whole list and runs none of them. Joined
/// again without the flag, the member's schemas are full again.
#[tokio::test]
async fn in_a_member_with_open_schemas_the_agent_refuses_an_undecodable_slice_and_runs_the_rest() {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use support::{eventually, join_member, spawn_daemon};
    let wait = std::time::Duration::from_secs(60);
    let fed = Federation::connect().await;
    let member = fed.member_names()[0].clone();
    let client = fed.client(&member);
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let spec_schema = |crd: CustomResourceDefinition| {
        crd.spec.versions[0]
            .schema
            .clone()
            .and_then(|s| s.open_api_v3_schema)
            .and_then(|s| s.properties)
            .and_then(|p| p.get("spec").cloned())
            .expect("a spec schema")
    };
    join_member(&fed, &member, &["--member-schemas", "open"]);
    let open = spec_schema(
        crds.get("pinterestservices.compute.pinterest.com")
            .await
            .unwrap(),
    );
    assert_eq!(open.x_kubernetes_preserve_unknown_fields, Some(true));
    assert!(open.properties.is_none(), "the spec left open: {open:?}");

    let ns = TestNamespace::create(&client, "agent-open-schemas").await;
    let services = api(&client, &ns.name, WorkloadKind::Service);
    let service = |name: &str, owner: Value| {
        serde_json::from_value::<DynamicObject>(json!({
            "apiVersion": COMPUTE_API_VERSION, "kind": "PinterestService",
            "metadata": {"name": name},
            "spec": {"owner": owner, "replicas": 1,
                     "template": {"spec": {"containers": [{"name": "app", "image": "registry.example/app:1",
                         "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}}}
        }))
        .unwrap()
    };
    let owner = json!({"team": "ads", "contact": "ads@pinterest.com"});
    // (Not a wrong `replicas`: the scale subresource has the API server check that one.)
    services
        .create(&PostParams::default(), &service("bad", json!("ads")))
        .await
        .expect("an open schema takes an owner that is a string");
    services
        .create(&PostParams::default(), &service("good", owner.clone()))
        .await
        .unwrap();
    let agent = spawn_daemon(&fed, "agent-open", &fed.agent_args(&member, &[]).unwrap());

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    eventually(
        wait,
        &format!(
            "the good service's Deployment beside the bad one\n{}",
            agent.log_tail()
        ),
        || {
            let deployments = deployments.clone();
            async move { deployments.get_opt("good").await.unwrap().is_some() }
        },
    )
    .await;
    support::marked_undecodable(
        &client,
        &services,
        &ns.name,
        "bad",
        "spec.owner",
        wait,
        &|| agent.log_tail(),
    )
    .await;
    assert!(
        deployments.get_opt("bad").await.unwrap().is_none(),
        "nothing made for the refused slice"
    );

    // Mended, it runs.
    services
        .patch(
            "bad",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"owner": owner}})),
        )
        .await
        .unwrap();
    eventually(
        wait,
        &format!("the mended service's Deployment\n{}", agent.log_tail()),
        || {
            let deployments = deployments.clone();
            async move { deployments.get_opt("bad").await.unwrap().is_some() }
        },
    )
    .await;
    drop(agent);
    ns.delete().await;
    join_member(&fed, &member, &[]);
    let full = spec_schema(
        crds.get("pinterestservices.compute.pinterest.com")
            .await
            .unwrap(),
    );
    assert!(
        full.properties.is_some_and(|p| p.contains_key("template")),
        "joined again without the flag, the spec schema is full"
    );
}

/// A RuntimeProfile this version cannot decode — as another version of pinfed would store
/// one, here written through a second served version of the member's RuntimeProfile CRD
/// whose schema is open — is left out of the agent's profiles, and the agent starts and
/// runs its slices. Its typed watch failed the whole list, so the agent waited for its
/// profiles for ever and ran nothing in that member.
#[tokio::test]
async fn an_agent_starts_and_runs_slices_beside_a_runtime_profile_it_cannot_decode() {
    use k8s_openapi::api::apps::v1::Deployment;
    use support::{eventually, join_member, spawn_daemon};
    let wait = std::time::Duration::from_secs(60);
    let fed = Federation::connect().await;
    // Not member 0: the open-schemas test joins that one its own way meanwhile.
    let member = fed.member_names()[1].clone();
    join_member(&fed, &member, &[]);
    let client = fed.client(&member);

    // A served version with an open schema while the profile is written.
    let crd_name = "runtimeprofiles.compute.pinterest.com";
    let open = support::serve_open_version(&client, crd_name, true).await;
    let open_profiles: Api<DynamicObject> = Api::all_with(client.clone(), &open);
    let name = support::unique_name("skewed-profile");
    let skewed: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "compute.pinterest.com/v1alpha0", "kind": "RuntimeProfile",
        "metadata": {"name": name},
        "spec": {"version": {"major": 9}}
    }))
    .unwrap();
    eventually(
        wait,
        "the open version served and taking a version that is not a string",
        || {
            let (open_profiles, skewed) = (open_profiles.clone(), skewed.clone());
            async move {
                open_profiles
                    .create(&PostParams::default(), &skewed)
                    .await
                    .is_ok()
            }
        },
    )
    .await;
    support::serve_open_version(&client, crd_name, false).await;

    let ns = TestNamespace::create(&client, "agent-skewed-profile").await;
    let services = api(&client, &ns.name, WorkloadKind::Service);
    services
        .create(
            &PostParams::default(),
            &serde_json::from_value(service(
                "web",
                json!({"name": "app", "image": "registry.example/app:1",
                       "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}),
            ))
            .unwrap(),
        )
        .await
        .unwrap();
    let agent = spawn_daemon(&fed, "agent-skewed", &fed.agent_args(&member, &[]).unwrap());
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    eventually(
        wait,
        &format!("the service's Deployment\n{}", agent.log_tail()),
        || {
            let deployments = deployments.clone();
            async move { deployments.get_opt("web").await.unwrap().is_some() }
        },
    )
    .await;
    assert!(
        std::fs::read_to_string(&agent.log)
            .unwrap_or_default()
            .contains(&format!("{name}@")),
        "the agent says which profile it left out\n{}",
        agent.log_tail()
    );
    drop(agent);
    ns.delete().await;
    let profiles: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::erase::<pinfed::api::runtime_profile::RuntimeProfile>(&()),
    );
    profiles.delete(&name, &Default::default()).await.unwrap();
}
