//! The identities the e2e daemons run as are the ServiceAccounts `deploy/` ships, and the
//! API servers grant them what the shipped roles say and no more: asked of the API server
//! itself (SelfSubjectReview, SelfSubjectAccessReview through `kubectl auth`).

mod support;

use std::process::Command;

use support::{Federation, join_all, kubeconfig_as, kubectl_bin};

/// `kubectl auth ARGS` in `context` with the kubeconfig of an e2e daemon.
fn auth(kubeconfig: &std::path::Path, context: &str, args: &[&str]) -> (bool, String) {
    let out = Command::new(kubectl_bin())
        .args(["--context", context, "auth"])
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .expect("run kubectl auth");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn can_i(kubeconfig: &std::path::Path, context: &str, verb_resource: &[&str]) -> bool {
    let (ok, text) = auth(kubeconfig, context, &[&["can-i"], verb_resource].concat());
    // The answer is the first line; kubectl may add warnings after it.
    match text.lines().next().unwrap_or("").trim() {
        "yes" => true,
        "no" => false,
        other if !ok && other.starts_with("no") => false,
        other => panic!("kubectl auth can-i {verb_resource:?} in {context}: {other}\n{text}"),
    }
}

#[tokio::test]
async fn the_hub_runs_as_its_shipped_service_account_and_may_do_what_its_role_says() {
    let fed = Federation::connect().await;
    join_all(&fed); // the CRDs the roles name
    let hub = fed.topology.hub.name.clone();
    let kc = kubeconfig_as(&fed, support::identity_daemon("hub"));
    let (ok, who) = auth(
        &kc,
        &hub,
        &["whoami", "-o", "jsonpath={.status.userInfo.username}"],
    );
    assert!(ok, "kubectl auth whoami: {who}");
    assert_eq!(who.trim(), "system:serviceaccount:pinfed-system:pinfed-hub");
    for allowed in [
        &["patch", "pinterestservices.compute.pinterest.com", "-A"][..],
        &[
            "patch",
            "pinterestjobsets.compute.pinterest.com",
            "--subresource=status",
            "-A",
        ],
        &[
            "create",
            "leases.coordination.k8s.io",
            "-n",
            "pinfed-system",
        ],
        &["create", "events.events.k8s.io", "-n", "default"],
        // Member kubeconfig Secrets, in its own namespace only.
        &["get", "secrets", "-n", "pinfed-system"],
        // ConfigMaps workloads reference are followed by a watch (bundles follow changes).
        &["watch", "configmaps", "-A"],
        // Workload revisions: written, read back during a rollout, pruned.
        &["create", "controllerrevisions.apps", "-n", "default"],
        &["delete", "controllerrevisions.apps", "-n", "default"],
    ] {
        assert!(can_i(&kc, &hub, allowed), "the hub may not {allowed:?}");
    }
    for denied in [
        &["create", "secrets", "-n", "pinfed-system"][..],
        // No Secret a team did not grant it by name.
        &["get", "secrets", "-n", "default"],
        &["get", "secrets", "-n", "kube-system"],
        &["list", "secrets", "-A"],
        &["watch", "secrets", "-n", "pinfed-system"],
        &["create", "configmaps", "-n", "default"],
        &["create", "pods", "-n", "default"],
        &["create", "leases.coordination.k8s.io", "-n", "default"],
        &["delete", "pinterestservices.compute.pinterest.com", "-A"],
        &["patch", "namespaces"],
        &["create", "clusterrolebindings.rbac.authorization.k8s.io"],
        // Revisions are never rewritten in place (a record is what ran).
        &["patch", "controllerrevisions.apps", "-n", "default"],
        &["update", "controllerrevisions.apps", "-n", "default"],
    ] {
        assert!(!can_i(&kc, &hub, denied), "the hub may {denied:?}");
    }
    // `pinfed grant-secrets` lets it read exactly the named Secrets of one namespace.
    let ns = support::TestNamespace::create(&fed.hub(), "grant").await;
    let grant = |extra: &[&str]| {
        let mut args = vec![
            "grant-secrets",
            "--context",
            hub.as_str(),
            "-n",
            ns.name.as_str(),
        ];
        args.extend(extra);
        let out = support::pinfed(&fed, &args);
        assert!(
            out.status.success(),
            "pinfed {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    grant(&["db", "tls"]);
    let secret = |name: &str| format!("secrets/{name}");
    for name in ["db", "tls"] {
        // get, and a watch narrowed to the name (the hub follows its changes).
        for verb in ["get", "watch"] {
            assert!(
                can_i(&kc, &hub, &[verb, &secret(name), "-n", &ns.name]),
                "granted {verb} {name}"
            );
        }
    }
    assert!(!can_i(
        &kc,
        &hub,
        &["get", &secret("other"), "-n", &ns.name]
    ));
    assert!(!can_i(&kc, &hub, &["list", "secrets", "-n", &ns.name]));
    assert!(!can_i(&kc, &hub, &["watch", "secrets", "-n", &ns.name]));
    grant(&["--revoke", "db"]);
    assert!(!can_i(&kc, &hub, &["get", &secret("db"), "-n", &ns.name]));
    assert!(can_i(&kc, &hub, &["get", &secret("tls"), "-n", &ns.name]));
    grant(&["--revoke", "tls"]);
    assert!(!can_i(&kc, &hub, &["get", &secret("tls"), "-n", &ns.name]));
    ns.delete().await;
}

#[tokio::test]
async fn each_agent_runs_as_its_shipped_service_account_and_cannot_read_secrets() {
    let fed = Federation::connect().await;
    join_all(&fed); // the CRDs the roles name
    let kc = kubeconfig_as(&fed, support::identity_daemon("agent"));
    for member in fed.member_names() {
        let (ok, who) = auth(
            &kc,
            &member,
            &["whoami", "-o", "jsonpath={.status.userInfo.username}"],
        );
        assert!(ok, "kubectl auth whoami in {member}: {who}");
        assert_eq!(
            who.trim(),
            "system:serviceaccount:pinfed-system:pinfed-agent"
        );
        for allowed in [
            &["create", "deployments.apps", "-n", "default"][..],
            &[
                "patch",
                "pinterestservices.compute.pinterest.com",
                "--subresource=status",
                "-A",
            ],
            &["list", "pods", "-A"],
            &["get", "namespaces/pinfed-system"],
            // Which namespaces pinfed created (their labels), for the member policy.
            &["watch", "namespaces"],
            // The member policy its admins write.
            &[
                "get",
                "configmaps/pinfed-member-policy",
                "-n",
                "pinfed-system",
            ],
            // Bundles are read in pinfed-drop and materialized next to the workloads.
            &["get", "secrets", "-n", "pinfed-drop"],
            &["create", "secrets", "-n", "default"],
        ] {
            assert!(
                can_i(&kc, &member, allowed),
                "the agent in {member} may not {allowed:?}"
            );
        }
        // A pull member's agent applies what it pulls from the hub: slices, profiles, their
        // namespaces; it reads nodes for its report and its own hub kubeconfig Secret.
        let pull_rights = [
            &["patch", "pinterestservices.compute.pinterest.com", "-A"][..],
            &["create", "namespaces"],
            &["list", "nodes"],
            &[
                "get",
                "secrets/pinfed-hub-kubeconfig",
                "-n",
                "pinfed-system",
            ],
        ];
        for right in pull_rights {
            assert_eq!(
                can_i(&kc, &member, right),
                fed.is_pull(&member),
                "the agent in {member} (pull: {}) may {right:?}",
                fed.is_pull(&member)
            );
        }
        for denied in [
            &["get", "secrets", "-n", "kube-system"][..],
            &["list", "secrets", "-A"],
            &["get", "secrets", "-n", "default"],
            &["get", "secrets", "-n", "pinfed-system"],
            &["create", "pods", "-n", "default"],
            &["patch", "namespaces"],
            &["delete", "namespaces"],
            &[
                "create",
                "rolebindings.rbac.authorization.k8s.io",
                "-n",
                "default",
            ],
        ] {
            assert!(
                !can_i(&kc, &member, denied),
                "the agent in {member} may {denied:?}"
            );
        }
    }
}

#[tokio::test]
async fn the_jss_runs_as_its_shipped_service_account_and_may_only_submit_and_read() {
    let fed = Federation::connect().await;
    join_all(&fed); // the CRDs the roles name
    let hub = fed.topology.hub.name.clone();
    let kc = kubeconfig_as(&fed, support::identity_daemon("jss"));
    let (ok, who) = auth(
        &kc,
        &hub,
        &["whoami", "-o", "jsonpath={.status.userInfo.username}"],
    );
    assert!(ok, "kubectl auth whoami: {who}");
    assert_eq!(who.trim(), "system:serviceaccount:pinfed-system:pinfed-jss");
    for allowed in [
        &[
            "create",
            "pinterestservices.compute.pinterest.com",
            "-n",
            "default",
        ][..],
        &[
            "delete",
            "pinterestjobsets.compute.pinterest.com",
            "-n",
            "default",
        ],
        &["create", "tokenreviews.authentication.k8s.io"],
        &["list", "memberclusters.federation.pinterest.com"],
        // The UI's Drain for admins; the admission policy holds it to one annotation.
        &["patch", "memberclusters.federation.pinterest.com"],
        // `pinfed rollout history|undo` read the revisions the hub records.
        &["get", "controllerrevisions.apps", "-n", "default"],
        &["list", "controllerrevisions.apps", "-n", "default"],
        // A namespace's admission lock across replicas: Leases in its own namespace (the
        // admission policy below holds them to their prefix).
        &[
            "create",
            "leases.coordination.k8s.io",
            "-n",
            "pinfed-system",
        ],
        &[
            "delete",
            "leases.coordination.k8s.io",
            "-n",
            "pinfed-system",
        ],
    ] {
        assert!(can_i(&kc, &hub, allowed), "the JSS may not {allowed:?}");
    }
    for denied in [
        &["get", "secrets", "-n", "pinfed-system"][..],
        &[
            "patch",
            "pinterestservices.compute.pinterest.com",
            "--subresource=status",
            "-n",
            "default",
        ],
        &[
            "patch",
            "memberclusters.federation.pinterest.com",
            "--subresource=status",
        ],
        &["delete", "memberclusters.federation.pinterest.com"],
        &["create", "leases.coordination.k8s.io", "-n", "default"],
        &["create", "pods", "-n", "default"],
        // Only the hub records revisions.
        &["create", "controllerrevisions.apps", "-n", "default"],
        &["delete", "controllerrevisions.apps", "-n", "default"],
    ] {
        assert!(!can_i(&kc, &hub, denied), "the JSS may {denied:?}");
    }
    jss_patches_of_a_member_stop_at_the_draining_mark(&fed, &kc, &hub).await;
    jss_leases_stop_at_its_admission_locks(&kc, &hub);
}

/// `pinfed-jss-admission-locks-only` lets the JSS write its admission locks in its
/// namespace and no other Lease there (the hub's leader Lease above all), asked of the
/// hub API server with server-side dry runs.
fn jss_leases_stop_at_its_admission_locks(kubeconfig: &std::path::Path, context: &str) {
    let create = |name: &str| {
        let lease = format!(
            "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: {name}\n  namespace: pinfed-system\nspec:\n  holderIdentity: x\n"
        );
        let mut child = Command::new(kubectl_bin())
            .args([
                "--context",
                context,
                "create",
                "--dry-run=server",
                "-f",
                "-",
            ])
            .env("KUBECONFIG", kubeconfig)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run kubectl create");
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(lease.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    let (ok, text) = create("pinfed-jss-admission-team-a");
    assert!(ok, "the JSS may not take an admission lock: {text}");
    for other in ["pinfed-hub", "pinfed-agent-use1a", "anything-else"] {
        let (ok, text) = create(other);
        assert!(
            !ok && text.contains("pinfed-jss-admission-locks-only"),
            "the JSS may write the Lease {other}: {text}"
        );
    }
}

/// `kubectl patch --dry-run=server` of a MemberCluster as `kubeconfig`'s identity:
/// whether the API server (admission included) accepts it, and what it said.
fn patch_member(
    kubeconfig: &std::path::Path,
    context: &str,
    member: &str,
    patch: &str,
) -> (bool, String) {
    let out = Command::new(kubectl_bin())
        .args([
            "--context",
            context,
            "patch",
            "--dry-run=server",
            "--type=merge",
        ])
        .args([
            "memberclusters.federation.pinterest.com",
            member,
            "-p",
            patch,
        ])
        .env("KUBECONFIG", kubeconfig)
        .output()
        .expect("run kubectl patch");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// RBAC lets the JSS patch MemberClusters (the UI's Drain); the shipped admission policy
/// `pinfed-jss-drain-only` refuses every change but the draining mark, asked of the hub
/// API server with server-side dry runs (nothing changes).
async fn jss_patches_of_a_member_stop_at_the_draining_mark(
    fed: &Federation,
    kc: &std::path::Path,
    hub: &str,
) {
    let member = fed.member_names()[0].clone();
    let drain = r#"{"metadata":{"annotations":{"federation.pinterest.com/draining":"true"}}}"#;
    let hostile = [
        r#"{"spec":{"secretRef":{"name":"member-elsewhere"}}}"#,
        r#"{"metadata":{"labels":{"pinfed-test":"x"}}}"#,
        r#"{"metadata":{"annotations":{"pinfed-test":"x"}}}"#,
        r#"{"metadata":{"finalizers":["pinfed-test/x"]}}"#,
        r#"{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"gone","uid":"00000000-0000-0000-0000-000000000000"}]}}"#,
    ];
    // A new policy takes a moment to be enforced: wait until a hostile patch is refused.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (ok, text) = patch_member(kc, hub, &member, hostile[0]);
        if !ok {
            assert!(
                text.contains("pinfed-jss-drain-only") && text.contains("spec changed"),
                "refused, but not by the policy: {text}"
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the JSS may point {member} at another credential: {text}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    for p in &hostile[1..] {
        let (ok, text) = patch_member(kc, hub, &member, p);
        assert!(!ok, "the JSS may patch {member} with {p}: {text}");
        assert!(text.contains("pinfed-jss-drain-only"), "{p}: {text}");
    }
    let (ok, text) = patch_member(kc, hub, &member, drain);
    assert!(ok, "the JSS may not mark {member} draining: {text}");
    // A JSS installed in another namespace (a kustomize namespace) is held the same way:
    // the policy names the account, not the namespace. (Impersonated with the rights of
    // system:masters, so that RBAC lets the patch reach admission.)
    let out = Command::new(kubectl_bin())
        .args([
            "--context",
            hub,
            "patch",
            "--dry-run=server",
            "--type=merge",
        ])
        .args([
            "--as",
            "system:serviceaccount:pinfed-elsewhere:pinfed-jss",
            "--as-group",
            "system:masters",
        ])
        .args([
            "memberclusters.federation.pinterest.com",
            &member,
            "-p",
            hostile[0],
        ])
        .env("KUBECONFIG", &fed.kubeconfig)
        .output()
        .expect("run kubectl patch");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && text.contains("pinfed-jss-drain-only"),
        "a JSS in another namespace may point {member} at another credential: {text}"
    );
}

/// The credential the hub stores for each member (its kubeconfig Secret on the hub, as
/// `pinfed join` wrote it): the member's API server grants it pinfed's own resources, the
/// drop namespace and its own token, and denies every way to member-admin — reading other
/// Secrets, writing Secrets where a privileged ServiceAccount lives, Pods, RBAC, changing
/// namespaces, deleting Jobs. The token expires.
#[tokio::test]
async fn the_hub_credential_in_each_member_cannot_become_member_admin() {
    use base64::Engine;
    let fed = Federation::connect().await;
    join_all(&fed);
    let hub = fed.hub();
    for member in fed.member_names() {
        let stored = kube::Api::<k8s_openapi::api::core::v1::Secret>::namespaced(
            hub.clone(),
            "pinfed-system",
        )
        .get_opt(&format!("member-{member}"))
        .await
        .unwrap();
        if fed.is_pull(&member) {
            assert!(
                stored.is_none(),
                "the hub holds a credential for pull member {member}"
            );
            continue;
        }
        let secret = stored.expect("a kubeconfig Secret for a push member");
        let text = String::from_utf8(secret.data.unwrap()["kubeconfig"].0.clone()).unwrap();
        let kc = std::env::temp_dir().join(support::unique_name(&format!("hubcred-{member}")));
        std::fs::write(&kc, &text).unwrap();
        let (ok, who) = auth(
            &kc,
            &member,
            &["whoami", "-o", "jsonpath={.status.userInfo.username}"],
        );
        assert!(ok, "kubectl auth whoami in {member}: {who}");
        assert_eq!(
            who.trim(),
            "system:serviceaccount:pinfed-system:pinfed-hub-member"
        );
        // A bound token with an expiry of at most the three days join asks for.
        let token = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("token: "))
            .expect("a token in the kubeconfig");
        let claims: serde_json::Value = serde_json::from_slice(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(token.split('.').nth(1).unwrap())
                .unwrap(),
        )
        .unwrap();
        let life = claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap();
        assert!(
            life > 0 && life <= 3 * 24 * 3600,
            "token life {life}s: {claims}"
        );
        for allowed in [
            &[
                "create",
                "pinterestservices.compute.pinterest.com",
                "-n",
                "default",
            ][..],
            &["patch", "runtimeprofiles.compute.pinterest.com"],
            &["create", "secrets", "-n", "pinfed-drop"],
            &["create", "configmaps", "-n", "pinfed-drop"],
            &["create", "namespaces"],
            &["list", "nodes"],
            &["list", "pods", "-A"],
            &[
                "get",
                &format!("leases.coordination.k8s.io/pinfed-agent-{member}"),
                "-n",
                "pinfed-system",
            ],
            &[
                "create",
                "serviceaccounts/pinfed-hub-member",
                "--subresource=token",
                "-n",
                "pinfed-system",
            ],
            // The fence: the hub vouches for the member's job sets by renewing it.
            &[
                "patch",
                "leases.coordination.k8s.io/pinfed-hub-fence",
                "-n",
                "pinfed-system",
            ],
        ] {
            assert!(
                can_i(&kc, &member, allowed),
                "the hub's credential in {member} may not {allowed:?}"
            );
        }
        for denied in [
            &["get", "secrets", "-n", "kube-system"][..],
            &["list", "secrets", "-A"],
            &["get", "secrets", "-n", "default"],
            &["get", "secrets", "-n", "pinfed-system"],
            &["create", "secrets", "-n", "default"],
            &["create", "secrets", "-n", "pinfed-system"],
            &["create", "secrets", "-n", "kube-system"],
            &["get", "configmaps", "-n", "kube-system"],
            &["create", "configmaps", "-n", "default"],
            &["create", "pods", "-n", "default"],
            &["create", "deployments.apps", "-n", "default"],
            &["delete", "jobs.batch", "-n", "default"],
            &[
                "create",
                "rolebindings.rbac.authorization.k8s.io",
                "-n",
                "pinfed-drop",
            ],
            &["create", "clusterrolebindings.rbac.authorization.k8s.io"],
            &["patch", "namespaces"],
            &["delete", "namespaces"],
            &[
                "create",
                "serviceaccounts/pinfed-agent",
                "--subresource=token",
                "-n",
                "pinfed-system",
            ],
            &[
                "create",
                "serviceaccounts/default",
                "--subresource=token",
                "-n",
                "pinfed-drop",
            ],
            &[
                "patch",
                "pinterestservices.compute.pinterest.com",
                "--subresource=status",
                "-A",
            ],
            // No other Lease: not the agent's (its sign of life), not its elections.
            &[
                "patch",
                &format!("leases.coordination.k8s.io/pinfed-agent-{member}"),
                "-n",
                "pinfed-system",
            ],
            &[
                "create",
                "leases.coordination.k8s.io",
                "-n",
                "pinfed-system",
            ],
            &[
                "delete",
                "leases.coordination.k8s.io/pinfed-hub-fence",
                "-n",
                "pinfed-system",
            ],
        ] {
            assert!(
                !can_i(&kc, &member, denied),
                "the hub's credential in {member} may {denied:?}"
            );
        }
        // Nothing in the drop namespace can do anything with a token minted there.
        let drop_default = ["--as", "system:serviceaccount:pinfed-drop:default"];
        let admin = fed.kubeconfig.clone();
        for verb_resource in [
            &["create", "pods", "-n", "pinfed-drop"][..],
            &["get", "secrets", "-n", "pinfed-drop"],
            &["list", "secrets", "-A"],
        ] {
            assert!(
                !can_i(
                    &admin,
                    &member,
                    &[verb_resource, &drop_default[..]].concat()
                ),
                "pinfed-drop's default ServiceAccount in {member} may {verb_resource:?}"
            );
        }
        // No non-expiring token Secret is left in the member.
        let legacy = kube::Api::<k8s_openapi::api::core::v1::Secret>::namespaced(
            fed.client(&member),
            "pinfed-system",
        )
        .get_opt("pinfed-hub-member-token")
        .await
        .unwrap();
        assert!(
            legacy.is_none(),
            "a service-account-token Secret in {member}"
        );
        let _ = std::fs::remove_file(&kc);
    }
}

/// A pull member's agent holds a credential for the hub (the kubeconfig `pinfed join
/// --mode pull` left in the member's Secret): the hub's API server grants it its own
/// namespace there — its MemberSlices and their status, the bundles, its Lease, its
/// report (one MemberReport it may write but not create), its own token — reads of its
/// own MemberCluster and the RuntimeProfiles, and nothing of any other member, no write
/// to its MemberCluster, no Secret elsewhere, no workload on the hub.
#[tokio::test]
async fn a_pull_agent_may_read_only_its_own_namespace_on_the_hub() {
    let fed = Federation::connect().await;
    join_all(&fed);
    let pull: Vec<String> = fed
        .member_names()
        .into_iter()
        .filter(|m| fed.is_pull(m))
        .collect();
    assert!(!pull.is_empty(), "the topology has no pull member");
    let other = fed
        .member_names()
        .into_iter()
        .find(|m| !fed.is_pull(m))
        .expect("a push member");
    for member in pull {
        let secret = kube::Api::<k8s_openapi::api::core::v1::Secret>::namespaced(
            fed.client(&member),
            "pinfed-system",
        )
        .get("pinfed-hub-kubeconfig")
        .await
        .unwrap();
        let text = String::from_utf8(secret.data.unwrap()["kubeconfig"].0.clone()).unwrap();
        let kc = std::env::temp_dir().join(support::unique_name(&format!("pullcred-{member}")));
        std::fs::write(&kc, &text).unwrap();
        let (ok, who) = auth(
            &kc,
            "hub",
            &["whoami", "-o", "jsonpath={.status.userInfo.username}"],
        );
        assert!(ok, "kubectl auth whoami on the hub: {who}");
        let own = format!("pinfed-member-{member}");
        assert_eq!(
            who.trim(),
            format!("system:serviceaccount:{own}:pinfed-agent")
        );
        let lease = format!("leases.coordination.k8s.io/pinfed-agent-{member}");
        let mc = format!("memberclusters.federation.pinterest.com/{member}");
        let report = format!("memberreports.federation.pinterest.com/pinfed-agent-{member}");
        let other_mc = format!("memberclusters.federation.pinterest.com/{other}");
        let other_ns = format!("pinfed-member-{other}");
        for allowed in [
            &["list", "memberslices.federation.pinterest.com", "-n", &own][..],
            &[
                "patch",
                "memberslices.federation.pinterest.com",
                "--subresource=status",
                "-n",
                &own,
            ],
            &["watch", "secrets", "-n", &own],
            &["patch", &lease, "-n", &own],
            &["patch", &report, "--subresource=status", "-n", &own],
            &["list", "runtimeprofiles.compute.pinterest.com"],
            &[
                "create",
                "serviceaccounts/pinfed-agent",
                "--subresource=token",
                "-n",
                &own,
            ],
        ] {
            assert!(
                can_i(&kc, "hub", allowed),
                "{member}'s agent may not {allowed:?} on the hub"
            );
        }
        for denied in [
            &[
                "create",
                "memberslices.federation.pinterest.com",
                "-n",
                &own,
            ][..],
            &[
                "list",
                "memberslices.federation.pinterest.com",
                "-n",
                &other_ns,
            ],
            &["list", "memberslices.federation.pinterest.com", "-A"],
            &["get", "secrets", "-n", &other_ns],
            &["get", "secrets", "-n", "pinfed-system"],
            &["list", "secrets", "-A"],
            &["patch", &other_mc, "--subresource=status"],
            // Its report is its own object; the MemberCluster is the hub's.
            &["patch", &mc, "--subresource=status"],
            &[
                "create",
                "memberreports.federation.pinterest.com",
                "-n",
                &own,
            ],
            // Its spec (the member it describes) is join's.
            &["patch", &report, "-n", &own],
            &[
                "patch",
                &format!("memberreports.federation.pinterest.com/pinfed-agent-{other}"),
                "-n",
                &other_ns,
            ],
            &["list", "memberclusters.federation.pinterest.com"],
            &["patch", &mc],
            &["list", "pinterestservices.compute.pinterest.com", "-A"],
            &["create", "pods", "-n", &own],
            &[
                "create",
                "rolebindings.rbac.authorization.k8s.io",
                "-n",
                &own,
            ],
            &[
                "create",
                "serviceaccounts/default",
                "--subresource=token",
                "-n",
                &own,
            ],
        ] {
            assert!(
                !can_i(&kc, "hub", denied),
                "{member}'s agent may {denied:?} on the hub"
            );
        }
        // The token expires (three days at most) and the agent renews it.
        let token = pinfed::controller::tokens::kubeconfig_token(&text).unwrap();
        let (iat, exp) = pinfed::controller::tokens::token_lifetime(&token).unwrap();
        assert!(exp > iat && exp - iat <= 3 * 24 * 3600, "{iat}..{exp}");
    }
}
