//! Which Secrets of a namespace on the hub cluster the hub may read to propagate them:
//! only those a team grants, by name. The hub's own role carries no Secret read outside
//! `pinfed-system`; `pinfed grant-secrets -n NS NAME...` (run with the team's credential,
//! which must itself read those Secrets — RBAC grants nothing its granter lacks) writes
//! a Role with `resourceNames` and binds it to the hub's ServiceAccount.
//!
//! Pure: [`grant_objects`] and [`names_after`]; the CLI applies them.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::join_pull::HUB_ACCOUNT;
use super::members::HUB_NAMESPACE;

/// The Role (and RoleBinding) in a workload namespace naming the Secrets the hub may read.
pub const SECRET_GRANT_ROLE: &str = "pinfed-hub-propagated-secrets";
/// The field manager of `pinfed grant-secrets`.
pub const FIELD_MANAGER: &str = "pinfed-grant-secrets";

/// On a granted Secret: the pull members it may go to (comma-separated, `*` for all). A
/// pull member's copies sit on the hub where its agent's token reads them, so a Secret
/// goes to a pull member only where the team named it (`grant-secrets --members`); push
/// members' copies sit in their drop namespace, which no identity there reads.
pub const MEMBERS_ANNOTATION: &str = "federation.pinterest.com/members";

/// Whether a granted Secret with these annotations may go to pull member `member`.
pub fn may_go_to_pull_member(
    annotations: Option<&std::collections::BTreeMap<String, String>>,
    member: &str,
) -> bool {
    annotations
        .and_then(|a| a.get(MEMBERS_ANNOTATION))
        .is_some_and(|list| {
            list.split(',')
                .map(str::trim)
                .any(|m| m == "*" || m == member)
        })
}

/// The Role and RoleBinding letting the hub `get` exactly `names` in `namespace`.
pub fn grant_objects(namespace: &str, names: &BTreeSet<String>) -> Vec<Value> {
    let labels = json!({"app.kubernetes.io/managed-by": "pinfed"});
    vec![
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": SECRET_GRANT_ROLE, "namespace": namespace, "labels": labels},
            // list and watch narrowed to a name: the hub follows their changes.
            "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch"],
                       "resourceNames": names.iter().collect::<Vec<_>>()}]
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": SECRET_GRANT_ROLE, "namespace": namespace, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": SECRET_GRANT_ROLE},
            "subjects": [{"kind": "ServiceAccount", "name": HUB_ACCOUNT,
                          "namespace": HUB_NAMESPACE}]
        }),
    ]
}

/// The names a Role grants (its `get` on secrets), from the Role as stored.
pub fn granted_names(role: &Value) -> BTreeSet<String> {
    role["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| {
            r["resources"]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x == "secrets"))
        })
        .flat_map(|r| r["resourceNames"].as_array().cloned().unwrap_or_default())
        .filter_map(|n| n.as_str().map(str::to_string))
        .collect()
}

/// The names granted after adding `add` (or removing it, with `revoke`) to `current`.
pub fn names_after(current: &BTreeSet<String>, add: &[String], revoke: bool) -> BTreeSet<String> {
    let mut out = current.clone();
    for n in add {
        if revoke {
            out.remove(n);
        } else {
            out.insert(n.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grant_names_each_secret_and_only_get_for_the_hub() {
        let names: BTreeSet<String> = ["db".to_string(), "tls".to_string()].into();
        let objs = grant_objects("ads", &names);
        assert_eq!(objs[0]["kind"], "Role");
        assert_eq!(
            objs[0]["rules"],
            json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch"],
                     "resourceNames": ["db", "tls"]}])
        );
        assert_eq!(objs[1]["subjects"][0]["name"], HUB_ACCOUNT);
        assert_eq!(objs[1]["subjects"][0]["namespace"], "pinfed-system");
        assert_eq!(granted_names(&objs[0]), names);
    }

    #[test]
    fn a_pull_member_gets_a_secret_only_where_the_team_named_it() {
        let with = |v: &str| -> std::collections::BTreeMap<String, String> {
            [(MEMBERS_ANNOTATION.to_string(), v.to_string())].into()
        };
        assert!(!may_go_to_pull_member(None, "use1c"));
        assert!(may_go_to_pull_member(Some(&with("use1a, use1c")), "use1c"));
        assert!(may_go_to_pull_member(Some(&with("*")), "use1c"));
        assert!(!may_go_to_pull_member(Some(&with("use1a")), "use1c"));
        assert!(!may_go_to_pull_member(Some(&with("use1c2")), "use1c"));
    }

    #[test]
    fn granting_and_revoking_merge_with_what_is_granted() {
        let current: BTreeSet<String> = ["db".to_string()].into();
        let more = names_after(&current, &["tls".into(), "db".into()], false);
        assert_eq!(more.len(), 2);
        let less = names_after(&more, &["db".into()], true);
        assert_eq!(less, ["tls".to_string()].into());
        assert!(names_after(&less, &["tls".into()], true).is_empty());
    }
}
