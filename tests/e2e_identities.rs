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
    ] {
        assert!(can_i(&kc, &hub, allowed), "the hub may not {allowed:?}");
    }
    for denied in [
        &["create", "secrets", "-n", "pinfed-system"][..],
        &["create", "pods", "-n", "default"],
        &["create", "leases.coordination.k8s.io", "-n", "default"],
        &["delete", "pinterestservices.compute.pinterest.com", "-A"],
        &["patch", "namespaces"],
        &["create", "clusterrolebindings.rbac.authorization.k8s.io"],
    ] {
        assert!(!can_i(&kc, &hub, denied), "the hub may {denied:?}");
    }
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
        ] {
            assert!(
                can_i(&kc, &member, allowed),
                "the agent in {member} may not {allowed:?}"
            );
        }
        for denied in [
            &["get", "secrets", "-n", "kube-system"][..],
            &["list", "secrets", "-A"],
            &["create", "pods", "-n", "default"],
            &["patch", "pinterestservices.compute.pinterest.com", "-A"],
            &["patch", "namespaces"],
            &["get", "namespaces/kube-system"],
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
        &["patch", "memberclusters.federation.pinterest.com"],
        &[
            "create",
            "leases.coordination.k8s.io",
            "-n",
            "pinfed-system",
        ],
        &["create", "pods", "-n", "default"],
    ] {
        assert!(!can_i(&kc, &hub, denied), "the JSS may {denied:?}");
    }
}
