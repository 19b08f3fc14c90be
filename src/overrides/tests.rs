//! Overrides, look by look: selection and variables, what each typed change does to the
//! expanded objects (and nothing else), patches, what is refused, and the property that a
//! member never runs a rule that does not select it.

use std::collections::BTreeMap;

use kube::api::DynamicObject;
use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::api::overrides::Override;
use crate::api::service::PinterestService;
use crate::api::workload::{Workload, WorkloadKind};
use crate::expand::{ExpandInput, expand};

fn service(overrides: Value) -> PinterestService {
    serde_json::from_value(json!({
        "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestService",
        "metadata": {"name": "web", "namespace": "ads"},
        "spec": {
            "owner": {"team": "ads", "contact": "ads@pinterest.com"},
            "replicas": 3,
            "template": {"spec": {"containers": [
                {"name": "app", "image": "registry.example/ads/web:1",
                 "env": [{"name": "MODE", "value": "base"}],
                 "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}},
            "overrides": overrides
        }
    }))
    .expect("a service")
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn member<'a>(name: &'a str, zone: &'a str, labels: &'a BTreeMap<String, String>) -> Member<'a> {
    Member {
        name,
        region: Some("us-east-1"),
        zone: Some(zone),
        labels,
    }
}

/// The objects `svc` expands to in `m`, after the hub resolved its rules for `m`.
fn in_member(svc: &PinterestService, m: &Member<'_>) -> Vec<DynamicObject> {
    let mut slice = svc.clone();
    slice.set_overrides(resolve(svc.overrides(), m).expect("resolves"));
    expand(&ExpandInput {
        cluster: Some(m.name),
        ..ExpandInput::new(&slice)
    })
    .expect("expands")
}

fn deployment(objects: &[DynamicObject]) -> &DynamicObject {
    objects
        .iter()
        .find(|o| o.types.as_ref().is_some_and(|t| t.kind == "Deployment"))
        .expect("a Deployment")
}

fn app(objects: &[DynamicObject]) -> Value {
    let d = deployment(objects);
    d.data["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "app")
        .cloned()
        .unwrap()
}

#[test]
fn a_registry_per_zone_lands_only_where_selected_with_the_members_variables() {
    let svc = service(json!([{
        "name": "mirror-east-1a",
        "clusterSelector": {"matchLabels": {"topology.kubernetes.io/zone": "us-east-1a"}},
        "image": {"registry": "mirror.{{zone}}.example"},
        "env": [{"name": "MEMBER", "value": "{{cluster}}/{{label:tier}}"}]
    }]));
    let la = labels(&[
        ("topology.kubernetes.io/zone", "us-east-1a"),
        ("tier", "prod"),
    ]);
    let lb = labels(&[
        ("topology.kubernetes.io/zone", "us-east-1b"),
        ("tier", "prod"),
    ]);
    let a = member("use1a", "us-east-1a", &la);
    let b = member("use1b", "us-east-1b", &lb);
    let in_a = app(&in_member(&svc, &a));
    assert_eq!(in_a["image"], "mirror.us-east-1a.example/ads/web:1");
    let env = in_a["env"].as_array().unwrap();
    assert!(
        env.contains(&json!({"name": "MEMBER", "value": "use1a/prod"})),
        "{env:?}"
    );
    assert!(
        env.contains(&json!({"name": "MODE", "value": "base"})),
        "{env:?}"
    );
    let in_b = app(&in_member(&svc, &b));
    assert_eq!(in_b["image"], "registry.example/ads/web:1");
    assert!(!in_b["env"].to_string().contains("MEMBER"));
}

#[test]
fn resources_tolerations_labels_and_args_change_the_application_container_only() {
    let svc = service(json!([{
        "name": "gpu",
        "clusters": ["use1c"],
        "resources": {"requests": {"cpu": "2"}, "limits": {"nvidia.com/gpu": "1"}},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "labels": {"accelerator": "gpu"},
        "args": ["--gpu"]
    }]));
    let l = labels(&[]);
    let c = member("use1c", "us-east-1c", &l);
    let objects = in_member(&svc, &c);
    let d = deployment(&objects);
    let container = app(&objects);
    assert_eq!(container["resources"]["requests"]["cpu"], "2");
    assert_eq!(
        container["resources"]["requests"]["memory"], "64Mi",
        "the others stay"
    );
    assert_eq!(container["resources"]["limits"]["nvidia.com/gpu"], "1");
    assert_eq!(container["args"], json!(["--gpu"]));
    let pod = &d.data["spec"]["template"];
    assert_eq!(pod["metadata"]["labels"]["accelerator"], "gpu");
    assert_eq!(pod["spec"]["tolerations"][0]["key"], "nvidia.com/gpu");
    assert_eq!(d.metadata.labels.as_ref().unwrap()["accelerator"], "gpu");
    // Injected runtime containers keep their own resources and args.
    for c in pod["spec"]["containers"].as_array().unwrap() {
        if c["name"] != "app" {
            assert_ne!(c["args"], json!(["--gpu"]), "{c}");
        }
    }
    // The spec hash covers the object as overridden.
    let plain = expand(&ExpandInput {
        cluster: Some("use1c"),
        ..ExpandInput::new(&service(json!([])))
    })
    .unwrap();
    let hash = |o: &DynamicObject| {
        o.metadata.annotations.as_ref().unwrap()["pinterest.com/spec-hash"].clone()
    };
    assert_ne!(hash(d), hash(deployment(&plain)));
}

#[test]
fn a_patch_changes_its_path_and_a_missing_path_is_refused_with_the_field() {
    let svc = service(json!([{
        "name": "prio", "clusters": ["use1a"],
        "patches": [{"kind": "Deployment", "op": "add",
                     "path": "/spec/template/spec/priorityClassName", "value": "high"},
                    {"kind": "Deployment", "name": "web", "op": "add", "path": "/spec/minReadySeconds", "value": 5}]
    }]));
    let l = labels(&[]);
    let a = member("use1a", "us-east-1a", &l);
    let objects = in_member(&svc, &a);
    let d = deployment(&objects);
    assert_eq!(
        d.data["spec"]["template"]["spec"]["priorityClassName"],
        "high"
    );
    assert_eq!(d.data["spec"]["minReadySeconds"], 5);

    let bad = service(json!([{
        "name": "nowhere", "clusters": ["use1a"],
        "patches": [{"kind": "Deployment", "op": "replace", "path": "/spec/nothing/here", "value": 1}]
    }]));
    let mut slice = bad.clone();
    slice.set_overrides(resolve(bad.overrides(), &a).unwrap());
    let err = expand(&ExpandInput {
        cluster: Some("use1a"),
        ..ExpandInput::new(&slice)
    })
    .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("spec.overrides[0].patches[0].path"), "{text}");
    assert!(text.contains("/spec/nothing does not exist"), "{text}");
}

#[test]
fn a_patch_making_an_invalid_object_is_refused() {
    let svc = service(json!([{
        "name": "broken", "clusters": ["use1a"],
        "patches": [{"kind": "Deployment", "op": "replace", "path": "/spec/replicas", "value": "many"}]
    }]));
    let l = labels(&[]);
    let a = member("use1a", "us-east-1a", &l);
    let mut slice = svc.clone();
    slice.set_overrides(resolve(svc.overrides(), &a).unwrap());
    let err = expand(&ExpandInput {
        cluster: Some("use1a"),
        ..ExpandInput::new(&slice)
    })
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("spec.overrides[0]") && err.contains("not a valid Deployment"),
        "{err}"
    );
}

#[test]
fn an_unresolved_selector_in_a_slice_is_refused_and_the_hub_expansion_applies_nothing() {
    let svc = service(
        json!([{"name": "x", "clusterSelector": {"matchLabels": {"a": "b"}},
                               "image": {"tag": "2"}}]),
    );
    let err = expand(&ExpandInput {
        cluster: Some("use1a"),
        ..ExpandInput::new(&svc)
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("spec.overrides[0].clusterSelector"), "{err}");
    let hub = expand(&ExpandInput::new(&svc)).unwrap();
    assert_eq!(app(&hub)["image"], "registry.example/ads/web:1");
}

#[test]
fn reserved_fields_unknown_variables_and_empty_rules_are_refused_with_their_fields() {
    let svc = service(json!([
        {"name": "a", "labels": {"pinterest.com/team": "other"}},
        {"name": "b", "patches": [{"kind": "Deployment", "op": "replace", "path": "/metadata/namespace", "value": "x"}]},
        {"name": "c", "patches": [{"kind": "Service", "op": "replace", "path": "/spec/selector/app", "value": "x"}]},
        {"name": "d", "image": {"registry": "{{clustr}}.example"}},
        {"name": "e"},
        {"name": "e", "replicas": {"min": 3, "max": 1}},
        {"name": "f", "patches": [{"kind": "Secret", "op": "add", "path": "/data/x", "value": "y"}]},
        {"name": "g", "patches": [{"kind": "Deployment", "op": "add", "path": "/metadata/labels", "value": {}}]},
        {"name": "h", "patches": [{"kind": "Ingress", "op": "replace", "path": "/spec/rules/0/host", "value": "other.example"}]},
        {"name": "i", "patches": [{"kind": "Ingress", "op": "add", "path": "/spec/ingressClassName", "value": "internal"}]}
    ]));
    let err = crate::api::validate::workload((&svc).into()).unwrap_err();
    let fields: Vec<&str> = err.errors.iter().map(|e| e.field.as_str()).collect();
    for want in [
        "spec.overrides[0].labels.pinterest.com/team",
        "spec.overrides[1].patches[0].path",
        "spec.overrides[2].patches[0].path",
        "spec.overrides[3].image.registry",
        "spec.overrides[4]",
        "spec.overrides[5].name",
        "spec.overrides[5].replicas",
        "spec.overrides[6].patches[0].kind",
        "spec.overrides[7].patches[0].path",
        // An Ingress's hosts are owned across the fleet; its class is the member's.
        "spec.overrides[8].patches[0].path",
    ] {
        assert!(fields.contains(&want), "{want} not in {fields:?}");
    }
    assert!(
        !fields.iter().any(|f| f.starts_with("spec.overrides[9]")),
        "{fields:?}"
    );
    // A job set has no replicas to bound.
    assert!(
        check_static(
            &[
                serde_json::from_value::<Override>(json!({"name": "r", "replicas": {"max": 1}}))
                    .unwrap()
            ],
            WorkloadKind::JobSet
        )
        .is_err()
    );
}

#[test]
fn a_rule_selecting_no_member_and_two_rules_on_one_path_are_refused_naming_both() {
    let la = labels(&[("topology.kubernetes.io/zone", "us-east-1a")]);
    let lb = labels(&[("topology.kubernetes.io/zone", "us-east-1b")]);
    let members = [
        member("use1a", "us-east-1a", &la),
        member("use1b", "us-east-1b", &lb),
    ];
    let rules: Vec<Override> = serde_json::from_value(json!([
        {"name": "eu", "clusterSelector": {"matchLabels": {"topology.kubernetes.io/region": "eu-west-1"}},
         "image": {"tag": "2"}}
    ]))
    .unwrap();
    let err = check_against_members(&rules, &members)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("spec.overrides[0]") && err.contains("selects no member"),
        "{err}"
    );

    let rules: Vec<Override> = serde_json::from_value(json!([
        {"name": "all", "image": {"registry": "one.example"}},
        {"name": "a-only", "clusters": ["use1a"], "containers": ["app"], "image": {"registry": "two.example"}},
        {"name": "b-env", "clusters": ["use1b"], "env": [{"name": "X", "value": "1"}]},
        {"name": "b-env2", "clusters": ["use1a"], "env": [{"name": "X", "value": "2"}]}
    ]))
    .unwrap();
    let err = check_against_members(&rules, &members).unwrap_err();
    assert_eq!(err.errors.len(), 1, "{err}");
    let text = err.to_string();
    assert!(
        text.contains("spec.overrides[1]") && text.contains("\"all\""),
        "{text}"
    );
    assert!(
        text.contains("image registry") && text.contains("use1a"),
        "{text}"
    );

    // A label the member lacks is named.
    let rules: Vec<Override> = serde_json::from_value(
        json!([{"name": "l", "env": [{"name": "T", "value": "{{label:tier}}"}]}]),
    )
    .unwrap();
    let err = check_against_members(&rules, &members)
        .unwrap_err()
        .to_string();
    assert!(err.contains("has no value for {{label:tier}}"), "{err}");
}

#[test]
fn replica_bounds_come_from_the_rules_selecting_the_member() {
    let rules: Vec<Override> = serde_json::from_value(json!([
        {"name": "small", "clusters": ["use1a"], "replicas": {"max": 1}},
        {"name": "floor", "clusters": ["use1b"], "replicas": {"min": 2}}
    ]))
    .unwrap();
    let l = labels(&[]);
    let a = member("use1a", "z", &l);
    let c = member("use1c", "z", &l);
    assert_eq!(replica_bounds(&rules, &a).unwrap().max, Some(1));
    assert!(replica_bounds(&rules, &c).is_none());
}

#[test]
fn images_are_retagged_with_or_without_a_registry() {
    use super::apply::retag;
    assert_eq!(
        retag("registry.example/a/b:1", Some("m.example"), None),
        "m.example/a/b:1"
    );
    assert_eq!(
        retag("nginx:1.27", Some("m.example"), None),
        "m.example/nginx:1.27"
    );
    assert_eq!(
        retag("localhost:5000/app", Some("m:1"), Some("2")),
        "m:1/app:2"
    );
    assert_eq!(
        retag("r.example/app@sha256:ab", None, Some("3")),
        "r.example/app:3"
    );
    assert_eq!(retag("app", None, Some("sha256:cd")), "app@sha256:cd");
}

proptest! {
    /// A member's objects are changed only by rules that select it: with every rule
    /// selecting other members, its expansion is exactly the plain one.
    #[test]
    fn overrides_never_change_members_they_do_not_select(
        names in proptest::collection::vec(prop_oneof!["use1a", "use1b", "use1c", "euw1a"], 1..4),
        zone_sel in prop_oneof![Just(None), Just(Some("us-east-1b")), Just(Some("eu-west-1a"))],
        registry in "[a-z]{1,8}\\.example",
        target in prop_oneof!["use1a", "use1b", "use1c"],
    ) {
        let mut rule = json!({"name": "r", "clusters": names,
            "image": {"registry": registry}, "env": [{"name": "Z", "value": "{{zone}}"}],
            "labels": {"overridden": "yes"}});
        if let Some(z) = zone_sel {
            rule["clusterSelector"] = json!({"matchLabels": {"topology.kubernetes.io/zone": z}});
        }
        let svc = service(json!([rule]));
        let zone = format!("us-east-{}", &target[3..]);
        let l = labels(&[("topology.kubernetes.io/zone", &zone)]);
        let m = member(&target, &zone, &l);
        let got = in_member(&svc, &m);
        let plain = expand(&ExpandInput { cluster: Some(&target), ..ExpandInput::new(&service(json!([]))) }).unwrap();
        let selected = selects(&svc.overrides()[0], &m);
        if selected {
            prop_assert_ne!(&got, &plain);
            prop_assert!(app(&got)["image"].as_str().unwrap().starts_with(&registry));
        } else {
            prop_assert_eq!(&got, &plain);
        }
    }
}
