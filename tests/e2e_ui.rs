//! The web UI in headless Chromium against the JSS on the local topology: login, team
//! scoping, the fleet with capacity, a service's split turning Ready live, a job set's
//! shard map filling, delete and its refusal, CSRF and cross-site refusals, 404 pages and
//! a lost session, quotas and owners; no console errors anywhere. The screenshots of
//! `docs/ui.md` are taken here.
//!
//! The live NotReady test stops a member and is in `destructive_ui.rs`.

mod browser;
mod support;

use std::time::Duration;

use browser::{Browser, Setup, raw_request, setup};
use kube::api::{Api, PostParams};
use pinfed::api::federation::FederatedQuota;
use pinfed::api::service::PinterestService;
use serde_json::{Value, json};
use support::{Federation, TestNamespace, eventually};

const WAIT: Duration = Duration::from_secs(90);
/// The hub's member grace here: long, so a slow heartbeat on a busy machine moves nothing.
const MEMBER_GRACE: u32 = 40;

async fn start() -> (Federation, &'static Setup) {
    let fed = Federation::connect().await;
    let st = setup(&fed, MEMBER_GRACE);
    (fed, st)
}

fn service(name: &str, team: &str, replicas: i64) -> Value {
    json!({
        "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestService",
        "metadata": {"name": name},
        "spec": {
            "owner": {"team": team, "contact": format!("{team}@pinterest.com")},
            "replicas": replicas,
            "template": {"spec": {"containers": [{"name": "app", "image": "registry.example/app:1",
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}
        }
    })
}

/// A job set whose pods take `delay` to complete (kwok's pod-complete stage).
fn jobset(name: &str, team: &str, shards: i64, delay: &str) -> Value {
    json!({
        "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestJobSet",
        "metadata": {"name": name},
        "spec": {
            "owner": {"team": team, "contact": format!("{team}@pinterest.com")},
            "shards": shards, "parallelism": 3,
            "placement": {"spread": {"minClusters": 3}},
            "template": {
                "metadata": {"annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": delay}},
                "spec": {"containers": [{"name": "w", "image": "registry.example/w:1",
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}
        }
    })
}

/// `use1a 2/2 · use1b 2/2` → [("use1a", "2", "2"), ...].
fn split_parts(text: &str) -> Vec<(String, String, String)> {
    text.split(" · ")
        .filter_map(|p| {
            let (cluster, counts) = p.trim().split_once(' ')?;
            let (done, want) = counts.split_once('/')?;
            Some((cluster.to_string(), done.to_string(), want.to_string()))
        })
        .collect()
}

fn css_attr(v: &str) -> String {
    Value::String(v.into()).to_string()
}

#[tokio::test]
async fn a_login_leads_to_the_fleet_with_every_member_and_its_capacity() {
    let (fed, st) = start().await;
    let b = Browser::open(st).await;
    // Not logged in: the login page, which returns to the page asked for.
    b.goto("/ui/fleet").await;
    assert!(
        b.path().await.starts_with("/ui/login?next=%2Fui%2Ffleet"),
        "{}",
        b.path().await
    );
    b.c.find(fantoccini::Locator::Id("token"))
        .await
        .unwrap()
        .send_keys("not-a-token")
        .await
        .unwrap();
    b.c.find(fantoccini::Locator::Id("login"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    b.wait_js(
        "the login error",
        "return !!document.getElementById('login-error')",
        WAIT,
    )
    .await;
    assert_eq!(b.text("#login-error").await, "Unknown or expired token.");
    b.screenshot("login").await;
    b.assert_console_errors_only("a wrong token", &["status of 401"])
        .await;
    b.c.find(fantoccini::Locator::Id("token"))
        .await
        .unwrap()
        .send_keys("alice-token")
        .await
        .unwrap();
    b.c.find(fantoccini::Locator::Id("login"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    b.wait_js(
        "the fleet page",
        "return location.pathname === '/ui/fleet'",
        WAIT,
    )
    .await;
    assert_eq!(b.text("#user").await, "alice");

    for m in &fed.topology.members {
        b.wait_js(
            &format!("member {} Ready on the fleet page\n{}", m.name, st.logs()),
            &format!(
                "var r = document.getElementById('member-{}'); return !!r && r.dataset.health === 'Ready';",
                m.name
            ),
            WAIT,
        )
        .await;
        let cores: u64 = m
            .node_pools
            .iter()
            .map(|p| {
                u64::from(p.count) * p.cpu.parse::<u64>().expect("whole cores in the topology")
            })
            .sum();
        let pods: u64 = m
            .node_pools
            .iter()
            .map(|p| u64::from(p.count) * u64::from(p.pods))
            .sum();
        let gpus: u64 = m
            .node_pools
            .iter()
            .map(|p| u64::from(p.count) * u64::from(p.gpu))
            .sum();
        let row = format!("#member-{}", m.name);
        let cpu = b.text(&format!("{row} td.res-cpu")).await;
        assert!(
            cpu.contains(&format!("/ {cores} ·")),
            "{}: cpu cell {cpu:?}, {cores} cores allocatable",
            m.name
        );
        let pod_cell = b.text(&format!("{row} td.res-pods")).await;
        assert!(
            pod_cell.contains(&format!("/ {pods} ·")),
            "{}: pods cell {pod_cell:?}",
            m.name
        );
        let gpu_cell = b.text(&format!("{row} td.res-gpus")).await;
        if gpus > 0 {
            assert!(
                gpu_cell.contains(&format!("/ {gpus} ·")),
                "{}: gpu cell {gpu_cell:?}",
                m.name
            );
        }
        let meters = b
            .js(&format!(
                "return document.querySelectorAll('{row} meter').length"
            ))
            .await;
        assert!(meters.as_u64().unwrap() >= 3, "{}: capacity bars", m.name);
        let zone = b.text(&format!("{row} td:nth-child(3)")).await;
        assert!(zone.contains(m.zone.as_deref().unwrap()), "{zone}");
        assert_eq!(
            b.text(&format!("{row} td:nth-child(2)")).await,
            if fed.is_pull(&m.name) { "Pull" } else { "Push" }
        );
    }
    let rows = b
        .js("return document.querySelectorAll('table.fleet tbody tr').length")
        .await;
    assert_eq!(
        rows,
        json!(fed.topology.members.len()),
        "one row per member"
    );
    assert!(
        b.text("#leader").await.contains("without leader election"),
        "the hub runs with --no-leader-election: {}",
        b.text("#leader").await
    );
    b.screenshot("fleet").await;
    b.assert_no_console_errors("the fleet page").await;
    b.close().await;
}

#[tokio::test]
async fn a_team_sees_only_its_namespaces() {
    let (fed, st) = start().await;
    let hub = fed.hub();
    let ads = TestNamespace::create(&hub, "ui-ads").await;
    let search = TestNamespace::create(&hub, "ui-search").await;
    st.submit("alice-token", &ads.name, &service("ads-web", "ads", 1))
        .await;
    st.submit(
        "bob-token",
        &search.name,
        &service("search-web", "search", 1),
    )
    .await;

    let b = Browser::open(st).await;
    b.login("alice-token").await;
    b.goto("/ui/workloads").await;
    let mine = format!(
        "tr[data-name={}]",
        css_attr(&format!("{}/ads-web", ads.name))
    );
    let theirs = format!(
        "tr[data-name={}]",
        css_attr(&format!("{}/search-web", search.name))
    );
    b.wait_js(
        "alice's workload listed",
        &format!("return !!document.querySelector({})", css_attr(&mine)),
        WAIT,
    )
    .await;
    assert_eq!(
        b.js(&format!(
            "return !!document.querySelector({})",
            css_attr(&theirs)
        ))
        .await,
        json!(false)
    );
    let namespaces = b
        .js("return Array.from(document.querySelectorAll('#f-namespace option')).map(o => o.value).join(',')")
        .await;
    let namespaces = namespaces.as_str().unwrap();
    assert!(
        namespaces.contains(&ads.name) && !namespaces.contains(&search.name),
        "{namespaces}"
    );
    assert!(
        !namespaces.contains("ui-search-"),
        "no namespace of another team: {namespaces}"
    );
    // Another team's workload by its address: refused, as by the API.
    b.goto(&format!("/ui/workloads/{}/service/search-web", search.name))
        .await;
    assert_eq!(
        b.js("return document.getElementById('problem').dataset.code")
            .await,
        json!("403")
    );
    b.assert_console_errors_only("alice's pages", &["status of 403"])
        .await;
    b.close().await;

    let b = Browser::open(st).await;
    b.login("bob-token").await;
    b.goto(&format!("/ui/workloads?namespace={}", search.name))
        .await;
    b.wait_js(
        "bob's workload listed",
        &format!("return !!document.querySelector({})", css_attr(&theirs)),
        WAIT,
    )
    .await;
    b.goto("/ui/workloads").await;
    assert_eq!(
        b.js(&format!(
            "return !!document.querySelector({})",
            css_attr(&mine)
        ))
        .await,
        json!(false)
    );
    b.assert_no_console_errors("bob's pages").await;
    b.close().await;
    ads.delete().await;
    search.delete().await;
}

#[tokio::test]
async fn a_submitted_service_shows_its_split_and_turns_ready_live() {
    let (fed, st) = start().await;
    let ns = TestNamespace::create(&fed.hub(), "ui-ads").await;
    let b = Browser::open(st).await;
    b.login("alice-token").await;
    b.goto(&format!("/ui/workloads?namespace={}", ns.name))
        .await;
    b.wait_js(
        "the live connection",
        "return document.getElementById('main').dataset.connected === 'true'",
        WAIT,
    )
    .await;
    // The page stays open; everything below arrives by live updates, not by reloading.
    b.js("window.__notReloaded = true; return true").await;
    st.submit("alice-token", &ns.name, &service("web", "ads", 6))
        .await;
    let row = format!("tr[data-name={}]", css_attr(&format!("{}/web", ns.name)));
    b.wait_js(
        &format!("the service Ready on the open page\n{}", st.logs()),
        &format!(
            "var r = document.querySelector({}); return !!r && r.dataset.state === 'Ready';",
            css_attr(&row)
        ),
        WAIT,
    )
    .await;
    assert_eq!(
        b.js("return window.__notReloaded === true").await,
        json!(true),
        "updated without reload"
    );
    let split = b.text(&format!("{row} td.split")).await;
    let parts = split_parts(&split);
    assert!(parts.len() >= 2, "split over several members: {split:?}");
    assert!(
        parts.iter().all(|(_, d, w)| d == w),
        "every share ready: {split:?}"
    );
    let total: u32 = parts
        .iter()
        .map(|(_, _, w)| w.parse::<u32>().unwrap())
        .sum();
    assert_eq!(total, 6, "{split:?}");
    for (c, _, _) in &parts {
        assert!(fed.member_names().contains(c), "{c} is a member");
    }
    // The whole table, with what the other tests run beside it.
    b.goto("/ui/workloads").await;
    b.wait_js(
        "the service in the whole table",
        &format!("return !!document.querySelector({})", css_attr(&row)),
        WAIT,
    )
    .await;
    b.screenshot("workloads").await;

    // The workload page: the decision and why, per member.
    b.goto(&format!("/ui/workloads/{}/service/web", ns.name))
        .await;
    assert_eq!(
        b.js("return document.getElementById('state').dataset.state")
            .await,
        json!("Ready")
    );
    assert_eq!(b.text("#split").await, split);
    for m in fed.member_names() {
        let why = b
            .text(&format!("#placement tr[data-cluster={}]", css_attr(&m)))
            .await;
        let placed = parts.iter().any(|(c, _, _)| c == &m);
        if placed {
            assert!(
                why.contains(" replica") && why.contains("Divided") && why.contains("Ready"),
                "{m}: {why}"
            );
        } else {
            assert!(
                why.contains("eligible") || why.contains("not"),
                "{m}: {why}"
            );
        }
    }
    let conditions = b.text("#conditions").await;
    assert!(
        conditions.contains("Scheduled") && conditions.contains("Ready"),
        "{conditions}"
    );
    assert!(b.text("#yaml").await.contains("YAML"));
    assert!(
        b.text("#actions").await.contains("Delete"),
        "the owner team may delete it"
    );
    // The hub's own Event of a changed decision (a first placement is routine and has
    // none; a rescale is news), read when the page is.
    let api: Api<PinterestService> = Api::namespaced(fed.hub(), &ns.name);
    api.patch(
        "web",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"spec": {"replicas": 8}})),
    )
    .await
    .unwrap();
    let page = format!("/ui/workloads/{}/service/web", ns.name);
    let mut events = String::new();
    let mut placed: Vec<String> = Vec::new();
    for _ in 0..20 {
        b.goto(&page).await;
        events = b.text("#events").await;
        placed = api
            .get("web")
            .await
            .ok()
            .and_then(|s| s.status?.placement)
            .map(|p| p.placements.into_iter().map(|c| c.cluster).collect())
            .unwrap_or_default();
        if events.contains("Placed") && placed.iter().all(|c| events.contains(c.as_str())) {
            break;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    assert!(
        events.contains("Placed")
            && placed.len() >= 2
            && placed.iter().all(|c| events.contains(c.as_str())),
        "the hub's Placed event of the rescale names every cluster of the split {placed:?}: {events}"
    );
    b.screenshot("workload-service").await;
    b.assert_no_console_errors("the workloads and workload pages")
        .await;
    b.close().await;
    ns.delete().await;
}

#[tokio::test]
async fn a_job_set_shard_map_fills_as_shards_complete() {
    let (fed, st) = start().await;
    let ns = TestNamespace::create(&fed.hub(), "ui-ads").await;
    // The browser is up before the job set is submitted: its start is not taken from the
    // ~30 s the shards run (8 waves of 3 s on each member).
    let b = Browser::open(st).await;
    b.login("alice-token").await;
    st.submit("alice-token", &ns.name, &jobset("emb", "ads", 24, "3s"))
        .await;
    b.goto(&format!("/ui/workloads/{}/jobset/emb", ns.name))
        .await;
    let cells = b
        .js("return document.querySelectorAll('#shards .shardmap .shard').length")
        .await;
    assert_eq!(cells, json!(24), "one cell per shard");
    // Watch the map fill on the open page.
    let mut seen = Vec::new();
    let started = std::time::Instant::now();
    let mut shot = false;
    loop {
        let n = b
            .js("return document.querySelectorAll('#shards .shard[data-state=succeeded]').length")
            .await
            .as_u64()
            .unwrap();
        if seen.last() != Some(&n) {
            seen.push(n);
        }
        if !shot && n > 0 && n < 24 {
            b.screenshot("workload-jobset").await;
            shot = true;
        }
        if n == 24 {
            break;
        }
        assert!(
            started.elapsed() < WAIT * 2,
            "shards succeeded over time: {seen:?}\n{}",
            st.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        seen.iter().any(|n| *n > 0 && *n < 24),
        "the map filled step by step, not at once: {seen:?}"
    );
    assert!(
        seen.windows(2).all(|w| w[0] <= w[1]),
        "never fewer: {seen:?}"
    );
    let clusters = b
        .js("return new Set(Array.from(document.querySelectorAll('#shards .shardmap .shard')).map(s => s.dataset.cluster)).size")
        .await;
    assert!(
        clusters.as_u64().unwrap() >= 2,
        "shards ran on several members (spread 3)"
    );
    let classes = b
        .js("return document.querySelector('#shards .shardmap .shard').className")
        .await;
    assert!(
        classes.as_str().unwrap().contains(" cl"),
        "coloured by cluster: {classes}"
    );
    b.wait_js(
        "the job set Complete",
        "return document.getElementById('state').dataset.state === 'Complete'",
        WAIT,
    )
    .await;
    if !shot {
        b.screenshot("workload-jobset").await;
    }
    b.assert_no_console_errors("the job set page").await;
    b.close().await;
    ns.delete().await;
}

#[tokio::test]
async fn delete_and_rebalance_work_for_the_owner_team_and_are_refused_for_another() {
    let (fed, st) = start().await;
    let ns = TestNamespace::create(&fed.hub(), "ui-ads").await;
    st.submit("alice-token", &ns.name, &service("doomed", "ads", 1))
        .await;
    let api: Api<PinterestService> = Api::namespaced(fed.hub(), &ns.name);
    let page = format!("/ui/workloads/{}/service/doomed", ns.name);
    // Placed first: the rebalance buttons come with a decision.
    eventually(WAIT, "doomed placed", || {
        let api = api.clone();
        async move {
            api.get_opt("doomed")
                .await
                .unwrap()
                .and_then(|s| s.status)
                .and_then(|s| s.placement)
                .is_some_and(|p| !p.placements.is_empty())
        }
    })
    .await;

    // carol's team reads the namespace but does not own the workload.
    let b = Browser::open(st).await;
    b.login("carol-token").await;
    b.goto(&page).await;
    assert_eq!(
        b.js("return !!document.getElementById('rebalance') || !!document.getElementById('rebalance-preview')")
            .await,
        json!(false),
        "carol is offered a rebalance"
    );
    assert!(
        b.text("#delete-refused").await.contains("may not delete"),
        "{}",
        b.text("#actions").await
    );
    assert_eq!(
        b.js("return !!document.getElementById('delete')").await,
        json!(false)
    );
    // Posting anyway, with her own valid CSRF token: refused by the server.
    let csrf = b
        .js("return document.querySelector('meta[name=csrf-token]').content")
        .await;
    let (code, body) = b
        .post_from_page(
            &format!("{page}/delete"),
            &[("csrf", csrf.as_str().unwrap())],
        )
        .await;
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("ads"), "names the owner team: {body}");
    assert!(
        api.get_opt("doomed").await.unwrap().is_some(),
        "still there"
    );
    let (code, body) = b
        .post_from_page(
            &format!("{page}/rebalance"),
            &[("csrf", csrf.as_str().unwrap()), ("dry_run", "false")],
        )
        .await;
    assert_eq!(code, 403, "{body}");
    let asked = |s: Option<PinterestService>| {
        s.is_some_and(|s| {
            s.metadata
                .annotations
                .unwrap_or_default()
                .contains_key(pinfed::api::federation::ANNOTATION_REBALANCE)
        })
    };
    assert!(
        !asked(api.get_opt("doomed").await.unwrap()),
        "carol's refused rebalance was handed to the hub"
    );
    b.assert_console_errors_only("carol's refused delete", &["status of 403"])
        .await;
    b.close().await;

    let b = Browser::open(st).await;
    b.login("alice-token").await;
    b.goto(&page).await;
    // A preview says what would move and writes nothing; the request goes to the hub,
    // which records that it acted.
    b.click_id("rebalance-preview").await;
    b.wait_js(
        "the preview's flash",
        "var f = document.getElementById('flash'); return !!f && f.innerText.indexOf('dry run') >= 0",
        WAIT,
    )
    .await;
    let flash = b.text("#flash").await;
    assert!(
        flash.contains("rebalance of") && flash.contains("would move"),
        "{flash}"
    );
    assert!(
        !asked(api.get_opt("doomed").await.unwrap()),
        "a preview wrote the request"
    );
    b.click_id("rebalance").await;
    b.wait_js(
        "the rebalance's flash",
        "var f = document.getElementById('flash'); return !!f && f.innerText.indexOf('asked (request') >= 0",
        WAIT,
    )
    .await;
    assert!(asked(api.get_opt("doomed").await.unwrap()));
    eventually(WAIT, "the hub acted on the rebalance", || {
        let api = api.clone();
        async move {
            api.get_opt("doomed")
                .await
                .unwrap()
                .and_then(|s| s.status)
                .and_then(|s| s.placement)
                .is_some_and(|p| p.rebalanced.is_some())
        }
    })
    .await;
    b.click_id("delete-open").await;
    b.click_id("delete").await;
    // The page still shows the rebalance's flash until the delete's answer replaces it:
    // wait for the delete's own words, not for any flash.
    b.wait_js(
        "back on the workloads page with the delete's flash",
        "var f = document.getElementById('flash'); return !!f && f.innerText.indexOf('Deleted ') >= 0",
        WAIT,
    )
    .await;
    assert!(
        b.text("#flash")
            .await
            .contains(&format!("Deleted {}/service/doomed", ns.name))
    );
    eventually(WAIT, "the service deleted on the hub", || {
        let api = api.clone();
        async move {
            api.get_opt("doomed")
                .await
                .unwrap()
                .is_none_or(|s| s.metadata.deletion_timestamp.is_some())
        }
    })
    .await;
    b.assert_no_console_errors("alice's delete").await;
    b.close().await;
    ns.delete().await;
}

#[tokio::test]
async fn actions_without_csrf_or_from_another_site_are_refused() {
    let (fed, st) = start().await;
    let ns = TestNamespace::create(&fed.hub(), "ui-ads").await;
    st.submit("alice-token", &ns.name, &service("target", "ads", 1))
        .await;
    let api: Api<PinterestService> = Api::namespaced(fed.hub(), &ns.name);
    let action = format!("/ui/workloads/{}/service/target/delete", ns.name);
    let b = Browser::open(st).await;
    b.login("alice-token").await;
    b.goto("/ui/fleet").await;
    let (code, body) = b.post_from_page(&action, &[]).await;
    assert_eq!(code, 403, "no CSRF token: {body}");
    assert!(body.contains("no CSRF token"), "{body}");
    let (code, body) = b.post_from_page(&action, &[("csrf", "forged")]).await;
    assert_eq!(code, 403, "a wrong CSRF token: {body}");
    let (code, _) = b.post_from_page("/ui/logout", &[]).await;
    assert_eq!(code, 403, "logout needs the token too");

    // Another site's form: the right cookie and even the right token, but its Origin.
    let cookie = b.session_cookie().await;
    let csrf = b
        .js("return document.querySelector('meta[name=csrf-token]').content")
        .await;
    let host = st.server.trim_start_matches("http://");
    let body = format!("csrf={}", csrf.as_str().unwrap());
    let (code, resp) = raw_request(
        &st.server,
        &format!(
            "POST {action} HTTP/1.1\r\nHost: {host}\r\nOrigin: http://evil.example\r\nCookie: pinfed_session={cookie}\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
    .await;
    assert_eq!(code, 403, "{resp}");
    assert!(resp.contains("another site"), "{resp}");
    // No session at all: to the login page, nothing done.
    let (code, resp) = raw_request(
        &st.server,
        &format!(
            "POST {action} HTTP/1.1\r\nHost: {host}\r\nCookie: pinfed_session=forged\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
    .await;
    assert_eq!(code, 303, "{resp}");
    assert!(
        resp.to_ascii_lowercase().contains("location: /ui/login"),
        "{resp}"
    );
    // Pages carry a CSP with no inline script, and the cookie is HttpOnly and Strict.
    let (_, resp) = raw_request(
        &st.server,
        &format!("GET /ui/login HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
    )
    .await;
    assert!(resp.contains("script-src 'self'"), "{resp}");
    for home in ["/", "/ui", "/ui/"] {
        let (code, resp) = raw_request(
            &st.server,
            &format!("GET {home} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
        )
        .await;
        assert_eq!(code, 303, "{home}: {resp}");
        assert!(
            resp.to_ascii_lowercase().contains("location: /ui/fleet"),
            "{home}: {resp}"
        );
    }
    let login = "token=alice-token&next=%2Fui%2Ffleet";
    let (code, resp) = raw_request(
        &st.server,
        &format!(
            "POST /ui/login HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/x-www-form-urlencoded\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{login}",
            login.len()
        ),
    )
    .await;
    assert_eq!(code, 303, "{resp}");
    let set_cookie = resp
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("set-cookie:"))
        .unwrap_or_else(|| panic!("a session cookie: {resp}"));
    assert!(
        set_cookie.contains("HttpOnly") && set_cookie.contains("SameSite=Strict"),
        "{set_cookie}"
    );
    assert!(
        api.get_opt("target").await.unwrap().is_some(),
        "nothing was deleted"
    );
    b.assert_console_errors_only("refused actions", &["status of 403"])
        .await;
    b.close().await;
    ns.delete().await;
}

#[tokio::test]
async fn unknown_pages_give_a_404_page_and_a_lost_session_goes_to_login() {
    let (fed, st) = start().await;
    let ns = TestNamespace::create(&fed.hub(), "ui-ads").await;
    let b = Browser::open(st).await;
    b.login("alice-token").await;
    for (path, code) in [
        ("/ui/no-such-page".to_string(), "404"),
        (format!("/ui/workloads/{}/service/missing", ns.name), "404"),
        (format!("/ui/workloads/{}/pods/x", ns.name), "404"),
        ("/ui/workloads?page=zero".to_string(), "400"),
        ("/ui/workloads?state=sleepy".to_string(), "400"),
    ] {
        b.goto(&path).await;
        assert_eq!(
            b.js("var p = document.getElementById('problem'); return p ? p.dataset.code : null")
                .await,
            json!(code),
            "{path}"
        );
        assert!(!b.text("body").await.contains("panicked"), "{path}");
        if path == "/ui/no-such-page" {
            b.screenshot("not-found").await;
        }
    }
    b.assert_console_errors_only("problem pages", &["status of 404", "status of 400"])
        .await;

    // The session ends (expired, or the JSS restarted): an open live page goes to the
    // login on its next update, and the login returns to that page.
    b.goto(&format!("/ui/workloads?namespace={}", ns.name))
        .await;
    b.wait_js(
        "the live connection",
        "return document.getElementById('main').dataset.connected === 'true'",
        WAIT,
    )
    .await;
    b.c.delete_cookie("pinfed_session").await.unwrap();
    st.submit("alice-token", &ns.name, &service("poke", "ads", 1))
        .await;
    b.wait_js(
        "the login page",
        "return location.pathname === '/ui/login'",
        Duration::from_secs(40),
    )
    .await;
    assert!(
        b.path()
            .await
            .contains(&format!("next=%2Fui%2Fworkloads%3Fnamespace%3D{}", ns.name)),
        "{}",
        b.path().await
    );
    b.c.find(fantoccini::Locator::Id("token"))
        .await
        .unwrap()
        .send_keys("alice-token")
        .await
        .unwrap();
    b.c.find(fantoccini::Locator::Id("login"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    b.wait_js(
        "back on the workloads page",
        "return location.pathname === '/ui/workloads'",
        WAIT,
    )
    .await;
    assert!(b.path().await.contains(&ns.name));
    b.assert_console_errors_only("a lost session", &["status of 401", "EventSource"])
        .await;
    b.close().await;
    ns.delete().await;
}

#[tokio::test]
async fn quotas_and_owners_show_what_each_team_uses() {
    let (fed, st) = start().await;
    let hub = fed.hub();
    let ns = TestNamespace::create(&hub, "ui-ads").await;
    let q: FederatedQuota = serde_json::from_value(json!({
        "apiVersion": "federation.pinterest.com/v1alpha1", "kind": "FederatedQuota",
        "metadata": {"name": "team"},
        "spec": {"hard": {"cpu": "4", "memory": "8Gi", "pods": "20"},
                 "perCluster": {"use1a": {"cpu": "2"}}}
    }))
    .unwrap();
    Api::<FederatedQuota>::namespaced(hub.clone(), &ns.name)
        .create(&PostParams::default(), &q)
        .await
        .unwrap();
    st.submit("alice-token", &ns.name, &service("api", "ads", 3))
        .await;

    let b = Browser::open(st).await;
    b.login("carol-token").await; // reviewed: same namespaces as ads
    b.goto("/ui/quotas").await;
    let row = format!("tr[data-quota={}]", css_attr(&format!("{}/team", ns.name)));
    b.wait_js(
        &format!("the quota's pods used by the service\n{}", st.logs()),
        &format!(
            "var r = document.querySelector({}); return !!r && r.querySelector('td.res-pods').innerText.startsWith('3 / 20');",
            css_attr(&row)
        ),
        WAIT,
    )
    .await;
    assert!(b.text(&format!("{row} td.res-cpu")).await.contains("/ 4"));
    assert!(
        b.text("table.quotas").await.contains("use1a"),
        "per-cluster caps"
    );
    b.screenshot("quotas").await;
    b.goto("/ui/owners").await;
    let team = b.text("section[data-team=ads]").await;
    assert!(
        team.contains(&format!("{}/api", ns.name)) && team.contains("ads@pinterest.com"),
        "{team}"
    );
    // The built-in profile's expiryDays (90): the row says when, and that it is not past.
    let expires = b
        .text("section[data-team=ads] tr[data-expired=false] td.expires")
        .await;
    let at: k8s_openapi::jiff::Timestamp = expires
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("expiry cell {expires:?}: {e}"));
    let days = (at.as_second() - k8s_openapi::jiff::Timestamp::now().as_second()) / 86_400;
    assert!(
        (88..=90).contains(&days),
        "expires in {days} days: {expires}"
    );
    b.screenshot("owners").await;
    b.assert_no_console_errors("quotas and owners").await;
    b.close().await;

    let b = Browser::open(st).await;
    b.login("bob-token").await;
    b.goto("/ui/quotas").await;
    assert_eq!(
        b.js(&format!(
            "return !!document.querySelector({})",
            css_attr(&row)
        ))
        .await,
        json!(false),
        "search does not see ads's quota"
    );
    b.close().await;
    ns.delete().await;
}

/// A POST from the page's script that follows the redirect, as a form's submission does;
/// returns the status and the page it lands on.
async fn post_following(b: &Browser, path: &str, form: &[(&str, &str)]) -> (u16, String) {
    let body: Vec<String> = form
        .iter()
        .map(|(k, v)| format!("{k}={}", pinfed::jss::ui::html::url_part(v)))
        .collect();
    let script = format!(
        "var done = arguments[arguments.length - 1];
         fetch({}, {{method: 'POST', credentials: 'same-origin',
            headers: {{'Content-Type': 'application/x-www-form-urlencoded'}}, body: {}}})
           .then(function (r) {{ return r.text().then(function (t) {{ done([r.status, t]); }}); }})
           .catch(function (e) {{ done([0, String(e)]); }});",
        Value::String(path.into()),
        Value::String(body.join("&"))
    );
    let v = b.c.execute_async(&script, vec![]).await.unwrap();
    (
        v[0].as_u64().unwrap_or(0) as u16,
        v[1].as_str().unwrap_or_default().to_string(),
    )
}

#[tokio::test]
async fn a_staged_rollout_is_approved_paused_and_undone_from_its_page_by_its_team_only() {
    let (fed, st) = start().await;
    let started = std::time::Instant::now();
    let hub = fed.hub();
    let ns = TestNamespace::create(&hub, "ui-ads").await;
    let first = fed.member_names()[0].clone();
    let mut svc = service("web", "ads", 3);
    svc["spec"]["placement"] = json!({"spread": {"minClusters": 3}});
    svc["spec"]["rollout"] = json!({
        "stages": [{"name": "first", "approval": true, "clusters": [first]}, {"name": "rest"}],
        "progressDeadlineSeconds": 60,
    });
    let api: Api<PinterestService> = Api::namespaced(hub.clone(), &ns.name);
    let rollout_path = format!("/v1/workloads/{}/service/web/rollout", ns.name);
    let revision = || {
        let alice = st.api("alice-token");
        let path = rollout_path.clone();
        async move {
            let r = alice.get(&path).await.unwrap();
            assert_eq!(r.status, 200, "{}", r.text);
            r.body["status"]["revision"].as_i64().unwrap_or(0)
        }
    };
    // Revision 1 is recorded at the hub's first look; a new image is revision 2, whose
    // first stage waits for approval.
    st.submit("alice-token", &ns.name, &svc).await;
    eventually(WAIT, "revision 1 recorded", || async {
        revision().await == 1
    })
    .await;
    svc["spec"]["template"]["spec"]["containers"][0]["image"] = json!("registry.example/app:2");
    st.submit("alice-token", &ns.name, &svc).await;
    let page = format!("/ui/workloads/{}/service/web", ns.name);
    let phase_is = |p: &str| {
        format!(
            "var e = document.getElementById('rollout-phase'); return !!e && e.dataset.phase === '{p}';"
        )
    };

    // carol's team reads the namespace but does not own the workload: no buttons, and a
    // forced approval with her own valid CSRF token is refused.
    let b = Browser::open(st).await;
    b.login("carol-token").await;
    b.goto(&page).await;
    b.wait_js(
        &format!("revision 2 waiting for approval\n{}", st.logs()),
        &phase_is("WaitingForApproval"),
        WAIT,
    )
    .await;
    assert!(
        b.text("#rollout-refused").await.contains("may not act"),
        "{}",
        b.text("#rollout").await
    );
    assert_eq!(
        b.js("return document.querySelectorAll('#rollout form, #rollout-approve, #rollout-pause, #rollout-undo').length")
            .await,
        json!(0),
        "no rollout buttons for another team"
    );
    let csrf = b
        .js("return document.querySelector('meta[name=csrf-token]').content")
        .await;
    let (code, body) = b
        .post_from_page(
            &format!("{page}/rollout/approve"),
            &[("csrf", csrf.as_str().unwrap()), ("stage", "first")],
        )
        .await;
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("ads"), "names the owner team: {body}");
    let approved = |o: &PinterestService| {
        o.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(pinfed::api::rollout::ANNOTATION_APPROVED).cloned())
    };
    assert_eq!(
        approved(&api.get("web").await.unwrap()),
        None,
        "nothing approved"
    );
    b.assert_console_errors_only("carol's refused approval", &["status of 403"])
        .await;
    b.close().await;

    // alice's team owns it: the page shows where revision 2 stands, and she approves.
    let b = Browser::open(st).await;
    b.login("alice-token").await;
    b.goto(&page).await;
    b.wait_js("WaitingForApproval", &phase_is("WaitingForApproval"), WAIT)
        .await;
    assert_eq!(b.text("#rollout-revision").await, "2");
    assert_eq!(b.text("#rollout-stable").await, "1");
    let strip = b
        .js("return Array.from(document.querySelectorAll('#stages li')).map(l => [l.dataset.stage, l.dataset.state, l.classList.contains('current')])")
        .await;
    assert_eq!(
        strip,
        json!([
            ["first", "waiting-for-approval", true],
            ["rest", "not-started", false]
        ]),
        "the stage strip"
    );
    let why = b
        .text(&format!(
            "#rollout table.rollout-members tr[data-cluster={}] td.why",
            css_attr(&first)
        ))
        .await;
    assert!(why.contains("approval needed"), "{why}");
    assert!(
        b.text("#rolled-out").await.contains("WaitingForApproval"),
        "the RolledOut condition: {}",
        b.text("#rollout").await
    );
    let history = b
        .js("return Array.from(document.querySelectorAll('#rollout table.history tr[data-revision]')).map(r => r.dataset.revision)")
        .await;
    assert_eq!(
        history,
        json!(["2", "1"]),
        "the recorded revisions, newest first"
    );
    assert!(
        b.text("#rollout table.history")
            .await
            .contains("registry.example/app:1"),
        "{}",
        b.text("#rollout table.history").await
    );
    b.js("document.getElementById('rollout').scrollIntoView(); return true")
        .await;
    b.screenshot("workload-rollout").await;
    b.click_id("rollout-approve").await;
    b.wait_js(
        "the approval's flash message",
        "var f = document.getElementById('flash'); return !!f && f.dataset.ok === 'true';",
        WAIT,
    )
    .await;
    let flash = b.text("#flash").await;
    assert!(
        flash.contains("approved stage \"first\" (0) of revision 2"),
        "{flash}"
    );
    assert_eq!(
        approved(&api.get("web").await.unwrap()).as_deref(),
        Some("2/0")
    );
    b.wait_js(
        &format!("the rollout past its approval on the open page\n{}", st.logs()),
        "var e = document.getElementById('rollout-phase'); return !!e && e.dataset.phase !== 'WaitingForApproval';",
        WAIT,
    )
    .await;
    assert_eq!(
        b.js("return !!document.getElementById('rollout-approve')")
            .await,
        json!(false),
        "nothing waits for approval now"
    );
    let state = b
        .js("return document.querySelector('#stages li[data-index=\"0\"]').dataset.state")
        .await;
    assert!(
        state == json!("in-progress") || state == json!("done"),
        "the first stage goes on: {state}"
    );
    // The same approval again: nothing waits, and the page says so.
    let csrf = b
        .js("return document.querySelector('meta[name=csrf-token]').content")
        .await;
    let (code, html) = post_following(
        &b,
        &format!("{page}/rollout/approve"),
        &[
            ("csrf", csrf.as_str().unwrap()),
            ("stage", "first"),
            ("revision", "2"),
        ],
    )
    .await;
    let flash = html
        .split("id=\"flash\"")
        .nth(1)
        .and_then(|f| f.split("</p>").next())
        .unwrap_or_default();
    assert_eq!(code, 200, "{html}");
    assert!(
        flash.contains("data-ok=\"false\"") && flash.contains("not waiting for approval"),
        "the flash of a second approval: {flash:?}\n{}",
        st.logs()
    );

    // Pause, then resume.
    b.goto(&page).await;
    b.click_id("rollout-pause").await;
    b.wait_js(
        "paused",
        "return !!document.getElementById('rollout-paused') && !!document.getElementById('rollout-resume')",
        WAIT,
    )
    .await;
    assert!(
        b.text("#flash").await.contains("paused"),
        "{}",
        b.text("#flash").await
    );
    b.click_id("rollout-resume").await;
    b.wait_js(
        "resumed",
        "var f = document.getElementById('flash'); return !!f && f.innerText.indexOf('resumed') >= 0 && !document.getElementById('rollout-paused')",
        WAIT,
    )
    .await;

    // Undo to revision 1, chosen in the select: the spec runs its image again, and the
    // hub rolls it out as revision 3 (whose first stage waits for approval again).
    b.click_id("rollout-undo-open").await;
    b.select_id("undo-revision", "1").await;
    b.click_id("rollout-undo-submit").await;
    b.wait_js(
        "the undo's flash message",
        "var f = document.getElementById('flash'); return !!f && f.innerText.indexOf('revision 1') >= 0;",
        WAIT,
    )
    .await;
    assert_eq!(
        b.js("return document.getElementById('flash').dataset.ok")
            .await,
        json!("true"),
        "{}",
        b.text("#flash").await
    );
    let spec = serde_json::to_value(api.get("web").await.unwrap().spec).unwrap();
    assert_eq!(
        spec["template"]["spec"]["containers"][0]["image"],
        "registry.example/app:1"
    );
    b.wait_js(
        &format!("revision 3 on the open page\n{}", st.logs()),
        "var r = document.getElementById('rollout'); return !!r && r.dataset.revision === '3';",
        WAIT,
    )
    .await;
    b.assert_no_console_errors("alice's rollout actions").await;
    b.close().await;
    ns.delete().await;
    eprintln!(
        "the rollout in the UI: {:?} (after the shared setup)",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_dry_run_from_the_page_shows_the_split_each_members_objects_and_writes_nothing() {
    let (fed, st) = start().await;
    let hub = fed.hub();
    let ns = TestNamespace::create(&hub, "ui-ads").await;
    let members = fed.member_names();
    let mut svc = service("planned", "ads", 3);
    svc["spec"]["placement"] = json!({"spread": {"minClusters": 3}});
    svc["spec"]["overrides"] = json!([{"name": "mirror", "clusters": [members[0]],
        "image": {"registry": "mirror.{{cluster}}.example"}}]);
    let text = serde_json::to_string_pretty(&svc).unwrap();

    let b = Browser::open(st).await;
    b.login("alice-token").await;
    b.goto("/ui/plan").await;
    b.js(&format!(
        "document.querySelector('#plan-form input[name=namespace]').value = {};
         document.querySelector('#plan-form textarea').value = {};
         document.getElementById('plan-form').submit(); return true",
        Value::String(ns.name.clone()),
        Value::String(text)
    ))
    .await;
    b.wait_js(
        "the dry run's answer",
        "return !!document.getElementById('answer') || !!document.getElementById('refused')",
        WAIT,
    )
    .await;
    let refused = b.text("#refused").await;
    assert!(refused.is_empty(), "refused: {refused}");
    b.screenshot("plan").await;
    // The split: every member with a share and its reason with numbers.
    for m in &members {
        let row = b
            .text(&format!("#split tr[data-cluster={}]", css_attr(m)))
            .await;
        assert!(row.contains("1 replica"), "{m}: {row}");
        assert!(row.contains("room"), "{m}: {row}");
    }
    // Each member's objects, the override only in the member it selects.
    let objects = |m: &str| {
        format!(
            "var d = document.querySelector('#members details[data-cluster={}] pre.objects'); return d ? d.textContent : ''",
            css_attr(m)
        )
    };
    let first = b.js(&objects(&members[0])).await;
    assert!(
        first
            .as_str()
            .unwrap_or_default()
            .contains(&format!("image: mirror.{}.example/app:1", members[0])),
        "{first}"
    );
    let second = b.js(&objects(&members[1])).await;
    assert!(
        second
            .as_str()
            .unwrap_or_default()
            .contains("image: registry.example/app:1"),
        "{second}"
    );
    // Nothing was submitted.
    let api: Api<PinterestService> = Api::namespaced(hub.clone(), &ns.name);
    assert!(api.get_opt("planned").await.unwrap().is_none());
    b.assert_no_console_errors("the dry-run page").await;
    // A refusal names the field (a 422 page).
    svc["spec"]["overrides"] =
        json!([{"name": "nowhere", "clusters": ["no-such-member"], "image": {"tag": "2"}}]);
    b.goto("/ui/plan").await;
    b.js(&format!(
        "document.querySelector('#plan-form input[name=namespace]').value = {};
         document.querySelector('#plan-form textarea').value = {};
         document.getElementById('plan-form').submit(); return true",
        Value::String(ns.name.clone()),
        Value::String(serde_json::to_string(&svc).unwrap())
    ))
    .await;
    b.wait_js(
        "the refusal",
        "return !!document.getElementById('refused')",
        WAIT,
    )
    .await;
    let refused = b.text("#refused").await;
    assert!(
        refused.contains("spec.overrides[0]") && refused.contains("selects no member"),
        "{refused}"
    );
    b.close().await;
    ns.delete().await;
}
