//! The Job Submission Service on the local topology: every rejection with its status and
//! JSON body, quota with the numbers, artifacts and their checksums, a good submission
//! that runs and is aggregated, delete that cleans up the members, TLS, the CLI and the
//! kubectl plugin. Hub, agents and the JSS run as local processes against real
//! kube-apiservers.

mod support;

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use pinfed::api::federation::FederatedQuota;
use pinfed::api::jobset::PinterestJobSet;
use pinfed::api::service::PinterestService;
use pinfed::jss::client::JssClient;
use serde_json::{Value, json};
use support::{
    Daemon, Federation, TestNamespace, agent_args, eventually, eventually_logged, free_port,
    join_all, pinfed, pinfed_bin, spawn_daemon, unique_name,
};

const WAIT: Duration = Duration::from_secs(90);

/// What the tests share: hub, agents, one JSS on loopback HTTP and its files.
struct Setup {
    /// The spans the shared daemons exported.
    spans: otlp::Collector,
    daemons: Vec<Daemon>,
    server: String,
    metrics: String,
    dir: PathBuf,
    artifacts: PathBuf,
}

const TOKENS: &str = r#"
tokens:
  - {user: alice, token: alice-token, teams: [ads]}
  - {user: bob, token: bob-token, teams: [search]}
  - {user: carol, token: carol-token, teams: [reviewed]}
  - {user: dave, token: dave-token, teams: [platform]}
  - {user: erin, token: erin-token, teams: [infra]}
  - {user: gina, token: gina-token, teams: [governance]}
teams:
  governance: {namespaces: [], admin: true}
  infra: {namespaces: ["jss-*"], inline: true, privileges: [hostPath, daemon], priorityClasses: [jss-e2e-urgent], hosts: ["*.shared.example"]}
  ads: {namespaces: ["jss-*"], inline: true, hosts: ["*.ads.example", "*.shared.example"]}
  search: {namespaces: ["search-*"], inline: false}
  reviewed: {namespaces: ["jss-*"], inline: false}
  service-accounts: {namespaces: ["jss-sa-*"], groups: ["system:serviceaccounts"]}
  platform: {namespaces: ["*"], inline: true}
"#;

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn wait_listening(addr: &str, d: &Daemon) {
    for _ in 0..600 {
        if std::net::TcpStream::connect(addr).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("nothing listens on {addr}\n{}", d.log_tail());
}

fn setup(fed: &Federation) -> &'static Setup {
    static SETUP: OnceLock<Setup> = OnceLock::new();
    SETUP.get_or_init(|| {
        join_all(fed);
        // The shared hub, agents and JSS export their spans to this test's collector.
        let spans = otlp::Collector::start();
        let otlp = vec![
            "--otlp-endpoint".to_string(),
            spans.endpoint.clone(),
            "--otlp-protocol".into(),
            "http/json".into(),
        ];
        let otlp_flags: Vec<&str> = otlp.iter().map(String::as_str).collect();
        let mut daemons = vec![support::spawn_hub(fed, "hub", &otlp_flags)];
        daemons.extend(fed.member_names().into_iter().map(|m| {
            let args = [agent_args(fed, &m), otlp.clone()].concat();
            spawn_daemon(fed, &format!("agent-{m}"), &args)
        }));
        let dir = std::env::temp_dir().join(unique_name("pinfed-jss"));
        let artifacts = dir.join("artifacts");
        std::fs::create_dir_all(&artifacts).unwrap();
        std::fs::write(dir.join("tokens.yaml"), TOKENS).unwrap();
        // Token files must be private to their owner (the JSS refuses others).
        std::fs::set_permissions(
            dir.join("tokens.yaml"),
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .unwrap();
        let (api, metrics) = (
            format!("127.0.0.1:{}", free_port()),
            format!("127.0.0.1:{}", free_port()),
        );
        let jss = spawn_daemon(
            fed,
            "jss",
            &[
                s(&[
                    "jss",
                    "--context",
                    "hub",
                    "--body-limit",
                    "65536",
                    "--token-review",
                ]),
                vec![
                    "--listen".into(),
                    api.clone(),
                    "--metrics-addr".into(),
                    metrics.clone(),
                    "--tokens".into(),
                    dir.join("tokens.yaml").display().to_string(),
                    "--artifacts".into(),
                    artifacts.display().to_string(),
                ],
                otlp,
            ]
            .concat(),
        );
        wait_listening(&api, &jss);
        daemons.push(jss);
        Setup {
            spans,
            daemons,
            server: format!("http://{api}"),
            metrics: format!("http://{metrics}/metrics"),
            dir,
            artifacts,
        }
    })
}

/// A JSS of one test's own (other flags than the shared one), on loopback.
struct OwnJss {
    /// `host:port` of its API.
    api: String,
    /// `host:port` of its metrics.
    metrics: String,
    daemon: Daemon,
}

impl Setup {
    /// Starts a JSS with `flags` beside the shared one (same hub, tokens and artifacts).
    fn own_jss(&self, fed: &Federation, name: &str, flags: &[&str]) -> OwnJss {
        let (api, metrics) = (
            format!("127.0.0.1:{}", free_port()),
            format!("127.0.0.1:{}", free_port()),
        );
        let daemon = spawn_daemon(
            fed,
            name,
            &[
                s(&["jss", "--context", "hub"]),
                s(flags),
                vec![
                    "--listen".into(),
                    api.clone(),
                    "--metrics-addr".into(),
                    metrics.clone(),
                    "--tokens".into(),
                    self.dir.join("tokens.yaml").display().to_string(),
                    "--artifacts".into(),
                    self.artifacts.display().to_string(),
                ],
            ]
            .concat(),
        );
        wait_listening(&api, &daemon);
        OwnJss {
            api,
            metrics,
            daemon,
        }
    }

    fn client(&self, token: Option<&str>) -> JssClient {
        JssClient::new(&self.server, token.map(String::from), None).unwrap()
    }
    fn logs(&self) -> String {
        format!(
            "--- hub ---\n{}\n--- jss ---\n{}",
            self.daemons[0].log_tail(),
            self.daemons.last().unwrap().log_tail()
        )
    }
    /// Publishes a workload into the store with `pinfed artifact add`.
    fn publish(&self, fed: &Federation, name: &str, version: &str, yaml: &str) {
        let file = self.dir.join(format!("{name}-{version}.yaml"));
        std::fs::write(&file, yaml).unwrap();
        let out = pinfed(
            fed,
            &[
                "artifact",
                "add",
                "--store",
                &self.artifacts.display().to_string(),
                "-f",
                &file.display().to_string(),
                "--name",
                name,
                "--version",
                version,
            ],
        );
        assert!(
            out.status.success(),
            "pinfed artifact add: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn service(name: &str, team: &str, replicas: i64, cpu: &str) -> Value {
    json!({
        "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestService",
        "metadata": {"name": name},
        "spec": {
            "owner": {"team": team, "contact": format!("{team}@pinterest.com")},
            "replicas": replicas,
            "template": {"spec": {"containers": [{"name": "app", "image": "registry.example/app:1",
                "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]}}
        }
    })
}

fn yaml(v: &Value) -> String {
    pinfed::api::yaml::to_string(v).unwrap()
}

fn assert_error(r: &pinfed::jss::client::Reply, status: u16, reason: &str) {
    assert_eq!(r.status, status, "{}", r.text);
    assert_eq!(r.body["reason"], reason, "{}", r.text);
    assert!(
        r.body["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{}",
        r.text
    );
    assert!(r.body["details"].is_array(), "{}", r.text);
}

#[tokio::test]
async fn jss_answers_401_without_a_valid_token() {
    let fed = Federation::connect().await;
    let st = setup(&fed);
    let sub = json!({"artifact": {"name": "web", "version": "1"}, "namespace": "jss-x"});
    let r = st
        .client(None)
        .post_json("/v1/submissions", &sub)
        .await
        .unwrap();
    assert_error(&r, 401, "Unauthenticated");
    let r = st
        .client(Some("wrong"))
        .post_json("/v1/submissions", &sub)
        .await
        .unwrap();
    assert_error(&r, 401, "Unauthenticated");
    for path in ["/v1/workloads", "/v1/clusters", "/v1/quotas", "/v1/owners"] {
        let r = st.client(None).get(path).await.unwrap();
        assert_error(&r, 401, "Unauthenticated");
    }
    // Unknown routes and methods get JSON too.
    let r = st
        .client(Some("alice-token"))
        .get("/v2/nothing")
        .await
        .unwrap();
    assert_error(&r, 404, "NoRoute");
    let r = st
        .client(Some("alice-token"))
        .delete("/v1/clusters")
        .await
        .unwrap();
    assert_error(&r, 405, "MethodNotAllowed");
    // The decisions are counted by outcome.
    let m = support::http_get(&st.metrics).await;
    assert!(
        m.contains(r#"pinfed_jss_submissions_total{outcome="Unauthenticated"}"#),
        "{m}"
    );
    assert!(
        m.contains("pinfed_jss_submission_duration_seconds_bucket"),
        "{m}"
    );
    // The UI's pages are served under the same request timeout and counted like the API
    // (the live stream alone is not: it stays open with its page).
    let r = st.client(None).get("/ui/login").await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text);
    let m = support::http_get(&st.metrics).await;
    assert!(
        m.lines().any(|l| l.starts_with("pinfed_jss_requests_total")
            && l.contains(r#"route="/ui/login""#)
            && l.contains(r#"code="200""#)),
        "{m}"
    );
    // And audited.
    let log = std::fs::read_to_string(&st.daemons.last().unwrap().log).unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains("audit") && l.contains("Unauthenticated") && l.contains("submit")),
        "{log}"
    );
}

#[tokio::test]
async fn jss_answers_403_for_the_wrong_team_namespace_or_inline_permission() {
    let fed = Federation::connect().await;
    let st = setup(&fed);
    let hub = fed.hub();
    let ns = TestNamespace::create(&hub, "jss-authz").await;
    let ads_svc = service("authz", "ads", 1, "10m");
    // bob's team may not submit inline at all.
    let r = st
        .client(Some("bob-token"))
        .post_json(
            "/v1/submissions",
            &json!({"resource": ads_svc, "namespace": ns.name}),
        )
        .await
        .unwrap();
    assert_error(&r, 403, "Forbidden");
    // An artifact owned by ads, submitted by bob (search): wrong team.
    st.publish(&fed, "authz-web", "1.0.0", &yaml(&ads_svc));
    let r = st
        .client(Some("bob-token"))
        .post_json(
            "/v1/submissions",
            &json!({"artifact": {"name": "authz-web", "version": "1.0.0"}, "namespace": ns.name}),
        )
        .await
        .unwrap();
    assert_error(&r, 403, "Forbidden");
    assert!(
        r.body["error"].as_str().unwrap().contains("team \"ads\""),
        "{}",
        r.text
    );
    // alice (ads) into a namespace her team does not have.
    let r = st
        .client(Some("alice-token"))
        .post_json(
            "/v1/submissions",
            &json!({"resource": ads_svc, "namespace": "search-1"}),
        )
        .await
        .unwrap();
    assert_error(&r, 403, "Forbidden");
    assert!(
        r.body["error"].as_str().unwrap().contains("search-1"),
        "{}",
        r.text
    );
    // carol's team exists for the namespace but only takes reviewed artifacts.
    let reviewed = service("authz", "reviewed", 1, "10m");
    let r = st
        .client(Some("carol-token"))
        .post_json(
            "/v1/submissions",
            &json!({"resource": reviewed, "namespace": ns.name}),
        )
        .await
        .unwrap();
    assert_error(&r, 403, "Forbidden");
    // Reads of a namespace outside one's teams are forbidden too.
    let r = st
        .client(Some("bob-token"))
        .get(&format!("/v1/workloads/{}", ns.name))
        .await
        .unwrap();
    assert_error(&r, 403, "Forbidden");
    // Nothing reached the hub.
    let api: Api<PinterestService> = Api::namespaced(hub.clone(), &ns.name);
    assert!(api.get_opt("authz").await.unwrap().is_none());
    ns.delete().await;
}

/// Host access, privileged containers, pinfed's ServiceAccounts and Daemons need the
/// team's grant in the team file: refused with the field for a team without it, admitted
/// for the team that has it (and only for what it has).
#[tokio::test]
async fn jss_admits_privileges_only_for_teams_granted_them() {
    let fed = Federation::connect().await;
    let st = setup(&fed);
    let hub = fed.hub();
    let ns = TestNamespace::create(&hub, "jss-privileges").await;
    let with = |team: &str, name: &str, pod: Value| {
        let mut svc = service(name, team, 1, "10m");
        for (k, v) in pod.as_object().unwrap() {
            svc["spec"]["template"]["spec"][k] = v.clone();
        }
        svc
    };
    let host_path = json!({"volumes": [{"name": "host", "hostPath": {"path": "/var/log"}}]});
    let privileged = json!({"containers": [{"name": "app", "image": "registry.example/app:1",
        "securityContext": {"privileged": true}}]});
    let submit = |token: &'static str, resource: Value| {
        let (st, ns) = (&st, ns.name.clone());
        async move {
            st.client(Some(token))
                .post_json(
                    "/v1/submissions",
                    &json!({"resource": resource, "namespace": ns}),
                )
                .await
                .unwrap()
        }
    };
    // ads has no grant: refused, naming the field and the privilege.
    let r = submit("alice-token", with("ads", "logs", host_path.clone())).await;
    assert_error(&r, 403, "Forbidden");
    let msg = r.body["error"].as_str().unwrap();
    assert!(
        msg.contains("spec.template.spec.volumes[0].hostPath") && msg.contains("\"hostPath\""),
        "{}",
        r.text
    );
    let r = submit("alice-token", with("ads", "root", privileged.clone())).await;
    assert_error(&r, 403, "Forbidden");
    assert!(
        r.body["error"]
            .as_str()
            .unwrap()
            .contains("spec.template.spec.containers[0].securityContext.privileged"),
        "{}",
        r.text
    );
    // infra is granted hostPath (and Daemons), not privileged containers.
    let r = submit("erin-token", with("infra", "logs", host_path)).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let r = submit("erin-token", with("infra", "root", privileged)).await;
    assert_error(&r, 403, "Forbidden");
    let api: Api<PinterestService> = Api::namespaced(hub.clone(), &ns.name);
    assert!(api.get_opt("logs").await.unwrap().is_some());
    assert!(api.get_opt("root").await.unwrap().is_none());
    let _ = api.delete("logs", &Default::default()).await;
    ns.delete().await;
}

/// Ingress hosts are owned: a team claims only names its team file allows (403), a name
/// another workload holds is refused (409 naming the holder), and one written onto the
/// hub past the JSS waits Invalid (`IngressHostHeld`) with nothing of it in any member,
/// until the holder is deleted: then it is placed and its Ingress answers for the name.
#[tokio::test]
async fn an_ingress_host_stays_with_the_workload_that_claimed_it_first() {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::networking::v1::Ingress;
    let fed = Federation::connect().await;
    let st = setup(&fed);
    let hub = fed.hub();
    let ns_a = TestNamespace::create(&hub, "jss-host-a").await;
    let ns_b = TestNamespace::create(&hub, "jss-host-b").await;
    let with_host = |name: &str, team: &str, host: &str| {
        let mut v = service(name, team, 1, "10m");
        v["spec"]["template"]["spec"]["containers"][0]["ports"] =
            json!([{"name": "http", "containerPort": 8080}]);
        v["spec"]["ingress"] = json!({"host": host, "path": "/"});
        v
    };
    let submit = |token: &'static str, v: Value, ns: String| {
        let c = st.client(Some(token));
        async move {
            c.post_json("/v1/submissions", &json!({"resource": v, "namespace": ns}))
                .await
                .unwrap()
        }
    };
    let id = unique_name("h");
    let ads_host = format!("{id}.ads.example");
    let shared = format!("{id}.shared.example");
    // A name outside the team's hosts.
    let r = submit(
        "erin-token",
        with_host("web", "infra", &ads_host),
        ns_b.name.clone(),
    )
    .await;
    assert_error(&r, 403, "Forbidden");
    assert!(
        r.body["error"]
            .as_str()
            .unwrap()
            .contains("spec.ingress.host")
            && r.text.contains("*.shared.example"),
        "{}",
        r.text
    );
    // A name both teams may claim: the first submission holds it.
    let r = submit(
        "alice-token",
        with_host("first", "ads", &shared),
        ns_a.name.clone(),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let r = submit(
        "erin-token",
        with_host("second", "infra", &shared),
        ns_b.name.clone(),
    )
    .await;
    assert_error(&r, 409, "HostHeld");
    assert!(
        r.text
            .contains(&format!("PinterestService {}/first", ns_a.name)),
        "{}",
        r.text
    );
    // The holder runs and its Ingress answers for the name.
    let ingress_hosts = |ns: String| {
        let fed = &fed;
        async move {
            let mut hosts = Vec::new();
            for m in fed.member_names() {
                let api: Api<Ingress> = Api::namespaced(fed.client(&m), &ns);
                for i in api
                    .list(&Default::default())
                    .await
                    .map(|l| l.items)
                    .unwrap_or_default()
                {
                    for rule in i.spec.and_then(|s| s.rules).unwrap_or_default() {
                        hosts.extend(rule.host);
                    }
                }
            }
            hosts
        }
    };
    eventually(WAIT, "the holder's Ingress in a member", || {
        let (ns, shared) = (ns_a.name.clone(), shared.clone());
        let hosts = ingress_hosts;
        async move { hosts(ns).await.contains(&shared) }
    })
    .await;
    // Past the JSS, straight onto the hub: held, and nothing of it goes out.
    let api_b: Api<PinterestService> = Api::namespaced(hub.clone(), &ns_b.name);
    let late: PinterestService =
        serde_json::from_value(with_host("late", "infra", &shared)).unwrap();
    api_b.create(&PostParams::default(), &late).await.unwrap();
    let held = |api: Api<PinterestService>| async move {
        let st = support::status_of(&api, "late").await;
        st["conditions"].as_array().into_iter().flatten().any(|c| {
            c["type"] == "Invalid" && c["status"] == "True" && c["reason"] == "IngressHostHeld"
        })
    };
    eventually(
        WAIT,
        "the late claimant held Invalid (IngressHostHeld)",
        || held(api_b.clone()),
    )
    .await;
    let status = support::status_of(&api_b, "late").await;
    assert!(
        status.to_string().contains(&format!("{}/first", ns_a.name)),
        "the condition names the holder: {status}"
    );
    eventually(WAIT, "an IngressHostHeld Event", || async {
        support::event_note(&hub, &ns_b.name, "IngressHostHeld")
            .await
            .is_some()
    })
    .await;
    // A few heartbeats: still nothing of it in any member.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(held(api_b.clone()).await, "still held");
    for m in fed.member_names() {
        let deps: Api<Deployment> = Api::namespaced(fed.client(&m), &ns_b.name);
        let n = deps
            .list(&Default::default())
            .await
            .map(|l| l.items.len())
            .unwrap_or(0);
        assert_eq!(n, 0, "a held workload's Deployment reached {m}");
    }
    assert!(!ingress_hosts(ns_b.name.clone()).await.contains(&shared));
    // The holder goes: the late claimant is placed at once and takes the name.
    let api_a: Api<PinterestService> = Api::namespaced(hub.clone(), &ns_a.name);
    api_a.delete("first", &Default::default()).await.unwrap();
    eventually(
        WAIT,
        "the late claimant's Ingress answers for the name",
        || {
            let (ns, shared) = (ns_b.name.clone(), shared.clone());
            let hosts = ingress_hosts;
            async move { hosts(ns).await.contains(&shared) }
        },
    )
    .await;
    assert!(!held(api_b.clone()).await, "the hold is lifted");
    ns_a.delete().await;
    ns_b.delete().await;
}

/// A priority class must exist on the hub (422 naming the field) and be granted to the
/// team in the team file (403 naming the class and the grant).
#[tokio::test]
async fn jss_admits_a_priority_class_only_if_it_exists_and_the_team_is_granted_it() {
    use k8s_openapi::api::scheduling::v1::PriorityClass;
    let fed = Federation::connect().await;
    let st = setup(&fed);
    let hub = fed.hub();
    let classes: Api<PriorityClass> = Api::all(hub.clone());
    if classes.get_opt("jss-e2e-urgent").await.unwrap().is_none() {
        let c: PriorityClass = serde_json::from_value(json!({
            "metadata": {"name": "jss-e2e-urgent"}, "value": 5000,
            "description": "e2e_jss: a class granted to team infra only"
        }))
        .unwrap();
        let _ = classes.create(&Default::default(), &c).await;
    }
    let ns = TestNamespace::create(&hub, "jss-priority").await;
    let with_class = |team: &str, name: &str, class: &str| {
        let mut svc = service(name, team, 1, "10m");
        svc["spec"]["priorityClassName"] = json!(class);
        svc
    };
    let submit = |token: &'static str, resource: Value| {
        let (st, ns) = (&st, ns.name.clone());
        async move {
            st.client(Some(token))
                .post_json(
                    "/v1/submissions",
                    &json!({"resource": resource, "namespace": ns}),
                )
                .await
                .unwrap()
        }
    };
    let r = submit("erin-token", with_class("infra", "nope", "no-such-class")).await;
    assert_error(&r, 422, "Invalid");
    let fields: Vec<&str> = r.body["details"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["field"].as_str())
        .collect();
    assert_eq!(fields, ["spec.priorityClassName"], "{}", r.text);
    assert!(r.text.contains("no-such-class"), "{}", r.text);
    // ads is not granted the class.
    let r = submit(
        "alice-token",
        with_class("ads", "ads-urgent", "jss-e2e-urgent"),
    )
    .await;
    assert_error(&r, 403, "Forbidden");
    let msg = r.body["error"].as_str().unwrap();
    assert!(
        msg.contains("spec.priorityClassName") && msg.contains("jss-e2e-urgent"),
        "{}",
        r.text
    );
    // infra is (the JSS's cache may take a moment to see a class just created).
    let mut last = None;
    for _ in 0..20 {
        let r = submit(
            "erin-token",
            with_class("infra", "urgent", "jss-e2e-urgent"),
        )
        .await;
        if r.status == 201 {
            // The submitter hears the priority and what the hub is likely to do.
            assert_eq!(r.body["priority"]["class"], "jss-e2e-urgent", "{}", r.text);
            assert_eq!(r.body["priority"]["value"], 5000, "{}", r.text);
            assert!(
                r.body["forecast"]
                    .as_str()
                    .is_some_and(|f| f.starts_with("fits now: ") || f.starts_with("would wait")),
                "{}",
                r.text
            );
            last = None;
            break;
        }
        last = Some(r.text);
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    assert_eq!(last, None, "infra may use the class it is granted");
    let api: Api<PinterestService> = Api::namespaced(hub.clone(), &ns.name);
    let stored = api.get("urgent").await.unwrap();
    assert_eq!(
        stored.spec.priority_class_name.as_deref(),
        Some("jss-e2e-urgent")
    );
    assert!(api.get_opt("ads-urgent").await.unwrap().is_none());
    assert!(api.get_opt("nope").await.unwrap().is_none());
    let _ = api.delete("urgent", &Default::default()).await;
    ns.delete().await;
}

#[tokio::test]
async fn jss_answers_413_for_a_body_over_the_limit() {
    let fed = Federation::connect().await;
    let st = setup(&fed);
    // This JSS runs with --body-limit 65536.
    let big = "x".repeat(200_000);
    let r = st
        .client(Some("alice-token"))
        .post_json("/v1/submissions", &json!({"resource": big}))
        .await
        .unwrap();
    assert_error(&r, 413, "TooLarge");
    let r = st
        .client(Some("alice-token"))
        .request(
            "POST",
            "/v1/submissions",
            Some(("application/yaml", vec![b'a'; 70_000])),
        )
        .await
        .unwrap();
    assert_error(&r, 413, "TooLarge");
}

#[tokio::test]
async fn jss_refuses_reserved_namespaces_even_for_a_team_allowed_every_namespace() {
    let fed = Federation::connect().await;
    let st = setup(&fed);
    for ns in ["pinfed-system", "kube-system"] {
        let r = st
            .client(Some("dave-token"))
            .post_json(
                "/v1/submissions",
                &json!({"resource": service("grab", "platform", 1, "10m"), "namespace": ns}),
            )
            .await
            .unwrap();
        assert_error(&r, 422, "Invalid");
        let fields: Vec<&str> = r.body["details"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|d| d["field"].as_str())
            .collect();
        assert_eq!(fields, ["metadata.namespace"], "{}", r.text);
    }
}

#[tokio::test]
async fn jss_answers_422_with_every_field_path_for_an_invalid_resource() {
    let fed = Federation::connect().await;
    let st = setup(&fed);
    let hub = fed.hub();
    let ns = TestNamespace::create(&hub, "jss-invalid").await;
    let mut bad = service("Bad_Name", "ads", -2, "10m");
    bad["spec"]["template"]["spec"]["containers"][0]["name"] = "App!".into();
    bad["spec"]["placement"] = json!({"strategy": "Single", "spread": {"minClusters": 2}});
    let r = st
        .client(Some("alice-token"))
        .post_json(
            "/v1/submissions",
            &json!({"resource": bad, "namespace": ns.name}),
        )
        .await
        .unwrap();
    assert_error(&r, 422, "Invalid");
    let fields: Vec<&str> = r.body["details"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["field"].as_str())
        .collect();
    assert!(fields.contains(&"metadata.name"), "{fields:?}");
    assert!(fields.contains(&"spec.replicas"), "{fields:?}");
    assert!(
        fields
            .iter()
            .any(|f| f.starts_with("spec.template.spec.containers[0]")),
        "{fields:?}"
    );
    assert!(
        r.body["details"].as_array().unwrap().len() >= 3,
        "{}",
        r.text
    );
    // A typo'd field and broken YAML are named too.
    let mut typo = service("typo", "ads", 1, "10m");
    typo["spec"]["replica"] = 3.into();
    let r = st
        .client(Some("alice-token"))
        .post_json(
            "/v1/submissions",
            &json!({"resource": typo, "namespace": ns.name}),
        )
        .await
        .unwrap();
    assert_error(&r, 422, "Invalid");
    assert_eq!(r.body["details"][0]["field"], "spec.replica", "{}", r.text);
    // Overrides: one selecting no member and one patching a path the expansion lacks
    // are refused against the live members, each naming its rule (docs/overrides.md);
    // a privilege a patch adds needs the team's grant.
    let refused = |overrides: Value| {
        let mut s = service("tuned", "ads", 1, "10m");
        s["spec"]["overrides"] = overrides;
        s
    };
    for (overrides, field, words) in [
        (
            json!([{"name": "nowhere", "clusterSelector": {"matchLabels": {"region": "mars"}}, "image": {"tag": "2"}}]),
            "spec.overrides[0]",
            "selects no member",
        ),
        (
            json!([{"name": "deep", "patches": [{"kind": "Deployment", "op": "replace", "path": "/spec/nothing/here", "value": 1}]}]),
            "spec.overrides[0].patches[0].path",
            "does not exist",
        ),
    ] {
        let r = st
            .client(Some("alice-token"))
            .post_json(
                "/v1/submissions",
                &json!({"resource": refused(overrides), "namespace": ns.name}),
            )
            .await
            .unwrap();
        assert_error(&r, 422, "Invalid");
        let detail = r.body["details"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["field"] == field)
            .cloned()
            .unwrap_or_else(|| panic!("no {field} in {}", r.text));
        assert!(detail.to_string().contains(words), "{}", r.text);
    }
    let r = st
        .client(Some("alice-token"))
        .post_json(
            "/v1/submissions",
            &json!({"resource": refused(json!([{"name": "root", "patches": [{"kind": "Deployment", "op": "add",
                "path": "/spec/template/spec/hostNetwork", "value": true}]}])), "namespace": ns.name}),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 403, "{}", r.text);
    assert!(r.text.contains("spec.overrides"), "{}", r.text);
    let r = st
        .client(Some("alice-token"))
        .request(
            "POST",
            &format!("/v1/submissions?namespace={}", ns.name),
            Some((
                "application/yaml",
                b"kind: PinterestService\nspec: [\n".to_vec(),
            )),
        )
        .await
        .unwrap();
    assert_error(&r, 422, "Invalid");
    assert!(r.body["details"][0]["line"].is_number(), "{}", r.text);
    // The CLI prints the same paths and fails.
    let file = st.dir.join("bad.yaml");
    std::fs::write(&file, yaml(&bad)).unwrap();
    let out = std::process::Command::new(pinfed_bin())
        .args(["submit", "-f", &file.display().to_string(), "-n", &ns.name])
        .env("PINFED_SERVER", &st.server)
        .env("PINFED_TOKEN", "alice-token")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("422"), "{err}");
    assert!(err.contains("  spec.replicas: "), "{err}");
    assert!(err.contains("  metadata.name: "), "{err}");
    ns.delete().await;
}

/// Quota at submission is the hub's arithmetic: every quota of the namespace holds and
/// per-cluster caps count too, so what the JSS accepts the hub can place within quota.
#[tokio::test]
async fn jss_checks_per_cluster_caps_of_every_quota_at_submission() {
    let fed = Federation::connect().await;
    let st = setup(&fed);
    let hub = fed.hub();
    let ns = TestNamespace::create(&hub, "jss-caps").await;
    // Totals leave room for 100 pods; the second quota lets each member run one.
    let caps: serde_json::Map<String, Value> = fed
        .member_names()
        .into_iter()
        .map(|m| (m, json!({"pods": "1"})))
        .collect();
    for (name, spec) in [
        ("a-wide", json!({"hard": {"pods": "100"}})),
        ("caps", json!({"hard": {"pods": "100"}, "perCluster": caps})),
    ] {
        let q: FederatedQuota = serde_json::from_value(json!({
            "apiVersion": "federation.pinterest.com/v1alpha1", "kind": "FederatedQuota",
            "metadata": {"name": name}, "spec": spec
        }))
        .unwrap();
        Api::<FederatedQuota>::namespaced(hub.clone(), &ns.name)
            .create(&PostParams::default(), &q)
            .await
            .unwrap();
    }
    let members = fed.member_names().len() as i64;
    let alice = st.client(Some("alice-token"));
    let submit = |name: &'static str, replicas: i64| {
        let alice = alice.clone();
        let ns = ns.name.clone();
        async move {
            alice
                .post_json(
                    "/v1/submissions",
                    &json!({"resource": service(name, "ads", replicas, "100m"), "namespace": ns}),
                )
                .await
                .unwrap()
        }
    };
    // One more replica than members: refused with the engine's reason (after the JSS's
    // watch has seen both quotas).
    let mut r = submit("over", members + 1).await;
    for _ in 0..50 {
        if r.status != 201 {
            break;
        }
        alice
            .delete(&format!("/v1/workloads/{}/service/over", ns.name))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        r = submit("over", members + 1).await;
    }
    assert_error(&r, 409, "QuotaExceeded");
    let d = &r.body["details"][0];
    assert_eq!(
        d["quota"],
        format!("{0}/a-wide+{0}/caps", ns.name),
        "{}",
        r.text
    );
    assert_eq!(d["resource"], "perCluster", "{}", r.text);
    assert_eq!(
        d["requested"], "1",
        "one replica has no cluster: {}",
        r.text
    );
    // One per member fits, and the hub places it whole.
    let r = submit("fits", members).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let path = format!("/v1/workloads/{}/service/fits", ns.name);
    eventually(WAIT, &format!("fits placed whole\n{}", st.logs()), || {
        let alice = alice.clone();
        let path = path.clone();
        async move {
            let r = alice.get(&path).await.unwrap();
            let p = &r.body["status"]["placement"];
            p["unplaced"] == 0
                && p["placements"]
                    .as_array()
                    .is_some_and(|a| a.len() as i64 == members)
        }
    })
    .await;
    ns.delete().await;
}

#[tokio::test]
async fn jss_rejects_a_submission_over_quota_with_requested_used_and_hard() {
    let fed = Federation::connect().await;
    let st = setup(&fed);
    let hub = fed.hub();
    let ns = TestNamespace::create(&hub, "jss-quota").await;
    let q: FederatedQuota = serde_json::from_value(json!({
        "apiVersion": "federation.pinterest.com/v1alpha1", "kind": "FederatedQuota",
        "metadata": {"name": "team-quota"},
        "spec": {"hard": {"cpu": "4", "pods": "20"}}
    }))
    .unwrap();
    Api::<FederatedQuota>::namespaced(hub.clone(), &ns.name)
        .create(&PostParams::default(), &q)
        .await
        .unwrap();
    let alice = st.client(Some("alice-token"));
    // The JSS sees the quota through its watch.
    let too_big = service("too-big", "ads", 5, "1");
    let mut r = alice
        .post_json(
            "/v1/submissions",
            &json!({"resource": too_big, "namespace": ns.name}),
        )
        .await
        .unwrap();
    for _ in 0..50 {
        if r.status != 201 {
            break;
        }
        // Raced the quota's arrival in the cache: take it back and try again.
        alice
            .delete(&format!("/v1/workloads/{}/service/too-big", ns.name))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        r = alice
            .post_json(
                "/v1/submissions",
                &json!({"resource": too_big, "namespace": ns.name}),
            )
            .await
            .unwrap();
    }
    assert_error(&r, 409, "QuotaExceeded");
    let d = &r.body["details"][0];
    assert_eq!(d["quota"], format!("{}/team-quota", ns.name), "{}", r.text);
    assert_eq!(d["resource"], "cpu", "{}", r.text);
    assert_eq!(d["used"], "0", "{}", r.text);
    assert_eq!(d["hard"], "4", "{}", r.text);
    // 5 replicas of 1 cpu plus the runtime sidecars.
    let requested = pinfed::api::quantity::Milli::parse(d["requested"].as_str().unwrap()).unwrap();
    assert!(requested.0 > 5000, "{}", r.text);

    // One that fits is accepted; then the next one counts it as used.
    let small = service("small", "ads", 2, "1");
    let r = alice
        .post_json(
            "/v1/submissions",
            &json!({"resource": small, "namespace": ns.name}),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 201, "{}", r.text);
    let r = alice
        .post_json(
            "/v1/submissions",
            &json!({"resource": service("second", "ads", 2, "1"), "namespace": ns.name}),
        )
        .await
        .unwrap();
    assert_error(&r, 409, "QuotaExceeded");
    let used = pinfed::api::quantity::Milli::parse(r.body["details"][0]["used"].as_str().unwrap())
        .unwrap();
    assert!(used.0 > 2000, "the first service is counted: {}", r.text);
    // Resubmitting the same workload does not count it twice.
    let r = alice
        .post_json(
            "/v1/submissions",
            &json!({"resource": small, "namespace": ns.name}),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text);
    // `pinfed quota` shows hard and requested.
    let out = std::process::Command::new(pinfed_bin())
        .args(["quota"])
        .env("PINFED_SERVER", &st.server)
        .env("PINFED_TOKEN", "alice-token")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.lines()
            .any(|l| l.contains(&format!("{}/team-quota", ns.name)) && l.contains("cpu")),
        "{text}"
    );
    alice
        .delete(&format!("/v1/workloads/{}/service/small", ns.name))
        .await
        .unwrap();
    ns.delete().await;
}

#[tokio::test]
async fn jss_rejects_unknown_artifacts_and_checksum_mismatches() {
    let fed = Federation::connect().await;
    let st = setup(&fed);
    let hub = fed.hub();
    let ns = TestNamespace::create(&hub, "jss-art").await;
    let carol = st.client(Some("carol-token"));
    let r = carol
        .post_json(
            "/v1/submissions",
            &json!({"artifact": {"name": "never-published", "version": "1.0.0"}, "namespace": ns.name}),
        )
        .await
        .unwrap();
    assert_error(&r, 404, "ArtifactNotFound");
    let r = carol
        .post_json(
            "/v1/submissions",
            &json!({"artifact": {"name": "../etc", "version": "1"}, "namespace": ns.name}),
        )
        .await
        .unwrap();
    assert_error(&r, 422, "Invalid");
    assert_eq!(r.body["details"][0]["field"], "artifact.name", "{}", r.text);

    st.publish(
        &fed,
        "tampered",
        "1.0.0",
        &yaml(&service("tampered", "reviewed", 1, "10m")),
    );
    // Someone edits the reviewed file in place.
    let file = st.artifacts.join("tampered/1.0.0/workload.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, text.replace("replicas: 1", "replicas: 50")).unwrap();
    let r = carol
        .post_json(
            "/v1/submissions",
            &json!({"artifact": {"name": "tampered", "version": "1.0.0"}, "namespace": ns.name}),
        )
        .await
        .unwrap();
    assert_error(&r, 422, "ArtifactChecksumMismatch");
    assert!(
        r.body["error"].as_str().unwrap().contains("sha256"),
        "{}",
        r.text
    );
    let api: Api<PinterestService> = Api::namespaced(hub.clone(), &ns.name);
    assert!(api.get_opt("tampered").await.unwrap().is_none());
    // `pinfed artifact verify` finds it too.
    let out = pinfed(
        &fed,
        &[
            "artifact",
            "verify",
            "--store",
            &st.artifacts.display().to_string(),
        ],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("FAIL\ttampered@1.0.0"));
    std::fs::remove_dir_all(st.artifacts.join("tampered")).unwrap();
    ns.delete().await;
}

#[tokio::test]
async fn a_good_submission_runs_is_aggregated_and_delete_cleans_up_the_members() {
    let fed = Federation::connect().await;
    let st = setup(&fed);
    let hub = fed.hub();
    let ns = TestNamespace::create(&hub, "jss-good").await;
    let mut svc = service("web", "reviewed", 6, "50m");
    svc["spec"]["placement"] = json!({"spread": {"minClusters": 3}});
    st.publish(&fed, "web", "1.0.0", &yaml(&svc));
    let carol = st.client(Some("carol-token"));
    let r = carol
        .post_json(
            "/v1/submissions",
            &json!({"artifact": {"name": "web", "version": "1.0.0"}, "namespace": ns.name}),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.body["submittedBy"], "carol");
    assert_eq!(r.body["artifact"], "web@1.0.0");
    assert_eq!(r.body["requested"]["pods"], 6);
    let log = std::fs::read_to_string(&st.daemons.last().unwrap().log).unwrap();
    assert!(
        log.lines().any(|l| l.contains("audit")
            && l.contains("carol")
            && l.contains("Accepted")
            && l.contains(&format!("PinterestService/{}/web", ns.name))),
        "{log}"
    );

    // The hub object records the submitter and is managed by pinfed-jss.
    let ar = ApiResource::erase::<PinterestService>(&());
    let hub_obj = Api::<DynamicObject>::namespaced_with(hub.clone(), &ns.name, &ar)
        .get("web")
        .await
        .unwrap();
    let ann = hub_obj.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        ann.get("pinterest.com/submitted-by").map(String::as_str),
        Some("carol")
    );
    assert!(
        hub_obj
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .any(|m| m.manager.as_deref() == Some("pinfed-jss"))
    );

    // Running and aggregated: the JSS shows 6 available over 3 clusters.
    let path = format!("/v1/workloads/{}/service/web", ns.name);
    eventually(
        WAIT,
        &format!("6 available and Ready through the JSS\n{}", st.logs()),
        || {
            let carol = carol.clone();
            let path = path.clone();
            async move {
                let r = carol.get(&path).await.unwrap();
                let s = &r.body["status"];
                s["availableReplicas"] == 6
                    && s["clusters"].as_array().is_some_and(|c| c.len() == 3)
                    && s["conditions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
            }
        },
    )
    .await;
    let placements: Vec<String> =
        carol.get(&path).await.unwrap().body["status"]["placement"]["placements"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["cluster"].as_str().unwrap().to_string())
            .collect();
    assert_eq!(placements.len(), 3);

    // `pinfed get` shows the per-cluster breakdown; `describe` the submitter; `owners` the team.
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(pinfed_bin())
            .args(args)
            .env("PINFED_SERVER", &st.server)
            .env("PINFED_TOKEN", "carol-token")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pinfed {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let table = cli(&["get", "service", "-n", &ns.name]);
    assert!(table.contains(&format!("{}/web", ns.name)), "{table}");
    assert!(table.contains("6/6 avail"), "{table}");
    for c in &placements {
        assert!(table.contains(&format!("└ {c}")), "{table}");
    }
    let described = cli(&["describe", "service", "web", "-n", &ns.name]);
    assert!(
        described
            .lines()
            .any(|l| l.starts_with("Submitted by:") && l.ends_with(" carol")),
        "{described}"
    );
    assert!(described.contains("web@1.0.0"), "{described}");
    let as_json: Value =
        serde_json::from_str(&cli(&["get", "-n", &ns.name, "-o", "json"])).unwrap();
    assert_eq!(as_json["items"][0]["name"], "web");
    let owners = cli(&["owners"]);
    assert!(
        owners
            .lines()
            .any(|l| l.starts_with("reviewed") && l.contains(&format!("{}/web", ns.name))),
        "{owners}"
    );
    // Expiry: nothing of this namespace is past it until its hub object says so; then
    // `pinfed owners --expired` lists it with where it runs.
    let expired = cli(&["owners", "--expired"]);
    assert!(!expired.contains(&format!("{}/web", ns.name)), "{expired}");
    Api::<DynamicObject>::namespaced_with(hub.clone(), &ns.name, &ar)
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                "pinterest.com/expires-at": "2020-01-01T00:00:00Z"}}})),
        )
        .await
        .unwrap();
    let expired = cli(&["owners", "--expired"]);
    let row = expired
        .lines()
        .find(|l| l.contains(&format!("{}/web", ns.name)))
        .unwrap_or_else(|| panic!("web is not listed as expired:\n{expired}"));
    assert!(row.ends_with("2020-01-01T00:00:00Z (expired)"), "{row}");
    for c in &placements {
        assert!(row.contains(c.as_str()), "{row}");
    }
    let as_json: Value =
        serde_json::from_str(&cli(&["owners", "--expired", "-o", "json"])).unwrap();
    assert!(
        as_json["teams"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|t| t["workloads"].as_array().unwrap())
            .all(|w| w["expired"] == true),
        "{as_json}"
    );
    // The owners report shows other teams' workloads only to admin teams: bob (search,
    // search-* namespaces) does not see this one, gina (governance, admin) does.
    let as_bob = st
        .client(Some("bob-token"))
        .get("/v1/owners")
        .await
        .unwrap();
    assert_eq!(as_bob.status, 200, "{}", as_bob.text);
    assert!(!as_bob.text.contains(&ns.name), "{}", as_bob.text);
    let as_gina = st
        .client(Some("gina-token"))
        .get("/v1/owners")
        .await
        .unwrap();
    assert!(as_gina.text.contains(&ns.name), "{}", as_gina.text);

    // Delete through the JSS: the slices go from every member, then the hub object.
    let out = std::process::Command::new(pinfed_bin())
        .args(["delete", "service", "web", "-n", &ns.name])
        .env("PINFED_SERVER", &st.server)
        .env("PINFED_TOKEN", "alice-token")
        .output()
        .unwrap();
    assert!(!out.status.success(), "alice is not in team reviewed");
    assert!(String::from_utf8_lossy(&out.stderr).contains("403"));
    cli(&["delete", "service", "web", "-n", &ns.name]);
    for c in &placements {
        let member = fed.client(c);
        let ns_name = ns.name.clone();
        let ar = ar.clone();
        eventually(
            WAIT,
            &format!("slice in {c} removed\n{}", st.logs()),
            move || {
                let api = Api::<DynamicObject>::namespaced_with(member.clone(), &ns_name, &ar);
                async move { matches!(api.get_opt("web").await, Ok(None)) }
            },
        )
        .await;
    }
    eventually(WAIT, "the hub resource to be gone", || {
        let carol = carol.clone();
        let path = path.clone();
        async move { carol.get(&path).await.unwrap().status == 404 }
    })
    .await;
    ns.delete().await;
}

#[tokio::test]
async fn clusters_through_the_cli_and_as_a_kubectl_plugin() {
    let fed = Federation::connect().await;
    let st = setup(&fed);
    let r = st
        .client(Some("bob-token"))
        .get("/v1/clusters")
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text);
    let names: Vec<&str> = r.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    for m in fed.member_names() {
        assert!(names.contains(&m.as_str()), "{names:?}");
    }
    // kubectl finds `kubectl-pinfed` on PATH and runs it; the wrapper runs pinfed.
    let kubectl_dir = std::env::var_os("HOME")
        .map(|h| PathBuf::from(h).join(".cache/pinfed/bin"))
        .filter(|d| d.join("kubectl").is_file())
        .expect("kubectl in ~/.cache/pinfed/bin (the e2e toolchain builds it)");
    let plugin_dir = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/kubectl-plugin"
    ));
    let bin_dir = pinfed_bin().parent().unwrap().to_path_buf();
    let path = std::env::join_paths([
        plugin_dir,
        bin_dir,
        kubectl_dir.clone(),
        "/usr/bin".into(),
        "/bin".into(),
    ])
    .unwrap();
    // On a topology just brought up, members turn Ready once the hub and agents of the
    // setup have run a heartbeat: ask again until they have (or the wait ends).
    let run = || {
        std::process::Command::new(kubectl_dir.join("kubectl"))
            .args(["pinfed", "clusters"])
            .env("PATH", &path)
            .env("PINFED_SERVER", &st.server)
            .env("PINFED_TOKEN", "bob-token")
            .output()
            .unwrap()
    };
    let all_ready = |stdout: &str| {
        fed.member_names().iter().all(|m| {
            stdout
                .lines()
                .any(|l| l.starts_with(m) && l.contains("True"))
        })
    };
    let deadline = std::time::Instant::now() + WAIT;
    let mut out = run();
    while out.status.success()
        && !all_ready(&String::from_utf8_lossy(&out.stdout))
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_secs(1)).await;
        out = run();
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kubectl pinfed clusters: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.starts_with("NAME"), "{stdout}");
    for m in fed.member_names() {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(&m) && l.contains("True")),
            "{m} Ready in:\n{stdout}"
        );
    }
}

#[tokio::test]
async fn tls_with_a_generated_certificate_and_no_plain_http_off_loopback() {
    let fed = Federation::connect().await;
    let st = setup(&fed);
    let cert =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()]).unwrap();
    let dir = st.dir.join("tls");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("tls.crt"), cert.cert.pem()).unwrap();
    std::fs::write(dir.join("tls.key"), cert.key_pair.serialize_pem()).unwrap();
    let tls_cert = dir.join("tls.crt").display().to_string();
    let tls_key = dir.join("tls.key").display().to_string();
    let OwnJss {
        api, daemon: jss, ..
    } = st.own_jss(
        &fed,
        "jss-tls",
        &["--tls-cert", &tls_cert, "--tls-key", &tls_key],
    );
    let https = JssClient::new(
        &format!("https://{api}"),
        Some("bob-token".into()),
        Some(&dir.join("tls.crt")),
    )
    .unwrap();
    let r = https.get("/v1/clusters").await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text);
    let r = JssClient::new(&format!("https://{api}"), None, Some(&dir.join("tls.crt")))
        .unwrap()
        .get("/v1/clusters")
        .await
        .unwrap();
    assert_eq!(r.status, 401);
    // Plain HTTP to the TLS port gets no answer from the API.
    let plain = JssClient::new(&format!("http://{api}"), Some("bob-token".into()), None).unwrap();
    if let Ok(r) = plain.get("/v1/clusters").await {
        assert_ne!(r.status, 200, "{}", r.text);
    }
    // The CLI over TLS.
    let out = std::process::Command::new(pinfed_bin())
        .args([
            "clusters",
            "-o",
            "json",
            "--server",
            &format!("https://{api}"),
        ])
        .arg("--ca-cert")
        .arg(dir.join("tls.crt"))
        .env("PINFED_TOKEN", "bob-token")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    jss.kill();

    // Off loopback without a certificate: refused at start, with the reason.
    let out = pinfed(
        &fed,
        &[
            "jss",
            "--listen",
            "0.0.0.0:0",
            "--tokens",
            &st.dir.join("tokens.yaml").display().to_string(),
            "--artifacts",
            &st.artifacts.display().to_string(),
        ],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not a loopback address") && err.contains("--tls-cert"),
        "{err}"
    );
}

/// A ServiceAccount `name` in the namespace of `sas` (made if missing) and a token for it
/// with `audiences` (`[]`: the API server's), valid ten minutes.
async fn service_account_token(
    sas: &Api<k8s_openapi::api::core::v1::ServiceAccount>,
    name: &str,
    audiences: Value,
) -> String {
    use k8s_openapi::api::authentication::v1::TokenRequest;
    if sas.get_opt(name).await.unwrap().is_none() {
        sas.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap(),
        )
        .await
        .unwrap();
    }
    let tr = sas
        .create_token_request(
            name,
            &PostParams::default(),
            &serde_json::from_value::<TokenRequest>(
                json!({"spec": {"audiences": audiences, "expirationSeconds": 600}}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    serde_json::to_value(tr.status).unwrap()["token"]
        .as_str()
        .expect("a token")
        .to_string()
}

#[tokio::test]
async fn tokens_the_hub_authenticates_are_accepted_with_teams_from_their_groups() {
    let fed = Federation::connect().await;
    let st = setup(&fed);
    let hub = fed.hub();
    let ns = TestNamespace::create(&hub, "jss-sa").await;
    let sas = Api::namespaced(hub.clone(), &ns.name);
    let token = service_account_token(&sas, "ci", json!([])).await;
    let sa = st.client(Some(&token));
    // Authenticated by the hub, in team service-accounts by its group.
    let r = sa.get(&format!("/v1/workloads/{}", ns.name)).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text);
    let r = sa.get("/v1/workloads/jss-other").await.unwrap();
    assert_error(&r, 403, "Forbidden");
    let r = st
        .client(Some(&format!("{token}x")))
        .get("/v1/clusters")
        .await
        .unwrap();
    assert_error(&r, 401, "Unauthenticated");
    ns.delete().await;
}

/// A UI session of a token TokenReview vouched for ends once the hub stops vouching for
/// it (its ServiceAccount deleted), within `--ui-session-review-secs`; a session of the
/// token file's lives on.
#[tokio::test]
async fn a_ui_session_ends_when_the_hub_no_longer_vouches_for_its_token() {
    use k8s_openapi::api::core::v1::ServiceAccount;
    let fed = Federation::connect().await;
    let st = setup(&fed);
    let hub = fed.hub();
    let ns = TestNamespace::create(&hub, "jss-sa-ui").await;
    let sas: Api<ServiceAccount> = Api::namespaced(hub.clone(), &ns.name);
    let token = service_account_token(&sas, "viewer", json!([])).await;
    let OwnJss {
        api, daemon: jss, ..
    } = st.own_jss(
        &fed,
        "jss-review",
        &["--token-review", "--ui-session-review-secs", "1"],
    );
    let login = |token: &str| ui_login(&api, token);
    let fleet = |cookie: &str| raw_get_with(&api, "/ui/fleet", &[("Cookie", cookie)]).0;
    let reviewed = login(&token);
    let from_file = login("alice-token");
    assert_eq!(
        fleet(&reviewed),
        200,
        "the reviewed token's session serves pages"
    );
    // A few reviews while the token is good: the session stays.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        fleet(&reviewed),
        200,
        "a token still vouched for keeps its session"
    );
    sas.delete("viewer", &Default::default()).await.unwrap();
    eventually(
        Duration::from_secs(30),
        "the session ends once TokenReview no longer vouches for its token",
        || async { fleet(&reviewed) == 303 },
    )
    .await;
    assert_eq!(
        fleet(&from_file),
        200,
        "the token file's session is not reviewed"
    );
    let log = std::fs::read_to_string(&jss.log).unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains("audit") && l.contains("Ended") && l.contains("session")),
        "{log}"
    );
    jss.kill();
    ns.delete().await;
}

/// With `--token-audience`, TokenReview asks for that audience: a hub token issued for it
/// is accepted, one issued for the API server's default audience is refused (401), and a
/// refused token is refused again from the JSS's memory.
#[tokio::test]
async fn a_token_review_audience_accepts_only_tokens_issued_for_it() {
    let fed = Federation::connect().await;
    let st = setup(&fed);
    let hub = fed.hub();
    let ns = TestNamespace::create(&hub, "jss-sa-aud").await;
    let sas = Api::namespaced(hub.clone(), &ns.name);
    let for_jss = service_account_token(&sas, "ci", json!(["pinfed-jss-e2e"])).await;
    let for_api_server = service_account_token(&sas, "ci", json!([])).await;
    let OwnJss {
        api, daemon: jss, ..
    } = st.own_jss(
        &fed,
        "jss-audience",
        &["--token-review", "--token-audience", "pinfed-jss-e2e"],
    );
    let client =
        |t: &str| JssClient::new(&format!("http://{api}"), Some(t.to_string()), None).unwrap();
    let r = client(&for_jss)
        .get(&format!("/v1/workloads/{}", ns.name))
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}\n{}", r.text, jss.log_tail());
    for _ in 0..2 {
        let r = client(&for_api_server)
            .get(&format!("/v1/workloads/{}", ns.name))
            .await
            .unwrap();
        assert_error(&r, 401, "Unauthenticated");
    }
    // The shared JSS (no audience) takes the API server's token.
    let r = st
        .client(Some(&for_api_server))
        .get(&format!("/v1/workloads/{}", ns.name))
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text);
    jss.kill();
    ns.delete().await;
}

#[tokio::test]
async fn artifacts_are_listed_to_their_owner_teams_and_to_admin_teams() {
    let fed = Federation::connect().await;
    let st = setup(&fed);
    st.publish(
        &fed,
        "scoped-ads",
        "1.0.0",
        &yaml(&service("scoped", "ads", 1, "10m")),
    );
    st.publish(
        &fed,
        "scoped-search",
        "1.0.0",
        &yaml(&service("scoped", "search", 1, "10m")),
    );
    let names = |token: &'static str| async move {
        let r = st.client(Some(token)).get("/v1/artifacts").await.unwrap();
        assert_eq!(r.status, 200, "{}", r.text);
        r.body["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["name"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    let alice = names("alice-token").await;
    assert!(alice.contains(&"scoped-ads".to_string()), "{alice:?}");
    assert!(!alice.contains(&"scoped-search".to_string()), "{alice:?}");
    let bob = names("bob-token").await;
    assert!(bob.contains(&"scoped-search".to_string()), "{bob:?}");
    assert!(!bob.contains(&"scoped-ads".to_string()), "{bob:?}");
    // governance is an admin team: every artifact.
    let gina = names("gina-token").await;
    assert!(
        gina.contains(&"scoped-ads".to_string()) && gina.contains(&"scoped-search".to_string()),
        "{gina:?}"
    );
}

/// One raw HTTP/1.1 request on an open connection; the status code, or `None` when the
/// server closed the connection without an answer.
fn raw_get(stream: &mut std::net::TcpStream, path: &str) -> Option<u16> {
    use std::io::{Read, Write};
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: jss\r\n\r\n");
    if stream.write_all(req.as_bytes()).is_err() {
        return None;
    }
    let mut buf = [0u8; 4096];
    let n = stream.read(&mut buf).ok()?;
    let head = String::from_utf8_lossy(&buf[..n]);
    head.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()
}

/// One GET with extra headers on its own connection: the status and the body.
fn raw_get_with(addr: &str, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    raw_request(
        addr,
        &format!(
            "GET {path} HTTP/1.1\r\nHost: jss\r\nConnection: close\r\n{}\r\n",
            header_lines(headers)
        ),
    )
}

/// A raw `POST` of a form with `headers`: the status and the whole response.
fn raw_post_form(addr: &str, path: &str, body: &str, headers: &[(&str, &str)]) -> (u16, String) {
    raw_request(
        addr,
        &format!(
            "POST {path} HTTP/1.1\r\nHost: jss\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n{}\r\n{body}",
            body.len(),
            header_lines(headers)
        ),
    )
}

fn header_lines(headers: &[(&str, &str)]) -> String {
    headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect()
}

/// `request` on a connection of its own: the status and the whole response.
fn raw_request(addr: &str, request: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    let _ = c.read_to_string(&mut out);
    let status = out
        .strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.get(..3))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, out)
}

/// Logs in at the UI of the JSS at `addr` with `token`: the session cookie (`name=value`).
fn ui_login(addr: &str, token: &str) -> String {
    let (status, out) = raw_post_form(
        addr,
        "/ui/login",
        &format!("token={token}&next=%2Fui%2Ffleet"),
        &[],
    );
    assert_eq!(status, 303, "a login is sent on: {out}");
    header_of(&out, "set-cookie")
        .and_then(|v| v.split(';').next())
        .unwrap_or_else(|| panic!("no session cookie: {out}"))
        .to_string()
}

/// A response header's value (its name in any case).
fn header_of<'a>(response: &'a str, name: &str) -> Option<&'a str> {
    let prefix = format!("{}: ", name.to_ascii_lowercase());
    response
        .lines()
        .take_while(|l| !l.is_empty())
        .find(|l| l.to_ascii_lowercase().starts_with(&prefix))
        .map(|l| l[prefix.len()..].trim())
}

/// A UI session made by one JSS replica is served by another with the same session key
/// (the session is sealed in its cookie), with the same CSRF token, and an action's
/// message made on one shows on the other; a replica with another key sends it to log in.
#[tokio::test]
async fn a_ui_session_and_its_messages_are_served_by_every_replica_with_the_key() {
    use std::os::unix::fs::PermissionsExt;
    let fed = Federation::connect().await;
    let st = setup(&fed);
    let hub = fed.hub();
    let ns = TestNamespace::create(&hub, "jss-sessions").await;
    let key = st.dir.join("ui-session.key");
    std::fs::write(&key, pinfed::jss::ui::session::random_token().unwrap()).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let key = key.display().to_string();
    let flags = ["--ui-session-key-file", key.as_str()];
    let a = st.own_jss(&fed, "jss-sessions-a", &flags);
    let b = st.own_jss(&fed, "jss-sessions-b", &flags);
    let other = st.own_jss(&fed, "jss-sessions-other", &[]);
    let submitted = JssClient::new(
        &format!("http://{}", a.api),
        Some("alice-token".into()),
        None,
    )
    .unwrap()
    .post_json(
        "/v1/submissions",
        &json!({"resource": service("web", "ads", 1, "10m"), "namespace": ns.name}),
    )
    .await
    .unwrap();
    assert_eq!(submitted.status, 201, "{}", submitted.text);
    // Logged in at a.
    let cookie = ui_login(&a.api, "alice-token");
    assert!(!cookie.contains("alice"), "the cookie is sealed: {cookie}");
    // b serves the page, with the session's CSRF token in its forms.
    let page = format!("/ui/workloads/{}/service/web", ns.name);
    let (status, html) = raw_get_with(&b.api, &page, &[("Cookie", &cookie)]);
    assert_eq!(
        status,
        200,
        "b serves a's session\n{html}\n{}",
        b.daemon.log_tail()
    );
    let csrf = html
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap_or_else(|| panic!("no CSRF token in the page: {html}"))
        .to_string();
    // An action at b (a rebalance preview): its message shows on a's page.
    let (status, out) = raw_post_form(
        &b.api,
        &format!("{page}/rebalance"),
        &format!("csrf={csrf}&dry_run=true"),
        &[("Cookie", &cookie)],
    );
    assert_eq!(status, 303, "{out}");
    let back = header_of(&out, "location").unwrap_or_default().to_string();
    assert!(back.starts_with(&format!("{page}?flash=")), "{out}");
    let (status, html) = raw_get_with(&a.api, &back, &[("Cookie", &cookie)]);
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("id=\"flash\""), "a shows b's message: {html}");
    // The message is the session's own: the same address shows nothing to another.
    let bobs = ui_login(&a.api, "bob-token");
    let (_, html) = raw_get_with(&a.api, &back, &[("Cookie", &bobs)]);
    assert!(
        !html.contains("id=\"flash\""),
        "bob sees alice's message: {html}"
    );
    // A replica with another key: not a session it can open.
    let (status, _) = raw_get_with(&other.api, &page, &[("Cookie", &cookie)]);
    assert_eq!(
        status, 303,
        "a replica without the key sends the browser to log in"
    );
    ns.delete().await;
}

/// Two JSS replicas admit into one namespace with a quota one at a time: submissions that
/// each fit alone but not together, sent at once to different replicas, are one accepted
/// and one refused (409 QuotaExceeded), in every round. (Each replica alone serialized
/// only its own: both found the room free.)
#[tokio::test]
async fn two_jss_replicas_never_both_admit_the_last_room_of_a_quota() {
    let fed = Federation::connect().await;
    let st = setup(&fed);
    let hub = fed.hub();
    let b = st.own_jss(&fed, "jss-replica-b", &[]);
    let replicas = [
        st.client(Some("alice-token")),
        JssClient::new(
            &format!("http://{}", b.api),
            Some("alice-token".into()),
            None,
        )
        .unwrap(),
    ];
    for round in 0..3 {
        let ns = TestNamespace::create(&hub, "jss-race").await;
        let q: FederatedQuota = serde_json::from_value(json!({
            "apiVersion": "federation.pinterest.com/v1alpha1", "kind": "FederatedQuota",
            "metadata": {"name": "team"},
            "spec": {"hard": {"pods": "3"}},
        }))
        .unwrap();
        Api::<FederatedQuota>::namespaced(hub.clone(), &ns.name)
            .create(&PostParams::default(), &q)
            .await
            .unwrap();
        // Both replicas' caches have the quota.
        for (i, r) in replicas.iter().enumerate() {
            eventually(
                Duration::from_secs(20),
                &format!("replica {i} sees the quota of {}", ns.name),
                || async { r.get("/v1/quotas").await.unwrap().text.contains(&ns.name) },
            )
            .await;
        }
        let submit = |i: usize| {
            let body = json!({"resource": service(&format!("race-{i}"), "ads", 2, "10m"), "namespace": ns.name});
            let r = &replicas[i];
            async move { r.post_json("/v1/submissions", &body).await.unwrap() }
        };
        let (a, b) = tokio::join!(submit(0), submit(1));
        let mut codes = [a.status, b.status];
        codes.sort();
        assert_eq!(
            codes,
            [201, 409],
            "round {round}: two pods of each fit one at a time into 3\n{}\n{}",
            a.text,
            b.text
        );
        let refused = if a.status == 409 { &a } else { &b };
        assert_eq!(refused.body["reason"], "QuotaExceeded", "{}", refused.text);
        ns.delete().await;
    }
    // The locks were given back: none is left on the hub.
    eventually(
        Duration::from_secs(10),
        "no admission lock left",
        || async {
            let leases = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(
                hub.clone(),
                "pinfed-system",
            )
            .list(&Default::default())
            .await
            .unwrap();
            !leases.items.iter().any(|l| {
                l.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("pinfed-jss-admission-jss-race"))
            })
        },
    )
    .await;
    drop(b);
}

/// The workload lists come in pages with `limit` and `continue`: every workload once, in
/// the order of the unpaged list, across the kinds' boundary; a token the JSS did not
/// issue and a limit out of bounds are 400; the CLI reads every page.
#[tokio::test]
async fn workload_lists_page_with_limit_and_continue() {
    let fed = Federation::connect().await;
    let st = setup(&fed);
    let hub = fed.hub();
    let ns = TestNamespace::create(&hub, "jss-pages").await;
    let ar = kube::core::ApiResource::erase::<pinfed::api::service::PinterestService>(&());
    let api = Api::<kube::api::DynamicObject>::namespaced_with(hub.clone(), &ns.name, &ar);
    for i in 0..5 {
        let o: kube::api::DynamicObject =
            serde_json::from_value(service(&format!("page-{i}"), "ads", 1, "10m")).unwrap();
        api.create(&PostParams::default(), &o).await.unwrap();
    }
    let alice = st.client(Some("alice-token"));
    let names = |r: &pinfed::jss::client::Reply| -> Vec<String> {
        r.body["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["name"].as_str().unwrap().to_string())
            .collect()
    };
    let all = alice
        .get(&format!("/v1/workloads/{}", ns.name))
        .await
        .unwrap();
    assert_eq!(all.status, 200, "{}", all.text);
    assert!(all.body.get("continue").is_none(), "{}", all.text);
    let whole = names(&all);
    assert_eq!(whole.len(), 5, "{}", all.text);
    for limit in [2, 5] {
        let (mut seen, mut pages, mut next) = (Vec::new(), 0, None::<String>);
        loop {
            let path = match &next {
                None => format!("/v1/workloads/{}?limit={limit}", ns.name),
                Some(t) => format!("/v1/workloads/{}?limit={limit}&continue={t}", ns.name),
            };
            let r = alice.get(&path).await.unwrap();
            assert_eq!(r.status, 200, "{path}: {}", r.text);
            let got = names(&r);
            assert!(got.len() <= limit, "{path}: {} items", got.len());
            seen.extend(got);
            pages += 1;
            assert!(pages <= 10, "pages never end: {seen:?}");
            match r.body["continue"].as_str() {
                Some(t) => next = Some(t.to_string()),
                None => break,
            }
        }
        assert_eq!(seen, whole, "limit {limit}: every workload once, in order");
        // Five services at two a page: 2, 2, then the last with the other (empty) kinds;
        // at five a page, the services fill the first and the other kinds the second.
        assert_eq!(pages, if limit == 2 { 3 } else { 2 }, "limit {limit}");
    }
    for bad in ["limit=0", "limit=5001", "limit=2&continue=not-ours"] {
        let r = alice
            .get(&format!("/v1/workloads/{}?{bad}", ns.name))
            .await
            .unwrap();
        assert_error(&r, 400, "BadRequest");
    }
    // The CLI follows the pages (500 at a time): all five.
    let (ok, out, err) = cli_as(st, "alice-token", &["get", "-n", &ns.name, "-o", "json"]);
    assert!(ok, "{err}");
    let listed: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        listed["items"].as_array().map(Vec::len),
        Some(5),
        "{listed}"
    );
    ns.delete().await;
}

/// Submissions reserve their share of the memory budget before their body is read: a
/// slow 1 MiB upload that holds all of it makes the next submission wait, then 503 Busy
/// with Retry-After (counted); once the upload is gone, a submission passes again.
#[tokio::test]
async fn a_submission_past_the_memory_budget_waits_then_is_told_busy() {
    use std::io::Write;
    let fed = Federation::connect().await;
    let st = setup(&fed);
    let OwnJss {
        api,
        metrics,
        daemon: jss,
    } = st.own_jss(
        &fed,
        "jss-memory",
        &["--memory-budget-mib", "1", "--request-timeout-secs", "6"],
    );
    // Declares 1 MiB (8 MiB to parse: the whole 1 MiB budget) and sends a little of it.
    let mut slow = std::net::TcpStream::connect(&api).unwrap();
    write!(
        slow,
        "POST /v1/submissions?dryRun=true HTTP/1.1\r\nHost: jss\r\nAuthorization: Bearer alice-token\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{{\"resource\": "
    )
    .unwrap();
    slow.flush().unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let client =
        JssClient::new(&format!("http://{api}"), Some("alice-token".into()), None).unwrap();
    let small = json!({"resource": service("budget", "ads", 1, "10m"), "namespace": "jss-budget"});
    let started = std::time::Instant::now();
    let r = client
        .post_json("/v1/submissions?dryRun=true", &small)
        .await
        .unwrap();
    let waited = started.elapsed();
    assert_error(&r, 503, "Busy");
    assert!(r.text.contains("memory budget"), "{}", r.text);
    assert!(
        waited >= Duration::from_millis(2_500),
        "answered Busy after {waited:?}, without waiting half the request timeout"
    );
    let m = support::http_get(&format!("http://{metrics}/metrics")).await;
    assert!(
        m.lines()
            .any(|l| l.starts_with("pinfed_jss_memory_waits_total ") && !l.ends_with(" 0")),
        "{m}"
    );
    // The upload goes: its share comes back and the next submission is read.
    drop(slow);
    eventually(
        Duration::from_secs(10),
        "a submission passes the budget again",
        || async {
            let r = client
                .post_json("/v1/submissions?dryRun=true", &small)
                .await
                .unwrap();
            r.status != 503
        },
    )
    .await;
    drop(jss);
}

/// Each authenticated principal has a request budget of its own: past it, 429 with
/// Retry-After for that user only (another user on the same address is served), counted
/// in the metrics, and the budget comes back at its rate.
#[tokio::test]
async fn an_authenticated_principal_past_its_request_budget_gets_429_and_others_do_not() {
    let fed = Federation::connect().await;
    let st = setup(&fed);
    let OwnJss {
        api,
        metrics,
        daemon: jss,
    } = st.own_jss(
        &fed,
        "jss-principal",
        &["--principal-burst", "3", "--principal-per-sec", "0.5"],
    );
    let get = |token: &str| {
        let client =
            JssClient::new(&format!("http://{api}"), Some(token.to_string()), None).unwrap();
        async move { client.get("/v1/clusters").await.unwrap() }
    };
    for i in 0..3 {
        let r = get("alice-token").await;
        assert_eq!(r.status, 200, "alice's request {i}: {}", r.text);
    }
    let r = get("alice-token").await;
    assert_error(&r, 429, "TooManyRequests");
    assert!(
        r.body["error"].as_str().unwrap().contains("alice"),
        "{}",
        r.text
    );
    // The same address, another user: served.
    let r = get("bob-token").await;
    assert_eq!(
        r.status, 200,
        "bob is limited by alice's budget: {}",
        r.text
    );
    // The answer says when to come back.
    let (code, raw) = raw_get_with(
        &api,
        "/v1/clusters",
        &[("Authorization", "Bearer alice-token")],
    );
    assert_eq!(code, 429, "{raw}");
    let retry: u64 = raw
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("retry-after: ")
                .map(str::to_string)
        })
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no Retry-After: {raw}"));
    assert!(
        (1..=3).contains(&retry),
        "Retry-After {retry} at 0.5/s: {raw}"
    );
    // The CLI says it too, naming the user.
    let (ok, _, err) = cli_at(
        &format!("http://{api}"),
        "alice-token",
        &["get", "-n", "default"],
    );
    assert!(!ok && err.contains("429") && err.contains("alice"), "{err}");
    // At 0.5/s one request is allowed again within about two seconds.
    tokio::time::sleep(Duration::from_millis(2_200)).await;
    let r = get("alice-token").await;
    assert_eq!(
        r.status, 200,
        "alice's budget did not come back: {}",
        r.text
    );
    let m = support::http_get(&format!("http://{metrics}/metrics")).await;
    assert!(
        m.lines()
            .any(|l| l.starts_with("pinfed_jss_principal_limited_total ") && !l.ends_with(" 0")),
        "{m}"
    );
    drop(jss);
}

#[tokio::test]
async fn failed_authentications_are_rate_limited_per_address_and_connections_are_capped() {
    let fed = Federation::connect().await;
    let st = setup(&fed);
    let OwnJss {
        api,
        metrics,
        daemon: jss,
    } = st.own_jss(
        &fed,
        "jss-limits",
        &[
            "--token-review",
            "--failed-auth-burst",
            "3",
            "--failed-auth-per-sec",
            "0.5",
            "--max-connections-per-ip",
            "4",
        ],
    );
    let get = |token: &str| {
        let client =
            JssClient::new(&format!("http://{api}"), Some(token.to_string()), None).unwrap();
        async move { client.get("/v1/clusters").await.unwrap() }
    };
    // Three guesses are answered 401 (each one a TokenReview); the fourth is held back.
    for i in 0..3 {
        let r = get(&format!("guess-{i}")).await;
        assert_error(&r, 401, "Unauthenticated");
    }
    let r = get("guess-3").await;
    assert_error(&r, 429, "TooManyFailedAuthentications");
    assert!(
        r.body["error"].as_str().unwrap().contains("127.0.0.1"),
        "{}",
        r.text
    );
    // A token known good still passes from the same address.
    let r = get("alice-token").await;
    assert_eq!(r.status, 200, "{}", r.text);
    // A peer that is no trusted proxy cannot pick another bucket with X-Forwarded-For.
    let (code, body) = raw_get_with(
        &api,
        "/v1/clusters",
        &[
            ("Authorization", "Bearer guess-xff"),
            ("X-Forwarded-For", "198.51.100.1"),
        ],
    );
    assert_eq!(code, 429, "{body}");
    assert!(body.contains("127.0.0.1"), "{body}");
    // At 0.5/s, one more guess is allowed two seconds later.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_error(&get("guess-4").await, 401, "Unauthenticated");
    assert_error(&get("guess-5").await, 429, "TooManyFailedAuthentications");
    let m = support::http_get(&format!("http://{metrics}/metrics")).await;
    assert!(
        m.lines()
            .any(|l| l.starts_with("pinfed_jss_failed_auth_limited_total ") && !l.ends_with(" 0")),
        "{m}"
    );

    // Four connections from one address are served; a fifth is closed unanswered, and a
    // slot given back is served again. (The clients above have closed theirs.)
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut held: Vec<std::net::TcpStream> = (0..4)
        .map(|_| std::net::TcpStream::connect(&api).unwrap())
        .collect();
    for (i, c) in held.iter_mut().enumerate() {
        assert_eq!(raw_get(c, "/healthz"), Some(200), "connection {i}");
    }
    let mut fifth = std::net::TcpStream::connect(&api).unwrap();
    assert_eq!(
        raw_get(&mut fifth, "/healthz"),
        None,
        "a fifth connection answered"
    );
    drop(held.pop());
    let mut again = None;
    for _ in 0..20 {
        let mut c = std::net::TcpStream::connect(&api).unwrap();
        again = raw_get(&mut c, "/healthz");
        if again.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(again, Some(200), "a slot given back is served");
    let m = support::http_get(&format!("http://{metrics}/metrics")).await;
    assert!(
        m.lines()
            .any(|l| l.starts_with("pinfed_jss_connections_refused_total ") && !l.ends_with(" 0")),
        "{m}"
    );
    jss.kill();

    // Behind a trusted proxy (here: loopback), each forwarded client has its own bucket,
    // and the proxy's connections are capped only by the total.
    let OwnJss {
        api: proxied,
        daemon: jss,
        ..
    } = st.own_jss(
        &fed,
        "jss-proxied",
        &[
            "--token-review",
            "--failed-auth-burst",
            "2",
            "--failed-auth-per-sec",
            "0.01",
            "--max-connections-per-ip",
            "2",
            "--trusted-proxies",
            "127.0.0.1,fd00::/8",
        ],
    );
    let guess = |client: &str, i: usize| {
        raw_get_with(
            &proxied,
            "/v1/clusters",
            &[
                ("Authorization", &format!("Bearer proxied-guess-{i}")),
                // What a client claims stands left of what the proxy saw.
                ("X-Forwarded-For", &format!("203.0.113.66, {client}")),
            ],
        )
    };
    assert_eq!(guess("198.51.100.1", 0).0, 401);
    assert_eq!(guess("198.51.100.1", 1).0, 401);
    let (code, body) = guess("198.51.100.1", 2);
    assert_eq!(code, 429, "{body}");
    assert!(
        body.contains("198.51.100.1"),
        "the forwarded client is named: {body}"
    );
    assert_eq!(
        guess("198.51.100.2", 3).0,
        401,
        "another client behind the same proxy keeps its own bucket"
    );
    let held: Vec<std::net::TcpStream> = (0..4)
        .map(|_| std::net::TcpStream::connect(&proxied).unwrap())
        .collect();
    let mut fifth = std::net::TcpStream::connect(&proxied).unwrap();
    assert_eq!(
        raw_get(&mut fifth, "/healthz"),
        Some(200),
        "a trusted proxy's connections are not capped per address"
    );
    drop(held);
    jss.kill();
}

/// `pinfed ARGS` against the test's JSS as the holder of `token`: whether it succeeded,
/// its stdout and its stderr.
fn cli_as(st: &Setup, token: &str, args: &[&str]) -> (bool, String, String) {
    cli_at(&st.server, token, args)
}

/// `pinfed ARGS` against the JSS at `server` (a test's own) as `token`'s user.
fn cli_at(server: &str, token: &str, args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(pinfed_bin())
        .args(args)
        .env("PINFED_SERVER", server)
        .env("PINFED_TOKEN", token)
        .env_remove("PINFED_NAMESPACE")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[tokio::test]
async fn rollouts_through_the_jss_status_approve_pause_resume_history_and_undo() {
    let started = std::time::Instant::now();
    let fed = Federation::connect().await;
    let st = setup(&fed);
    let hub = fed.hub();
    let ns = TestNamespace::create(&hub, "jss-rollout").await;
    let alice = st.client(Some("alice-token"));
    let mut svc = service("web", "ads", 3, "10m");
    svc["spec"]["placement"] = json!({"spread": {"minClusters": 3}});
    svc["spec"]["rollout"] = json!({
        // `count`, not a name: the stage takes a member whatever placement chose.
        "stages": [{"name": "first", "approval": true, "count": 1}, {"name": "rest"}],
        "progressDeadlineSeconds": 60,
    });
    let submit = |svc: Value, code: u16| {
        let alice = alice.clone();
        let ns = ns.name.clone();
        async move {
            let r = alice
                .post_json(
                    "/v1/submissions",
                    &json!({"resource": svc, "namespace": ns}),
                )
                .await
                .unwrap();
            assert_eq!(r.status, code, "{}", r.text);
        }
    };
    let rollout_path = format!("/v1/workloads/{}/service/web/rollout", ns.name);
    let rollout = || {
        let alice = alice.clone();
        let path = rollout_path.clone();
        async move {
            let r = alice.get(&path).await.unwrap();
            assert_eq!(r.status, 200, "{}", r.text);
            r.body["status"].clone()
        }
    };
    let ar = ApiResource::erase::<PinterestService>(&());
    let hub_api = Api::<DynamicObject>::namespaced_with(hub.clone(), &ns.name, &ar);
    let annotation = |key: &'static str| {
        let hub_api = hub_api.clone();
        async move {
            hub_api
                .get("web")
                .await
                .unwrap()
                .metadata
                .annotations
                .unwrap_or_default()
                .get(key)
                .cloned()
        }
    };

    // Bad policies are refused with the field: a stage naming a member the federation does
    // not have, a percentage over 100 and a soak longer than the deadline.
    for (policy, field) in [
        (
            json!({"stages": [{"clusters": ["no-such-member"]}, {}]}),
            "spec.rollout.stages[0].clusters",
        ),
        (
            json!({"stages": [{"percent": 150}, {}]}),
            "spec.rollout.stages[0].percent",
        ),
        (
            json!({"stages": [{"count": 1, "soakSeconds": 900}, {}], "progressDeadlineSeconds": 60}),
            "spec.rollout.stages[0].soakSeconds",
        ),
        (
            json!({"healthCheck": "member.(readyReplicas"}),
            "spec.rollout.healthCheck",
        ),
    ] {
        let mut bad = svc.clone();
        bad["spec"]["rollout"] = policy;
        let r = alice
            .post_json(
                "/v1/submissions",
                &json!({"resource": bad, "namespace": ns.name}),
            )
            .await
            .unwrap();
        assert_eq!(r.status, 422, "{}", r.text);
        assert!(
            r.body["details"]
                .as_array()
                .is_some_and(|d| d.iter().any(|d| d["field"] == field)),
            "no detail for {field}: {}",
            r.text
        );
    }

    // Revision 1 is recorded at the hub's first look; a new image is revision 2, which
    // waits for approval before its first stage (no agent needed for that).
    submit(svc.clone(), 201).await;
    eventually_logged(WAIT, "revision 1 recorded", &[&st.daemons[0]], || async {
        rollout().await["revision"] == 1
    })
    .await;
    svc["spec"]["template"]["spec"]["containers"][0]["image"] = json!("registry.example/app:2");
    submit(svc.clone(), 200).await;
    eventually_logged(
        WAIT,
        "revision 2 waiting for approval at stage 0",
        &[&st.daemons[0]],
        || async {
            let s = rollout().await;
            s["revision"] == 2 && s["phase"] == "WaitingForApproval" && s["stage"] == 0
        },
    )
    .await;
    let cli = |token: &str, args: &[&str]| {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["-n", &ns.name]);
        cli_as(st, token, &all)
    };
    let first = rollout().await["members"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["stage"] == 0))
        .and_then(|m| m["cluster"].as_str())
        .expect("a member in the first stage")
        .to_string();
    let (ok, out, err) = cli("alice-token", &["rollout", "status", "service", "web"]);
    assert!(ok, "{err}");
    eprintln!("pinfed rollout status:\n{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("Phase:") && l.ends_with("WaitingForApproval")),
        "{out}"
    );
    assert!(out.contains("first ⏸ approval | rest ·"), "{out}");
    assert!(out.lines().any(|l| l.starts_with(&first)), "{out}");
    let (ok, out, err) = cli("alice-token", &["describe", "service", "web"]);
    assert!(ok, "{err}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("Rollout:")
                && l.contains("revision 2 (stable 1) WaitingForApproval")),
        "{out}"
    );

    // Another team's user may read its namespace but not approve this team's rollout.
    let (ok, _, err) = cli("carol-token", &["rollout", "approve", "service", "web"]);
    assert!(!ok && err.contains("403"), "{err}");
    // Only the stage that waits can be approved; the refusal names the stage.
    let (ok, _, err) = cli(
        "alice-token",
        &["rollout", "approve", "service", "web", "--stage", "rest"],
    );
    assert!(!ok, "approving a stage that does not wait");
    assert!(
        err.contains("422") && err.contains("\"rest\"") && err.contains("stage:"),
        "{err}"
    );
    assert_eq!(
        annotation(pinfed::api::rollout::ANNOTATION_APPROVED).await,
        None
    );
    let (ok, out, err) = cli(
        "alice-token",
        &["rollout", "approve", "service", "web", "--stage", "first"],
    );
    assert!(ok, "{err}");
    assert!(
        out.contains("approved stage \"first\" (0) of revision 2"),
        "{out}"
    );
    assert_eq!(
        annotation(pinfed::api::rollout::ANNOTATION_APPROVED)
            .await
            .as_deref(),
        Some("2/0")
    );
    eventually_logged(
        WAIT,
        "the rollout past its approval",
        &[&st.daemons[0]],
        || async {
            let s = rollout().await;
            s["revision"] == 2 && s["phase"] != "WaitingForApproval"
        },
    )
    .await;
    let log = std::fs::read_to_string(&st.daemons.last().unwrap().log).unwrap();
    assert!(
        log.lines().any(|l| l.contains("audit")
            && l.contains("rollout-approve")
            && l.contains("alice")
            && l.contains(&format!("PinterestService/{}/web", ns.name))),
        "{log}"
    );

    // Pause and resume: the annotation comes and goes.
    let (ok, out, err) = cli("alice-token", &["rollout", "pause", "service", "web"]);
    assert!(ok, "{err}");
    assert!(out.contains("paused"), "{out}");
    assert_eq!(
        annotation(pinfed::api::rollout::ANNOTATION_PAUSED)
            .await
            .as_deref(),
        Some("true")
    );
    let (ok, out, err) = cli("alice-token", &["rollout", "resume", "service", "web"]);
    assert!(ok, "{err}");
    assert!(out.contains("resumed"), "{out}");
    assert_eq!(
        annotation(pinfed::api::rollout::ANNOTATION_PAUSED).await,
        None
    );

    // History: both revisions with their images.
    let (ok, out, err) = cli("alice-token", &["rollout", "history", "service", "web"]);
    assert!(ok, "{err}");
    eprintln!("pinfed rollout history:\n{out}");
    let row = |rev: &str| {
        out.lines()
            .find(|l| l.split_whitespace().next() == Some(rev))
            .unwrap_or_else(|| panic!("no revision {rev} in:\n{out}"))
            .to_string()
    };
    assert!(row("1").ends_with("registry.example/app:1"), "{out}");
    assert!(
        row("2").contains("current") && row("2").ends_with("registry.example/app:2"),
        "{out}"
    );

    // A revision with no record: 404 naming it.
    let (ok, _, err) = cli(
        "alice-token",
        &["rollout", "undo", "service", "web", "--to-revision", "99"],
    );
    assert!(
        !ok && err.contains("404") && err.contains("revision 99"),
        "{err}"
    );
    // Undo: back to revision 1's image, submitted as the JSS submits, and the hub rolls it
    // out as revision 3.
    let (ok, out, err) = cli("alice-token", &["rollout", "undo", "service", "web"]);
    assert!(ok, "{err}");
    assert!(out.contains("revision 1"), "{out}");
    assert!(!out.contains("other writers"), "the undo took whole: {out}");
    let spec = hub_api.get("web").await.unwrap().data["spec"].clone();
    assert_eq!(
        spec["template"]["spec"]["containers"][0]["image"],
        "registry.example/app:1"
    );
    assert_eq!(spec["replicas"], 3);
    assert!(spec["rollout"]["stages"].is_array(), "{spec}");
    eventually_logged(
        WAIT,
        "the undo rolled out as revision 3",
        &[&st.daemons[0]],
        || async { rollout().await["revision"] == 3 },
    )
    .await;
    let (ok, out, err) = cli(
        "alice-token",
        &["rollout", "status", "service", "web", "-o", "json"],
    );
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["status"]["revision"], 3, "{v}");
    assert_eq!(v["history"].as_array().map(Vec::len), Some(3), "{v}");
    ns.delete().await;
    eprintln!("rollouts through the JSS: {:?}", started.elapsed());
}

/// Writes (create, update, patch, delete) of `name` in `namespace` the hub API server
/// audited (`--audit-log-format=json`, one event per line; local-3 audits the hub).
fn hub_writes_of(fed: &Federation, namespace: &str, name: &str) -> Vec<String> {
    support::hub_audit_events(fed)
        .into_iter()
        .filter(|e| {
            matches!(
                e["verb"].as_str(),
                Some("create" | "update" | "patch" | "delete")
            ) && e["objectRef"]["namespace"] == namespace
                && e["objectRef"]["name"] == name
        })
        .map(|e| {
            format!(
                "{} {} by {}",
                e["verb"].as_str().unwrap_or("-"),
                e["objectRef"]["resource"].as_str().unwrap_or("-"),
                e["userAgent"].as_str().unwrap_or("-")
            )
        })
        .collect()
}

#[tokio::test]
async fn a_dry_run_answers_the_split_objects_and_diffs_and_writes_nothing() {
    use pinfed::api::federation::MemberCluster;
    let started = std::time::Instant::now();
    let fed = Federation::connect().await;
    let st = setup(&fed);
    let hub = fed.hub();
    let ns = TestNamespace::create(&hub, "jss-dry").await;
    let alice = st.client(Some("alice-token"));
    let members = fed.member_names();
    let mcs: Api<MemberCluster> = Api::all(hub.clone());
    let zone = mcs
        .get(&members[0])
        .await
        .unwrap()
        .spec
        .zone
        .expect("a zone");
    let gpu: Vec<String> = mcs
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|m| m.spec.labels.get("accelerators").map(String::as_str) == Some("gpu"))
        .filter_map(|m| m.metadata.name.clone())
        .collect();
    assert_eq!(gpu.len(), 1, "the topology has one GPU member: {gpu:?}");
    let gpu = gpu[0].clone();
    assert_ne!(gpu, members[0]);
    // A service kept off the GPU member, with a registry mirror in the first member's zone.
    let svc = |name: &str, image: &str| {
        let mut v = service(name, "ads", 4, "10m");
        v["spec"]["template"]["spec"]["containers"][0]["image"] = json!(image);
        v["spec"]["placement"] = json!({"clusterSelector": {"matchExpressions": [
            {"key": "accelerators", "operator": "DoesNotExist"}]}});
        v["spec"]["overrides"] = json!([{"name": "mirror",
            "clusterSelector": {"matchLabels": {"topology.kubernetes.io/zone": zone}},
            "image": {"registry": "mirror.{{zone}}.example"}}]);
        v
    };
    let dry_run = |v: Value| {
        let alice = alice.clone();
        let ns = ns.name.clone();
        async move {
            let r = alice
                .post_json(
                    "/v1/submissions?dryRun=true",
                    &json!({"resource": v, "namespace": ns}),
                )
                .await
                .unwrap();
            assert_eq!(r.status, 200, "{}", r.text);
            r.decode::<pinfed::jss::wire::DryRun>().unwrap()
        }
    };

    // The existing workload of the second part, submitted for real first: the hub
    // places it while the first part runs.
    let r = alice
        .post_json(
            "/v1/submissions",
            &json!({"resource": svc("live", "registry.example/app:1"), "namespace": ns.name}),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 201, "{}", r.text);
    // A new service: the split with reasons, the GPU member excluded by the selector, the
    // override only in the member it selects.
    let r = dry_run(svc("dry", "registry.example/app:1")).await;
    assert!(
        !r.exists && r.moves.is_empty() && r.current.is_none(),
        "{r:?}"
    );
    assert_eq!(r.unplaced, 0, "{r:?}");
    assert_eq!(
        r.placements.iter().filter_map(|p| p.replicas).sum::<u32>(),
        4,
        "{r:?}"
    );
    assert!(r.placements.iter().all(|p| !p.reason.is_empty()), "{r:?}");
    assert!(
        r.placements.iter().any(|p| p.cluster == members[0]),
        "{r:?}"
    );
    let excluded = r.excluded.iter().find(|e| e.cluster == gpu);
    assert!(
        excluded.is_some_and(|e| e.why.contains("cluster selector")),
        "{:?}",
        r.excluded
    );
    for m in &r.members {
        let mirrored = m
            .objects
            .contains(&format!("image: mirror.{zone}.example/app:1"));
        assert_eq!(
            mirrored,
            m.cluster == members[0],
            "{}: {}",
            m.cluster,
            m.objects
        );
        assert!(m.objects.contains("kind: Deployment"), "{}", m.objects);
    }
    assert!(r.note.contains("status.available"), "{}", r.note);
    // Refusals are the submission's: a rule selecting no member is 422 naming it.
    let mut bad = svc("dry", "registry.example/app:1");
    bad["spec"]["overrides"][0]["clusters"] = json!(["no-such-member"]);
    let b = alice
        .post_json(
            "/v1/submissions?dryRun=true",
            &json!({"resource": bad, "namespace": ns.name}),
        )
        .await
        .unwrap();
    assert_error(&b, 422, "Invalid");
    assert!(b.text.contains("spec.overrides[0]"), "{}", b.text);
    let b = alice
        .post_json(
            "/v1/submissions?dryRun=maybe",
            &json!({"resource": svc("dry", "x:1")}),
        )
        .await
        .unwrap();
    assert_error(&b, 400, "BadRequest");
    assert!(b.text.contains("dryRun"), "{}", b.text);

    // The existing workload, placed by the hub: a dry run of a new image moves nothing and
    // shows the new image in each member's diff.
    let ar = ApiResource::erase::<PinterestService>(&());
    let hub_api = Api::<DynamicObject>::namespaced_with(hub.clone(), &ns.name, &ar);
    eventually_logged(WAIT, "the hub places live", &[&st.daemons[0]], || async {
        hub_api.get("live").await.unwrap().data["status"]["placement"]["placements"]
            .as_array()
            .is_some_and(|p| !p.is_empty())
    })
    .await;
    let before = hub_api.get("live").await.unwrap();
    let r = dry_run(svc("live", "registry.example/app:2")).await;
    assert!(r.exists, "{r:?}");
    assert!(
        r.moves.is_empty(),
        "an image change moves nothing: {:?}",
        r.moves
    );
    let now = r.current.clone().expect("the split now");
    assert_eq!(
        now.iter()
            .map(|p| (&p.cluster, p.replicas))
            .collect::<Vec<_>>(),
        r.placements
            .iter()
            .map(|p| (&p.cluster, p.replicas))
            .collect::<Vec<_>>()
    );
    for m in &r.members {
        let diff = m.diff.as_deref().unwrap_or_default();
        assert!(
            diff.lines()
                .any(|l| l.starts_with('+') && l.contains("image:") && l.contains("app:2")),
            "{}: {diff}",
            m.cluster
        );
        assert!(
            diff.lines()
                .any(|l| l.starts_with('-') && l.contains("image:") && l.contains("app:1")),
            "{}: {diff}",
            m.cluster
        );
    }
    let after = hub_api.get("live").await.unwrap();
    assert_eq!(after.metadata.generation, before.metadata.generation);
    assert_eq!(
        after.data["spec"]["template"]["spec"]["containers"][0]["image"],
        "registry.example/app:1"
    );

    // The CLI prints the split and the diffs; -o json is the reply.
    let file = st.dir.join(format!("{}-live.yaml", ns.name));
    std::fs::write(&file, yaml(&svc("live", "registry.example/app:2"))).unwrap();
    let file = file.display().to_string();
    let (ok, out, err) = cli_as(
        st,
        "alice-token",
        &["submit", "-f", &file, "-n", &ns.name, "--dry-run"],
    );
    assert!(ok, "{err}");
    eprintln!("pinfed submit --dry-run:\n{out}");
    assert!(out.starts_with("DRY RUN: nothing was submitted."), "{out}");
    assert!(out.contains("\nSplit:\n"), "{out}");
    for p in &r.placements {
        assert!(
            out.lines()
                .any(|l| l.starts_with(&format!("  {} ", p.cluster)) && l.contains("replicas")),
            "{out}"
        );
    }
    assert!(out.contains("Moves:      none"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("  +") && l.contains("app:2")),
        "{out}"
    );
    let (ok, out, err) = cli_as(
        st,
        "alice-token",
        &[
            "submit",
            "-f",
            &file,
            "-n",
            &ns.name,
            "--dry-run",
            "-o",
            "json",
        ],
    );
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["exists"], true, "{v}");

    // Per-node room: every member's status lists its nodes (the hub's heartbeat writes
    // them, a pull member's from its agent's report), and a pod that fits only on the
    // 16-CPU highmem pool is planned where that pool is — not on a member whose room
    // spread evenly over its nodes would look big enough — and the hub places it there.
    eventually(WAIT, "every member's nodes in its status", || async {
        let list = mcs.list(&Default::default()).await.unwrap();
        list.items.len() == members.len()
            && list
                .items
                .iter()
                .all(|m| m.status.as_ref().is_some_and(|s| !s.node_pools.is_empty()))
    })
    .await;
    let highmem = mcs
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .find_map(|m| {
            let pools = &m.status.as_ref()?.node_pools;
            pools
                .iter()
                .any(|p| p.labels.get("pinterest.com/pool").map(String::as_str) == Some("highmem"))
                .then(|| m.metadata.name.clone().unwrap())
        });
    let highmem = highmem.expect("the topology has a highmem pool");
    let big = || {
        let mut v = service("big", "ads", 1, "13");
        v["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["memory"] =
            json!("1Gi");
        v
    };
    let r = dry_run(big()).await;
    let planned: Vec<(String, Option<u32>)> = r
        .placements
        .iter()
        .map(|p| (p.cluster.clone(), p.replicas))
        .collect();
    assert_eq!(planned, vec![(highmem.clone(), Some(1))], "{r:?}");
    let r = alice
        .post_json(
            "/v1/submissions",
            &json!({"resource": big(), "namespace": ns.name}),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 201, "{}", r.text);
    eventually_logged(WAIT, "the hub places big", &[&st.daemons[0]], || async {
        hub_api.get("big").await.unwrap().data["status"]["placement"]["placements"]
            .as_array()
            .is_some_and(|p| !p.is_empty())
    })
    .await;
    let placed =
        hub_api.get("big").await.unwrap().data["status"]["placement"]["placements"].clone();
    assert_eq!(
        placed
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (
                p["cluster"].as_str().unwrap().to_string(),
                p["replicas"].as_u64().map(|r| r as u32)
            ))
            .collect::<Vec<_>>(),
        planned,
        "the hub's split differs from the dry run's"
    );
    hub_api.delete("big", &Default::default()).await.unwrap();

    // With a quota: the effect in total (the live service's 4 pods used, 4 added) and on
    // the member it caps; a dry run over the total is the submission's 409.
    let q: FederatedQuota = serde_json::from_value(json!({
        "apiVersion": "federation.pinterest.com/v1alpha1", "kind": "FederatedQuota",
        "metadata": {"name": "team"},
        "spec": {"hard": {"pods": "10"}, "perCluster": {members[0].clone(): {"pods": "1"}}},
    }))
    .unwrap();
    Api::<FederatedQuota>::namespaced(hub.clone(), &ns.name)
        .create(&PostParams::default(), &q)
        .await
        .unwrap();
    let mut r = dry_run(svc("dry", "registry.example/app:1")).await;
    for _ in 0..50 {
        if !r.quotas.is_empty() {
            break;
        }
        // (The JSS's watch of quotas delivers it.)
        tokio::time::sleep(Duration::from_millis(200)).await;
        r = dry_run(svc("dry", "registry.example/app:1")).await;
    }
    let rows = &r.quotas.first().expect("the quota's effect").rows;
    let row = |scope: &str| {
        rows.iter()
            .find(|x| x.scope == scope && x.resource == "pods")
            .unwrap_or_else(|| panic!("no {scope} pods row: {rows:?}"))
    };
    let total = row("total");
    assert_eq!(
        (
            total.adds.as_str(),
            total.used.as_str(),
            total.hard.as_str(),
            total.fits
        ),
        ("4", "4", "10", true),
        "{rows:?}"
    );
    assert_eq!(row(&members[0]).hard, "1", "{rows:?}");
    let first = r.placements.iter().find(|p| p.cluster == members[0]);
    assert!(
        first.is_none_or(|p| p.replicas <= Some(1) && p.reason.contains("quota room")),
        "{:?}",
        r.placements
    );
    let mut over = svc("dry", "registry.example/app:1");
    over["spec"]["replicas"] = json!(7);
    let b = alice
        .post_json(
            "/v1/submissions?dryRun=true",
            &json!({"resource": over, "namespace": ns.name}),
        )
        .await
        .unwrap();
    assert_error(&b, 409, "QuotaExceeded");

    // Nothing of the dry runs reached the hub: no workload `dry`, and its API server
    // audited no write of that name (while it did audit the real submission's).
    assert!(hub_api.get_opt("dry").await.unwrap().is_none());
    eventually(
        Duration::from_secs(10),
        "the audit log shows live's apply",
        || async { !hub_writes_of(&fed, &ns.name, "live").is_empty() },
    )
    .await;
    let writes = hub_writes_of(&fed, &ns.name, "dry");
    assert!(
        writes.is_empty(),
        "the dry run wrote to the hub: {writes:?}"
    );
    let log = std::fs::read_to_string(&st.daemons.last().unwrap().log).unwrap();
    assert!(
        log.lines().any(|l| l.contains("audit")
            && l.contains("submit-dry-run")
            && l.contains(&format!("PinterestService/{}/dry", ns.name))
            && l.contains("DryRun")),
        "the JSS audits the dry run"
    );
    ns.delete().await;
    eprintln!("dry run through the JSS: {:?}", started.elapsed());
}

#[tokio::test]
async fn describe_shows_why_each_member_got_its_share_with_the_numbers() {
    let fed = Federation::connect().await;
    let st = setup(&fed);
    let hub = fed.hub();
    let ns = TestNamespace::create(&hub, "jss-describe").await;
    let capped = fed.member_names()[0].clone();
    // The first member's share of the namespace's quota admits no pod.
    let quota: FederatedQuota = serde_json::from_value(json!({
        "apiVersion": "federation.pinterest.com/v1alpha1", "kind": "FederatedQuota",
        "metadata": {"name": "team"},
        "spec": {"hard": {"cpu": "100"}, "perCluster": {capped.clone(): {"cpu": "1m"}}},
    }))
    .unwrap();
    Api::<FederatedQuota>::namespaced(hub.clone(), &ns.name)
        .create(&PostParams::default(), &quota)
        .await
        .unwrap();
    let mut gpu = service("gpu-bound", "ads", 1, "10m");
    gpu["spec"]["template"]["spec"]["nodeSelector"] = json!({"pinterest.com/pool": "gpu"});
    gpu["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] =
        json!({"nvidia.com/gpu": "1"});
    for w in [service("capped", "ads", 2, "10m"), gpu] {
        let r = st
            .client(Some("alice-token"))
            .post_json(
                "/v1/submissions",
                &json!({"resource": w, "namespace": ns.name}),
            )
            .await
            .unwrap();
        assert!(r.status == 201, "{}", r.text);
    }
    let describe = |name: &str| {
        let out = std::process::Command::new(pinfed_bin())
            .args(["describe", "service", name, "-n", &ns.name])
            .env("PINFED_SERVER", &st.server)
            .env("PINFED_TOKEN", "alice-token")
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let line = |text: &str, member: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(&format!("{member} ")))
            .unwrap_or_default()
            .to_string()
    };
    eventually(WAIT, "capped's decision explained", || async {
        let text = describe("capped");
        text.contains("Decision:") && line(&text, &capped).contains("quota room 0 pods")
    })
    .await;
    eventually(WAIT, "gpu-bound's decision explained", || async {
        let text = describe("gpu-bound");
        text.contains("Decision:")
            && text.contains("excluded: none of its")
            && text.contains("the pod does not tolerate their taint dedicated=gpu:NoSchedule")
    })
    .await;
    ns.delete().await;
}

/// The hub's queue through the JSS: a job set written to the hub directly (as kubectl
/// would) whose only eligible member does not exist stays unplaced, and the hub puts it in
/// its queue itself. `pinfed queue` lists it to its team (ads) and to an admin team, not
/// to another team (search); `-n` narrows the list; `pinfed describe` says where it stands.
#[tokio::test]
async fn the_queue_lists_a_waiting_workload_to_those_who_may_see_it() {
    let fed = Federation::connect().await;
    let st = setup(&fed);
    let hub = fed.hub();
    let ns = TestNamespace::create(&hub, "jss-queue").await;
    let jobset: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestJobSet",
        "metadata": {"name": "waits", "namespace": ns.name},
        "spec": {
            "owner": {"team": "ads", "contact": "ads@pinterest.com"},
            "shards": 2,
            "placement": {"clusterAffinity": {"clusterNames": ["no-such-member"]}},
            "template": {"spec": {"containers": [{"name": "app", "image": "registry.example/app:1",
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}
        }
    }))
    .unwrap();
    let ar = ApiResource::erase::<PinterestJobSet>(&());
    Api::<DynamicObject>::namespaced_with(hub.clone(), &ns.name, &ar)
        .create(&PostParams::default(), &jobset)
        .await
        .unwrap();
    // `pinfed queue -o json` as a holder of `token`: the entry of this job set, if listed.
    let entry = |token: &str, args: &[&str]| {
        let (ok, out, err) = cli_as(st, token, &[&["queue", "-o", "json"][..], args].concat());
        assert!(ok, "pinfed queue: {err}");
        let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        v["items"]
            .as_array()
            .unwrap_or_else(|| panic!("no items: {out}"))
            .iter()
            .find(|e| e["namespace"] == ns.name.as_str() && e["name"] == "waits")
            .cloned()
    };
    let (hub_daemon, jss_daemon) = (&st.daemons[0], st.daemons.last().unwrap());
    eventually_logged(
        WAIT,
        &format!(
            "PinterestJobSet {}/waits in `pinfed queue` with a position and what it waits for",
            ns.name
        ),
        &[hub_daemon, jss_daemon],
        || async {
            entry("alice-token", &[]).is_some_and(|e| {
                e["position"].as_i64().is_some_and(|p| p >= 1)
                    && e["waitingFor"].as_str().is_some_and(|w| !w.is_empty())
            })
        },
    )
    .await;
    let e = entry("alice-token", &["-n", &ns.name]).expect("listed in its namespace");
    assert_eq!(
        (e["kind"].as_str(), e["team"].as_str()),
        (Some("PinterestJobSet"), Some("ads")),
        "{e}"
    );
    let (position, waiting) = (
        e["position"].as_i64().unwrap(),
        e["waiting"].as_i64().unwrap(),
    );
    assert!(
        position >= 1 && waiting >= position && e["unplaced"] == 2,
        "{e}"
    );
    // An admin team sees every team's; another team sees nothing of it.
    assert!(entry("gina-token", &[]).is_some(), "admin team");
    assert!(
        entry("bob-token", &[]).is_none(),
        "search may not see ads' workload"
    );
    assert!(entry("bob-token", &["-n", &ns.name]).is_none());
    // The table, and the API without a token.
    let (ok, table, err) = cli_as(st, "alice-token", &["queue", "-n", &ns.name]);
    assert!(ok, "{err}");
    assert!(
        table.starts_with("POSITION")
            && table.contains(&format!("PinterestJobSet/{}/waits", ns.name)),
        "{table}"
    );
    let r = st.client(None).get("/v1/queue").await.unwrap();
    assert_error(&r, 401, "Unauthenticated");
    // describe says where it stands.
    let (ok, text, err) = cli_as(
        st,
        "alice-token",
        &["describe", "jobset", "waits", "-n", &ns.name],
    );
    assert!(ok, "{err}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("Queue:") && l.contains("position ") && l.contains(" of ")),
        "{text}"
    );
    // A submission that would wait too hears where it would stand: behind `waits` (as
    // high, and waiting longer), so not first.
    let mut second = serde_json::to_value(&jobset).unwrap();
    second["metadata"] = json!({"name": "waits-too"});
    let r = st
        .client(Some("alice-token"))
        .post_json(
            "/v1/submissions",
            &json!({"resource": second, "namespace": ns.name}),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 201, "{}", r.text);
    let forecast = r.body["forecast"].as_str().unwrap_or_default().to_string();
    let position: Option<(i64, i64)> = forecast.split("about position ").nth(1).and_then(|rest| {
        let mut words = rest.split_whitespace();
        let p = words.next()?.parse().ok()?;
        (words.next() == Some("of")).then_some(())?;
        Some((p, words.next()?.parse().ok()?))
    });
    assert!(
        forecast.starts_with("would wait for room")
            && position.is_some_and(|(p, of)| p >= 2 && of >= p),
        "{forecast}"
    );
    ns.delete().await;
}

/// `pinfed rebalance` (issue 37): a split the hub keeps after more members are allowed
/// (it moves nothing it need not) is placed again from scratch on request — the dry run
/// shows the moves and writes nothing; the request moves exactly those, the hub records
/// it and says so in an Event, and the service is never below its replicas on the way.
/// Another team may not ask.
#[tokio::test]
async fn a_rebalance_places_a_kept_split_again_from_scratch_on_request_only() {
    let fed = Federation::connect().await;
    let st = setup(&fed);
    let hub = fed.hub();
    let ns = TestNamespace::create(&hub, "jss-rebalance").await;
    let alice = st.client(Some("alice-token"));
    let submit = |svc: Value| {
        let alice = alice.clone();
        let ns = ns.name.clone();
        async move {
            let r = alice
                .post_json(
                    "/v1/submissions",
                    &json!({"resource": svc, "namespace": ns}),
                )
                .await
                .unwrap();
            assert!(r.is_success(), "{}", r.text);
        }
    };
    let api: Api<PinterestService> = Api::namespaced(hub.clone(), &ns.name);
    let split = || {
        let api = api.clone();
        async move {
            let s = support::status_of(&api, "lopsided").await;
            let shares: Vec<(String, i64)> = s["placement"]["placements"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| {
                    (
                        p["cluster"].as_str().unwrap_or_default().to_string(),
                        p["replicas"].as_i64().unwrap_or(0),
                    )
                })
                .collect();
            (s["placement"]["generation"].as_i64(), shares, s)
        }
    };
    let mut svc = service("lopsided", "ads", 4, "10m");
    svc["spec"]["placement"] = json!({"clusterAffinity": {"clusterNames": ["use1a"]}});
    submit(svc.clone()).await;
    eventually_logged(WAIT, "4 replicas in use1a", &[&st.daemons[0]], || async {
        split().await.1 == [("use1a".to_string(), 4)]
    })
    .await;
    // Another member allowed: a new generation, and the hub keeps the split.
    svc["spec"]["placement"] = json!({"clusterAffinity": {"clusterNames": ["use1a", "use1b"]}});
    submit(svc).await;
    eventually_logged(
        WAIT,
        "generation 2 decided, the split kept",
        &[&st.daemons[0]],
        || async {
            let (generation, shares, _) = split().await;
            generation == Some(2) && shares == [("use1a".to_string(), 4)]
        },
    )
    .await;
    let args = |extra: &[&'static str]| -> Vec<String> {
        [
            "rebalance",
            "service",
            "lopsided",
            "-n",
            &ns.name,
            "-o",
            "json",
        ]
        .iter()
        .chain(extra)
        .map(|s| s.to_string())
        .collect()
    };
    let run = |token: &str, extra: &[&'static str]| {
        let a = args(extra);
        let refs: Vec<&str> = a.iter().map(String::as_str).collect();
        cli_as(st, token, &refs)
    };

    // Another team (it may use the namespace, it does not own the workload): refused.
    let (ok, _, err) = run("carol-token", &["--dry-run"]);
    assert!(!ok && err.contains("403"), "{err}");

    // The dry run: the moves, nothing written.
    let (ok, out, err) = run("alice-token", &["--dry-run"]);
    assert!(ok, "{err}");
    let dry: Vec<pinfed::jss::wire::RebalanceReply> = serde_json::from_str(&out).unwrap();
    assert!(!dry[0].requested && dry[0].request.is_none(), "{out}");
    let planned: Vec<(String, i64)> = dry[0]
        .plan
        .placements
        .iter()
        .map(|p| (p.cluster.clone(), i64::from(p.replicas.unwrap_or(0))))
        .collect();
    assert!(
        planned.iter().any(|(c, n)| c == "use1b" && *n > 0)
            && planned.iter().map(|(_, n)| n).sum::<i64>() == 4,
        "from scratch over both members: {out}"
    );
    assert!(!dry[0].plan.moves.is_empty(), "{out}");
    let annotated = |o: &PinterestService| {
        o.metadata.annotations.as_ref().and_then(|a| {
            a.get(pinfed::api::federation::ANNOTATION_REBALANCE)
                .cloned()
        })
    };
    assert_eq!(annotated(&api.get("lopsided").await.unwrap()), None);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        split().await.1,
        [("use1a".to_string(), 4)],
        "a dry run moves nothing"
    );

    // The request: the hub places it as the dry run said, surge first.
    let (ok, out, err) = run("alice-token", &[]);
    assert!(ok, "{err}");
    let asked: Vec<pinfed::jss::wire::RebalanceReply> = serde_json::from_str(&out).unwrap();
    let id = asked[0].request.clone().expect("a request id");
    let lowest = std::sync::atomic::AtomicI64::new(i64::MAX);
    eventually_logged(
        WAIT,
        "rebalanced as planned, every replica available",
        &[&st.daemons[0]],
        || async {
            let (_, shares, s) = split().await;
            if let Some(a) = s["availableReplicas"].as_i64() {
                lowest.fetch_min(a, std::sync::atomic::Ordering::Relaxed);
            }
            s["placement"]["rebalanced"] == id.as_str()
                && shares == planned
                && s["availableReplicas"] == 4
        },
    )
    .await;
    assert!(
        lowest.load(std::sync::atomic::Ordering::Relaxed) >= 4,
        "never below 4 available on the way: {}",
        lowest.load(std::sync::atomic::Ordering::Relaxed)
    );
    eventually(Duration::from_secs(30), "a Rebalanced Event", || async {
        support::event_note(&hub, &ns.name, "Rebalanced")
            .await
            .is_some_and(|n| n.contains(&id) && n.contains("→"))
    })
    .await;
    ns.delete().await;
}

/// An OTLP/HTTP (JSON) collector on loopback that keeps every span it is sent, on a
/// thread and runtime of its own (the tests that share it each run on their own runtime).
mod otlp {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

    use serde_json::Value;

    #[derive(Clone, Debug)]
    pub struct Span {
        pub service: String,
        pub name: String,
        pub trace_id: String,
        pub span_id: String,
        pub parent: String,
        pub start: u128,
        pub end: u128,
        pub attributes: BTreeMap<String, String>,
    }

    pub struct Collector {
        pub endpoint: String,
        spans: Arc<Mutex<Vec<Span>>>,
    }

    impl Collector {
        pub fn start() -> Collector {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
            listener.set_nonblocking(true).unwrap();
            let endpoint = format!("http://{}", listener.local_addr().unwrap());
            let spans: Arc<Mutex<Vec<Span>>> = Arc::default();
            let kept = spans.clone();
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                    // A batch (512 spans with their events, as JSON) can pass axum's 2 MB
                    // default: a refused batch would lose spans.
                    let app = axum::Router::new()
                        .route(
                            "/v1/traces",
                            axum::routing::post(move |body: axum::body::Bytes| {
                                let kept = kept.clone();
                                async move {
                                    match serde_json::from_slice::<Value>(&body) {
                                        Ok(v) => kept.lock().unwrap().extend(parse(&v)),
                                        Err(e) => eprintln!(
                                            "otlp collector: not an OTLP/JSON request ({e}): {}",
                                            String::from_utf8_lossy(&body[..body.len().min(300)])
                                        ),
                                    }
                                    axum::Json(serde_json::json!({}))
                                }
                            }),
                        )
                        .layer(axum::extract::DefaultBodyLimit::max(256 << 20));
                    axum::serve(listener, app).await.unwrap();
                });
            });
            Collector { endpoint, spans }
        }

        /// Every span received.
        pub fn all(&self) -> Vec<Span> {
            self.spans.lock().unwrap().clone()
        }

        /// The spans of trace `id`, in start order.
        pub fn trace(&self, id: &str) -> Vec<Span> {
            let mut t: Vec<Span> = self
                .spans
                .lock()
                .unwrap()
                .iter()
                .filter(|s| s.trace_id == id)
                .cloned()
                .collect();
            t.sort_by_key(|s| s.start);
            t
        }
    }

    fn text(v: &Value) -> String {
        match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        }
    }

    fn attributes(v: &Value) -> BTreeMap<String, String> {
        v.as_array()
            .into_iter()
            .flatten()
            .map(|a| {
                let value = a["value"]
                    .as_object()
                    .and_then(|o| o.values().next())
                    .map(text)
                    .unwrap_or_default();
                (text(&a["key"]), value)
            })
            .collect()
    }

    fn nanos(v: &Value) -> u128 {
        text(v).parse().unwrap_or_default()
    }

    fn parse(v: &Value) -> Vec<Span> {
        let mut out = Vec::new();
        for rs in v["resourceSpans"].as_array().into_iter().flatten() {
            let service = attributes(&rs["resource"]["attributes"])
                .remove("service.name")
                .unwrap_or_default();
            for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                for s in ss["spans"].as_array().into_iter().flatten() {
                    out.push(Span {
                        service: service.clone(),
                        name: text(&s["name"]),
                        trace_id: text(&s["traceId"]).to_lowercase(),
                        span_id: text(&s["spanId"]).to_lowercase(),
                        parent: s["parentSpanId"]
                            .as_str()
                            .unwrap_or_default()
                            .to_lowercase(),
                        start: nanos(&s["startTimeUnixNano"]),
                        end: nanos(&s["endTimeUnixNano"]),
                        attributes: attributes(&s["attributes"]),
                    });
                }
            }
        }
        out
    }

    /// The trace as an indented tree: service, span, its start after the trace's first
    /// and its duration, a few attributes.
    pub fn render(spans: &[Span]) -> String {
        let t0 = spans.iter().map(|s| s.start).min().unwrap_or_default();
        let ids: std::collections::BTreeSet<&str> =
            spans.iter().map(|s| s.span_id.as_str()).collect();
        let mut out = String::new();
        fn walk(
            out: &mut String,
            spans: &[Span],
            parent: &str,
            depth: usize,
            t0: u128,
            roots: bool,
            ids: &std::collections::BTreeSet<&str>,
        ) {
            for s in spans.iter().filter(|s| {
                if roots {
                    s.parent.is_empty() || !ids.contains(s.parent.as_str())
                } else {
                    s.parent == parent
                }
            }) {
                let keys = ["workload", "member", "user", "outcome"];
                let attrs: Vec<String> = keys
                    .iter()
                    .filter_map(|k| s.attributes.get(*k).map(|v| format!("{k}={v}")))
                    .collect();
                out.push_str(&format!(
                    "{:indent$}{} {}  +{} ms  {} ms  {}\n",
                    "",
                    s.service,
                    s.name,
                    (s.start - t0) / 1_000_000,
                    s.end.saturating_sub(s.start) / 1_000_000,
                    attrs.join(" "),
                    indent = depth * 2
                ));
                walk(out, spans, &s.span_id, depth + 1, t0, false, ids);
            }
        }
        walk(&mut out, spans, "", 0, t0, true, &ids);
        out
    }
}

#[tokio::test]
async fn a_submission_is_one_trace_from_the_jss_through_the_hub_to_each_members_agent() {
    let fed = Federation::connect().await;
    let st = setup(&fed);
    let hub = fed.hub();
    let ns = TestNamespace::create(&hub, "jss-trace").await;
    // Every member Ready to the hub first (it may have just started): a member that turns
    // Ready after the change is done gets its share in a trace of its own.
    fed.members_ready(WAIT, &[]).await;
    let members = fed.member_names();
    let mut svc = service("traced", "ads", 3, "10m");
    svc["spec"]["placement"] = json!({"spread": {"minClusters": 3}});
    let alice = st.client(Some("alice-token"));
    let r = alice
        .post_json(
            "/v1/submissions",
            &json!({"resource": svc, "namespace": ns.name}),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 201, "{}", r.text);
    let trace_id = r.body["traceId"]
        .as_str()
        .unwrap_or_else(|| panic!("a traced JSS answers the submission's trace id: {}", r.text))
        .to_string();
    assert_eq!(trace_id.len(), 32, "{trace_id}");
    // The hub resource carries the submission's context.
    let ar = ApiResource::erase::<PinterestService>(&());
    let stored = Api::<DynamicObject>::namespaced_with(hub.clone(), &ns.name, &ar)
        .get("traced")
        .await
        .unwrap();
    let carried = stored.metadata.annotations.clone().unwrap_or_default()
        ["federation.pinterest.com/traceparent"]
        .clone();
    assert!(carried.contains(&trace_id), "{carried}");

    // Every member's agent applies its slice inside the same trace, under the hub's
    // reconcile that wrote the slice, itself under the submission.
    let complete = |spans: &[otlp::Span]| {
        let submit = spans
            .iter()
            .find(|s| s.name == "jss.submit" && s.service == "pinfed-jss");
        let hub_writes: Vec<&otlp::Span> = spans
            .iter()
            .filter(|s| s.name == "roll_out" && s.service == "pinfed-hub")
            .collect();
        submit.is_some()
            && spans.iter().any(|s| {
                s.name == "hub.reconcile"
                    && Some(s.parent.as_str()) == submit.map(|s| s.span_id.as_str())
            })
            && members.iter().all(|m| {
                spans.iter().any(|a| {
                    a.name == "agent.reconcile"
                        && a.service == "pinfed-agent"
                        && a.attributes.get("member") == Some(m)
                        && hub_writes.iter().any(|w| w.span_id == a.parent)
                        && spans
                            .iter()
                            .any(|c| c.name == "apply" && c.parent == a.span_id)
                })
            })
    };
    let waited = std::time::Instant::now();
    loop {
        let spans = st.spans.trace(&trace_id);
        if complete(&spans) {
            println!(
                "one trace, {} spans:\n{}",
                spans.len(),
                otlp::render(&spans)
            );
            break;
        }
        assert!(
            waited.elapsed() < WAIT,
            "the trace never reached every member's agent ({members:?}); it has:\n{}\nspans received, by service and name: {:?}\n{}",
            otlp::render(&spans),
            st.spans.all().iter().fold(
                std::collections::BTreeMap::<(String, String), usize>::new(),
                |mut m, s| {
                    *m.entry((s.service.clone(), s.name.clone())).or_default() += 1;
                    m
                }
            ),
            st.logs()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Reconciles after the change is done are not charged to it: once Ready everywhere,
    // the trace stops growing.
    let path = format!("/v1/workloads/{}/service/traced", ns.name);
    eventually(WAIT, "3 available", || {
        let alice = alice.clone();
        let path = path.clone();
        async move {
            let r = alice.get(&path).await.unwrap();
            r.body["status"]["availableReplicas"] == 3
                && r.body["status"]["observedGeneration"] == r.body["generation"]
        }
    })
    .await;
    // A change that is not a new submission (a label: the slices are written again) is
    // traced on its own: each agent's reconcile of it is in another trace, and nothing
    // of it joins the submission's.
    let patched_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    Api::<DynamicObject>::namespaced_with(hub.clone(), &ns.name, &ar)
        .patch(
            "traced",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}})),
        )
        .await
        .unwrap();
    let workload = format!("{}/traced", ns.name);
    eventually(
        WAIT,
        "each agent's reconcile of the label change exported",
        || {
            let later: Vec<otlp::Span> = st
                .spans
                .all()
                .into_iter()
                .filter(|s| {
                    s.name == "agent.reconcile"
                        && s.start > patched_at
                        && s.attributes.get("workload") == Some(&workload)
                })
                .collect();
            let members = members.clone();
            async move {
                members
                    .iter()
                    .all(|m| later.iter().any(|s| s.attributes.get("member") == Some(m)))
            }
        },
    )
    .await;
    let after = st.spans.trace(&trace_id);
    assert!(
        after.iter().all(|s| s.start < patched_at),
        "a reconcile of a later change joined the submission's trace:\n{}",
        otlp::render(&after)
    );
}
