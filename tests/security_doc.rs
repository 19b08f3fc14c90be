//! The identity tables of `docs/security.md` are generated from the roles pinfed ships
//! (`deploy/*/rbac.yaml`) and creates (`pinfed join`), never hand-copied: this test renders
//! them and fails when the document differs. Pure: no cluster.
//! Regenerate with `PINFED_UPDATE_DOCS=1 cargo test --test security_doc`.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

const BEGIN: &str = "<!-- BEGIN generated: identities (tests/security_doc.rs) -->";
const END: &str = "<!-- END generated: identities -->";

fn yaml_docs(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    pinfed::api::yaml::documents(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The strings of a YAML list (none when absent).
fn list(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|x| x.as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// (cluster, identity) → rows of (scope, resources, verbs), from roles and their bindings.
fn identities(objects: &[(&str, Value)]) -> BTreeMap<(String, String), Vec<[String; 3]>> {
    let roles: BTreeMap<(String, String, String), &Value> = objects
        .iter()
        .filter(|(_, o)| o["kind"] == "Role" || o["kind"] == "ClusterRole")
        .map(|(_, o)| {
            (
                (
                    o["kind"].as_str().unwrap().to_string(),
                    o["metadata"]["namespace"]
                        .as_str()
                        .unwrap_or("")
                        .to_string(),
                    o["metadata"]["name"].as_str().unwrap().to_string(),
                ),
                o,
            )
        })
        .collect();
    let mut out: BTreeMap<(String, String), Vec<[String; 3]>> = BTreeMap::new();
    for (cluster, b) in objects {
        if b["kind"] != "RoleBinding" && b["kind"] != "ClusterRoleBinding" {
            continue;
        }
        let role_kind = b["roleRef"]["kind"].as_str().unwrap().to_string();
        let ns = b["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let role_ns = if role_kind == "Role" {
            ns.clone()
        } else {
            String::new()
        };
        let role_name = b["roleRef"]["name"].as_str().unwrap().to_string();
        let role = roles
            .get(&(role_kind.clone(), role_ns, role_name.clone()))
            .unwrap_or_else(|| panic!("binding {b} names a role that is not shipped"));
        let scope = if b["kind"] == "ClusterRoleBinding" {
            "cluster-wide".to_string()
        } else {
            format!("namespace `{ns}`")
        };
        for s in b["subjects"].as_array().unwrap() {
            let who = format!(
                "{}/{}",
                s["namespace"].as_str().unwrap_or(""),
                s["name"].as_str().unwrap()
            );
            let rows = out.entry((cluster.to_string(), who)).or_default();
            for r in role["rules"].as_array().unwrap() {
                let groups = list(&r["apiGroups"]);
                let names = list(&r["resourceNames"]);
                let resources: Vec<String> = list(&r["resources"])
                    .into_iter()
                    .map(|res| {
                        let g = groups.first().map(String::as_str).unwrap_or("");
                        let full = if g.is_empty() {
                            res
                        } else {
                            format!("{res}.{g}")
                        };
                        if names.is_empty() {
                            format!("`{full}`")
                        } else {
                            format!("`{full}` ({})", names.join(", "))
                        }
                    })
                    .collect();
                rows.push([
                    scope.clone(),
                    resources.join(", "),
                    list(&r["verbs"]).join(", "),
                ]);
            }
        }
    }
    out
}

fn render() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut objects: Vec<(&str, Value)> = Vec::new();
    for (cluster, file) in [
        ("hub cluster", "deploy/hub/rbac.yaml"),
        ("hub cluster", "deploy/jss/rbac.yaml"),
        ("member cluster", "deploy/agent/rbac.yaml"),
        ("hub cluster", "deploy/hub/pod-policy.yaml"),
        ("hub cluster", "deploy/hub/snapshot-policy.yaml"),
    ] {
        objects.extend(
            yaml_docs(&root.join(file))
                .into_iter()
                .map(|o| (cluster, o)),
        );
    }
    objects.extend(
        pinfed::hub::join::member_rbac("MEMBER")
            .into_iter()
            .map(|o| ("member cluster", o)),
    );
    // Pull mode: the member's agent on the hub, the hub in the member's namespace there,
    // and the agent's extra rights in its member.
    let pull = pinfed::hub::join::JoinRequest {
        name: "MEMBER".into(),
        region: None,
        zone: None,
        labels: Default::default(),
        weight: None,
        server: String::new(),
        ca_pem: vec![],
        schemas: Default::default(),
    };
    objects.extend(
        pinfed::hub::join_pull::hub_objects(&pull)
            .into_iter()
            .map(|o| ("hub cluster (pull member)", o)),
    );
    objects.extend(
        pinfed::hub::join_pull::member_objects("MEMBER", "")
            .into_iter()
            .filter(|o| o["kind"] != "Secret")
            .map(|o| ("pull member cluster", o)),
    );
    // Secrets a team lets the hub read and propagate (`pinfed grant-secrets`), by name.
    objects.extend(
        pinfed::hub::secret_grant::grant_objects(
            "NAMESPACE",
            &["SECRET".to_string()].into_iter().collect(),
        )
        .into_iter()
        .map(|o| ("hub cluster (a namespace that granted Secrets)", o)),
    );
    let mut text = String::new();
    for ((cluster, who), rows) in identities(&objects) {
        text.push_str(&format!("\n#### `{who}` in the {cluster}\n\n"));
        text.push_str("| Where | Resources | Verbs |\n|---|---|---|\n");
        for [scope, resources, verbs] in rows {
            text.push_str(&format!("| {scope} | {resources} | {verbs} |\n"));
        }
    }
    text.push_str(&admission_policies(&objects));
    text
}

/// What RBAC cannot say (which fields a patch may touch), the shipped admission policies
/// say: each with whom it applies to and what it refuses.
fn admission_policies(objects: &[(&str, Value)]) -> String {
    let mut text = String::new();
    for (cluster, p) in objects {
        if p["kind"] != "ValidatingAdmissionPolicy" {
            continue;
        }
        text.push_str(&format!(
            "\n#### Admission policy `{}` in the {cluster}\n\n",
            p["metadata"]["name"].as_str().unwrap()
        ));
        for rule in p["spec"]["matchConstraints"]["resourceRules"]
            .as_array()
            .into_iter()
            .flatten()
        {
            text.push_str(&format!(
                "- on {} of `{}`\n",
                list(&rule["operations"]).join(", "),
                list(&rule["resources"]).join("`, `")
            ));
        }
        for c in p["spec"]["matchConditions"]
            .as_array()
            .into_iter()
            .flatten()
        {
            text.push_str(&format!("- when `{}`\n", c["expression"].as_str().unwrap()));
        }
        for v in p["spec"]["validations"].as_array().into_iter().flatten() {
            text.push_str(&format!("- refuses: {}\n", v["message"].as_str().unwrap()));
        }
        let bound = objects.iter().any(|(_, b)| {
            b["kind"] == "ValidatingAdmissionPolicyBinding"
                && b["spec"]["policyName"] == p["metadata"]["name"]
        });
        assert!(
            bound,
            "admission policy {} has no binding",
            p["metadata"]["name"]
        );
    }
    text
}

#[test]
fn the_identity_tables_in_docs_security_md_are_generated_from_the_roles() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/security.md");
    let doc = std::fs::read_to_string(&path).expect("docs/security.md");
    let (Some(a), Some(b)) = (doc.find(BEGIN), doc.find(END)) else {
        panic!("docs/security.md lacks the markers {BEGIN} … {END}");
    };
    let current = &doc[a + BEGIN.len()..b];
    let fresh = format!("{}\n", render());
    if std::env::var_os("PINFED_UPDATE_DOCS").is_some() {
        let updated = format!("{}{BEGIN}{fresh}{}", &doc[..a], &doc[b..]);
        std::fs::write(&path, updated).expect("write docs/security.md");
        return;
    }
    assert!(
        current == fresh,
        "docs/security.md's identity tables are stale (a role changed); regenerate with \
         PINFED_UPDATE_DOCS=1 cargo test --test security_doc"
    );
    // The hub's member credential is listed, and its rights in a member stop at the drop
    // namespace: a check that the rendering reads what it should.
    assert!(fresh.contains("`pinfed-system/pinfed-hub-member` in the member cluster"));
    assert!(fresh.contains("| namespace `pinfed-drop` | `configmaps`, `secrets` |"));
}
