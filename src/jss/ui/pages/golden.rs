//! Golden pages: each page rendered from fixed view models, compared with the HTML kept in
//! `golden/` (recorded from the hand-written renderer before the pages moved to templates,
//! so the move is proven to change no element, attribute, link or text). Whitespace between
//! tags and the spelling of an escaped `"` (`&quot;` or `&#34;`) are not compared.
//! `PINFED_UPDATE_GOLDEN=1 cargo test --lib jss::ui::pages::golden` records them again after
//! an intended change.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::jiff::Timestamp;

use super::tests::{member_row, rollout_view};
use super::*;
use crate::jss::ui::html::{Viewer, page};
use crate::jss::ui::model::{ResourceUse, ShardState, SplitPart};

fn normalize(s: &str) -> String {
    let s = s.replace("&quot;", "&#34;");
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(c);
        if c == '>' {
            let mut ws = String::new();
            while let Some(&n) = chars.peek() {
                if n.is_whitespace() {
                    ws.push(n);
                    chars.next();
                } else {
                    break;
                }
            }
            if chars.peek() != Some(&'<') {
                out.push_str(&ws);
            }
        }
    }
    out
}

fn check(name: &str, html: &str) {
    let path = format!(
        "{}/src/jss/ui/pages/golden/{name}.html",
        env!("CARGO_MANIFEST_DIR")
    );
    if std::env::var_os("PINFED_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, html).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let (want, got) = (normalize(want.trim_end()), normalize(html.trim_end()));
    if want != got {
        let at = want
            .bytes()
            .zip(got.bytes())
            .position(|(a, b)| a != b)
            .unwrap_or(want.len().min(got.len()));
        let from = at.saturating_sub(200);
        panic!(
            "{name}: differs at byte {at}\n  want: {}\n  got:  {}",
            &want[from..(at + 200).min(want.len())],
            &got[from..(at + 200).min(got.len())]
        );
    }
}

fn now() -> Timestamp {
    "2026-11-23T12:00:00Z".parse().unwrap()
}

fn ts(s: &str) -> Option<Timestamp> {
    Some(s.parse().unwrap())
}

#[test]
fn login_problem_and_the_frame() {
    check("login", &login(None, "/ui/workloads?name=a&b=<c>"));
    check(
        "login-error",
        &login(Some("The token <was> refused"), "/ui/"),
    );
    check(
        "problem",
        &problem(404, "Not <found>", "No \"web\" in 'ads' & more"),
    );
    let v = Viewer {
        user: "al<ice",
        teams: vec!["ads", "m&l"],
        csrf: "tok\"",
    };
    check(
        "frame",
        &page(
            "Fl<eet",
            "/ui/workloads",
            Some(&v),
            Some("wl\"x"),
            "<p>x</p>",
        ),
    );
    check(
        "frame-anonymous",
        &page("Log in", "", None, None, "<p>y</p>"),
    );
}

fn fleet_rows() -> Vec<MemberRow> {
    let mut a = member_row("use1a", Health::Ready);
    a.region = "us-east-1".into();
    a.zone = "<z>".into();
    a.since = ts("2026-11-23T11:00:00Z");
    a.message = "all \"good\"".into();
    a.version = "v1.36".into();
    a.nodes = Some(3);
    a.last_heartbeat = ts("2026-11-23T11:59:50Z");
    a.workloads = 7;
    a.weight = 2;
    a.taints = vec!["gpu=yes:NoSchedule".into(), "<x>".into()];
    a.resources = vec![
        ResourceUse {
            resource: Resource::Cpu,
            capacity: Some(Milli(8000)),
            allocatable: Some(Milli(8000)),
            allocated: Some(Milli(6500)),
            available: Some(Milli(1500)),
        },
        ResourceUse {
            resource: Resource::Memory,
            capacity: None,
            allocatable: Some(Milli(0)),
            allocated: None,
            available: None,
        },
        ResourceUse {
            resource: Resource::Gpus,
            capacity: Some(Milli(4000)),
            allocatable: Some(Milli(4000)),
            allocated: Some(Milli(5000)),
            available: None,
        },
        ResourceUse {
            resource: Resource::Pods,
            capacity: None,
            allocatable: None,
            allocated: None,
            available: None,
        },
    ];
    let mut b = member_row("use 1b&", Health::Draining);
    b.mode = "Pull";
    b.nodes = None;
    vec![a, b]
}

#[test]
fn fleet_pages() {
    let rows = fleet_rows();
    let held = |renewed: &str| Leader::Held {
        holder: "hub-<0>".into(),
        renewed: ts(renewed),
        acquired: ts("2026-11-23T10:00:00Z"),
        duration_secs: Some(15),
        transitions: Some(3),
    };
    check(
        "fleet-admin",
        &fleet(
            &rows,
            &held("2026-11-23T11:59:55Z"),
            now(),
            Some("use1b <is> draining"),
            Some("tok\"<"),
        ),
    );
    check(
        "fleet-expired",
        &fleet(&rows, &held("2026-11-23T11:00:00Z"), now(), None, None),
    );
    let no_times = Leader::Held {
        holder: "h".into(),
        renewed: None,
        acquired: None,
        duration_secs: None,
        transitions: None,
    };
    check(
        "fleet-no-times",
        &fleet(&rows, &no_times, now(), None, None),
    );
    check(
        "fleet-no-lease",
        &fleet(
            &[],
            &Leader::NoLease {
                lease: "pinfed-system/<hub>".into(),
            },
            now(),
            None,
            Some("t"),
        ),
    );
    check(
        "fleet-unreadable",
        &fleet(
            &rows[..1],
            &Leader::Unreadable {
                lease: "l".into(),
                error: "403 <forbidden>".into(),
            },
            now(),
            None,
            None,
        ),
    );
}

fn wl_row(kind: WorkloadKind, ns: &str, name: &str, state: WorkloadState) -> WorkloadRow {
    WorkloadRow {
        kind,
        namespace: ns.into(),
        name: name.into(),
        team: format!("team-{ns}"),
        state,
        split: vec![],
        unplaced: 0,
        created: ts("2026-11-22T12:00:00Z"),
    }
}

#[test]
fn workloads_pages() {
    let mut a = wl_row(WorkloadKind::Service, "ads", "web<1>", WorkloadState::Ready);
    a.split = vec![
        SplitPart {
            cluster: "use1a".into(),
            done: Some(2),
            want: Some(3),
            state: None,
        },
        SplitPart {
            cluster: "euw1".into(),
            done: None,
            want: None,
            state: Some("Pending".into()),
        },
    ];
    a.unplaced = 2;
    let b = wl_row(WorkloadKind::JobSet, "ml", "train", WorkloadState::Unplaced);
    let mut c = wl_row(
        WorkloadKind::TrainingJob,
        "ml",
        "big & bold",
        WorkloadState::Ready,
    );
    c.created = None;
    let rows: Vec<Arc<WorkloadRow>> = vec![Arc::new(a), Arc::new(b), Arc::new(c)];
    let members = vec!["use1a".to_string(), "use1b".to_string()];
    let choices = FilterChoices {
        namespaces: vec!["ads".into(), "m\"l".into()],
        teams: vec!["team-ads".into(), "team-ml".into()],
        clusters: vec!["euw1".into(), "use1a".into(), "use1b".into()],
    };
    let palette = Palette::new(members.iter().map(String::as_str));
    let mut f = Filter {
        namespace: Some("m\"l".into()),
        kind: Some(WorkloadKind::JobSet),
        team: None,
        state: Some(WorkloadState::Ready),
        cluster: Some("use1a".into()),
        name: Some("a b&<c>".into()),
        group: Grouping::ALL[1],
        page: 2,
    };
    let p = Page {
        rows: rows.clone(),
        total: 250,
        page: 2,
        pages: 3,
    };
    check(
        "workloads-grouped",
        &workloads(&p, &f, &choices, &palette, Some("deleted <x>"), now()),
    );
    f.group = Grouping::None;
    let first = Page {
        rows: rows.clone(),
        total: 3,
        page: 1,
        pages: 1,
    };
    check(
        "workloads-one-page",
        &workloads(&first, &f, &choices, &palette, None, now()),
    );
    let empty = Page {
        rows: vec![],
        total: 0,
        page: 1,
        pages: 1,
    };
    check(
        "workloads-empty",
        &workloads(&empty, &Filter::default(), &choices, &palette, None, now()),
    );
    check(
        "workloads-page",
        &workloads_page(rows, &members, &Filter::default(), None, now()),
    );
}

fn decision() -> PlacementDecision {
    serde_json::from_value(serde_json::json!({
        "strategy": "Divided",
        "placements": [{"cluster": "use1a", "shards": "0-3"}], "unplaced": 3,
        "reason": "no room <anywhere>",
        "queue": {"position": 2, "waiting": 5, "priority": 1000, "effectivePriority": 1010,
            "priorityClassName": "high", "since": "2026-11-23T11:57:00Z",
            "waitingFor": "room in use1b <script>alert(1)</script>"},
        "preemptions": [
            {"by": "PinterestTrainingJob/ml/<big>", "byPriority": 2000,
             "cluster": "use1a", "pods": 3, "shards": "4-6", "time": "2026-11-23T11:58:00Z",
             "reason": "room for <big>"},
            {"by": "x", "byPriority": 1, "cluster": "use1b", "pods": 2, "replicas": 2,
             "time": "2026-11-23T11:58:00Z", "reason": "r"},
            {"by": "y", "byPriority": 1, "cluster": "nowhere", "pods": 1,
             "time": "2026-11-23T11:58:00Z", "reason": "r"}],
        "applicationFailovers": [{"cluster": "use1b", "generation": 4,
            "time": "2026-11-23T11:59:00Z", "reason": "0 of 2 <b>"}]
    }))
    .unwrap()
}

fn slices() -> Vec<MemberWorkloadStatus> {
    serde_json::from_value(serde_json::json!([
        {"cluster": "use1a", "observedTime": "2026-11-23T11:59:00Z", "state": "Running",
         "replicas": 3, "readyReplicas": 2, "message": "rolling <out>"},
        {"cluster": "use1b", "observedTime": "2026-11-23T11:58:00Z",
         "shardsRunning": 2, "shardsFailed": 1},
        {"cluster": "euw1", "observedTime": "2026-11-23T11:58:00Z"}
    ]))
    .unwrap()
}

fn conditions() -> Vec<Condition> {
    serde_json::from_value(serde_json::json!([
        {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-23T11:00:00Z",
         "reason": "AllReady", "message": "3 of 3 <ready>"},
        {"type": "Placed<>", "status": "False", "lastTransitionTime": "2026-11-23T11:00:00Z",
         "reason": "Unplaced", "message": ""},
        {"type": "Degraded", "status": "Unknown", "lastTransitionTime": "2026-11-23T11:00:00Z",
         "reason": "", "message": "m"}
    ]))
    .unwrap()
}

fn events() -> Vec<Event> {
    serde_json::from_value(serde_json::json!([
        {"metadata": {"name": "e1", "creationTimestamp": "2026-11-23T11:00:00Z"},
         "involvedObject": {}, "type": "Normal", "reason": "Placed", "message": "on <use1a>",
         "count": 4, "lastTimestamp": "2026-11-23T11:50:00Z"},
        {"metadata": {"name": "e2"}, "involvedObject": {}}
    ]))
    .unwrap()
}

#[allow(clippy::too_many_arguments)]
fn detail_page(
    view: &RolloutView,
    decision: Option<&PlacementDecision>,
    full: bool,
    may: Result<(), String>,
    flash: Option<&Flash>,
    history_error: Option<String>,
    rolled_out: Option<&Condition>,
) -> String {
    let mut row = wl_row(
        WorkloadKind::JobSet,
        "ml",
        "small<1>",
        WorkloadState::Unplaced,
    );
    row.split = vec![SplitPart {
        cluster: "use1a".into(),
        done: Some(1),
        want: Some(4),
        state: None,
    }];
    row.unplaced = 3;
    let palette = Palette::new(["use1a", "use1b"]);
    let slices = slices();
    let conditions = conditions();
    let reasons = vec![
        MemberReason {
            cluster: "use1a".into(),
            share: Some("shards 0-3".into()),
            why: "most room <free>".into(),
        },
        MemberReason {
            cluster: "use1b".into(),
            share: None,
            why: "tainted".into(),
        },
        MemberReason {
            cluster: "cl<3>".into(),
            share: None,
            why: "down".into(),
        },
    ];
    let cells = vec![
        ShardCell {
            index: 0,
            state: ShardState::Succeeded,
            cluster: Some("use1a".into()),
        },
        ShardCell {
            index: 1,
            state: ShardState::Failed,
            cluster: Some("use1b".into()),
        },
        ShardCell {
            index: 2,
            state: ShardState::Unready,
            cluster: Some("<x>".into()),
        },
        ShardCell {
            index: 3,
            state: ShardState::Unplaced,
            cluster: None,
        },
        ShardCell {
            index: 4,
            state: ShardState::Assigned,
            cluster: Some("use1a".into()),
        },
    ];
    let d = Detail {
        row: &row,
        contact: "ml@<pinterest>".into(),
        submitted_by: full.then(|| "bob <b@x>".into()),
        artifact: full.then(|| "git:abc\"def".into()),
        trace_id: full.then(|| "4bf92f35<>".into()),
        generation: full.then_some(7),
        requested: Resources::ZERO,
        priority_class: full.then(|| "<high>".into()),
        decision,
        reasons: if full { reasons } else { vec![] },
        slices: if full { &slices } else { &[] },
        conditions: if full { &conditions } else { &[] },
        failover: if full {
            vec![
                ("Failed over from".into(), "use1b <down>".into()),
                ("At".into(), "x&y".into()),
            ]
        } else {
            vec![]
        },
        shards: if full {
            Some((9, cells))
        } else {
            Some((5, cells))
        },
        events: if full {
            Ok(events())
        } else {
            Err("403 <no>".into())
        },
        yaml: "apiVersion: v1\nkind: <x>\n  a: \"b\" & 'c'\n".into(),
        may_delete: may,
        csrf: "tok\"<",
        palette: &palette,
        now: now(),
        rollout: RolloutPanel {
            view,
            history_error,
            rolled_out,
        },
        flash,
    };
    workload(&d)
}

#[test]
fn workload_pages() {
    let d = decision();
    let conds = conditions();
    let ok = Flash {
        key: "k".into(),
        ok: true,
        text: "approved <2>".into(),
    };
    let refused = Flash {
        key: "k".into(),
        ok: false,
        text: "422 <no>".into(),
    };
    let waiting = rollout_view("WaitingForApproval", false);
    check(
        "workload-waiting",
        &detail_page(
            &waiting,
            Some(&d),
            true,
            Ok(()),
            Some(&ok),
            None,
            Some(&conds[0]),
        ),
    );
    check(
        "workload-refused",
        &detail_page(
            &waiting,
            Some(&d),
            false,
            Err("owned by team <ads>".into()),
            Some(&refused),
            Some("history <gone>".into()),
            Some(&conds[1]),
        ),
    );
    let paused = rollout_view("Progressing", true);
    check(
        "workload-paused",
        &detail_page(&paused, None, true, Ok(()), None, None, None),
    );
    let mut done = rollout_view("Complete", false);
    check(
        "workload-complete",
        &detail_page(&done, Some(&d), true, Ok(()), None, None, None),
    );
    done.history.retain(|e| e.current);
    done.approved = Some("2/<first>".into());
    if let Some(s) = done.status.as_mut() {
        s.failed = 2;
        s.message = None;
        s.stable_revision = None;
        s.started_time = None;
    }
    done.policy = None;
    check(
        "workload-complete-nothing-to-undo",
        &detail_page(&done, Some(&d), false, Ok(()), None, None, None),
    );
    let mut placed = d.clone();
    placed.queue = None;
    placed.unplaced = 0;
    placed.strategy = None;
    placed.application_failovers.clear();
    check(
        "workload-placed",
        &detail_page(&done, Some(&placed), true, Ok(()), None, None, None),
    );
    let mut none = rollout_view("Complete", false);
    none.status = None;
    check(
        "workload-unseen",
        &detail_page(&none, None, false, Ok(()), None, None, None),
    );
    check(
        "workload-unseen-refused",
        &detail_page(&none, None, false, Err("no".into()), None, None, None),
    );
}

fn amounts(cpu: Option<&str>, memory: Option<&str>, gpus: Option<&str>) -> ResourceAmounts {
    serde_json::from_value(serde_json::json!({"cpu": cpu, "memory": memory, "gpus": gpus})).unwrap()
}

#[test]
fn quotas_queue_and_owners() {
    let mut per_cluster = BTreeMap::new();
    per_cluster.insert(
        "use<1a>".to_string(),
        (
            amounts(Some("4"), None, None),
            amounts(Some("1500m"), Some("2Gi"), None),
        ),
    );
    let items = [
        QuotaView {
            namespace: "ads".into(),
            name: "q<1>".into(),
            hard: amounts(Some("10"), Some("64Gi"), Some("2")),
            used: amounts(Some("12"), None, Some("1")),
            requested: Some(Resources::ZERO),
            per_cluster,
        },
        QuotaView {
            namespace: "ml".into(),
            name: "q".into(),
            hard: amounts(None, None, None),
            used: amounts(None, None, None),
            requested: None,
            per_cluster: BTreeMap::new(),
        },
    ];
    check("quotas", &quotas(&items));
    check("quotas-empty", &quotas(&[]));

    let entries: Vec<QueueEntry> = serde_json::from_value(serde_json::json!([
        {"kind": "PinterestJobSet", "namespace": "ads", "name": "later<1>", "team": "ads&",
         "position": 1, "waiting": 2, "priority": 1000, "effectivePriority": 1010,
         "priorityClassName": "hi<gh>", "since": "2026-11-23T11:00:00Z",
         "waitingFor": "room in <script>", "unplaced": 3},
        {"kind": "PinterestService", "namespace": "ml", "name": "next", "position": 2,
         "waiting": 2, "priority": 0, "effectivePriority": 0,
         "since": "2026-11-23T11:59:00Z", "waitingFor": "quota", "unplaced": 1}
    ]))
    .unwrap();
    check("queue", &queue(&entries, now()));
    check("queue-empty", &queue(&[], now()));

    let owned = |name: &str, at: Option<&str>, expired: bool, clusters: &[&str]| OwnedRow {
        kind: WorkloadKind::Service,
        namespace: "ads".into(),
        name: name.into(),
        clusters: clusters.iter().map(|c| c.to_string()).collect(),
        requested: Resources::ZERO,
        expires_at: at.map(|t| t.parse().unwrap()),
        expired,
    };
    let teams = [
        TeamView {
            team: "ads<1>".into(),
            contacts: vec!["ads@pinterest.com".into(), "<b>".into()],
            clusters: vec!["use1a".into(), "x&y".into()],
            requested: Resources::ZERO,
            workloads: vec![
                owned("old", Some("2026-01-01T00:00:00Z"), true, &["use1a", "x&y"]),
                owned("new<2>", Some("2027-01-01T00:00:00Z"), false, &[]),
                owned("unknown", None, false, &["use1b"]),
            ],
        },
        TeamView {
            team: "ml".into(),
            contacts: vec![],
            clusters: vec![],
            requested: Resources::ZERO,
            workloads: vec![],
        },
    ];
    let palette = Palette::new(["use1a", "use1b"]);
    check("owners", &owners(&teams, &palette));
    check("owners-empty", &owners(&[], &palette));
}

#[test]
fn the_dry_run_page() {
    use crate::jss::ui::plan::{PlanForm, page};
    use crate::jss::wire::DryRun;
    let form = PlanForm {
        csrf: None,
        namespace: Some("a\"ds".into()),
        resource: Some("kind: <PinterestService>\nname: 'web' & more\n".into()),
    };
    check(
        "plan-empty",
        &page("tok\"<", &PlanForm::default(), None, None),
    );
    check(
        "plan-refused",
        &page("t", &form, None, Some("422 (Invalid): <no>\n  line 2")),
    );
    let amounts = serde_json::json!({"cpu": "1500m", "memory": "2Gi", "gpus": 0, "pods": 3});
    let mut reply: DryRun = serde_json::from_value(serde_json::json!({
        "kind": "PinterestService", "namespace": "ads", "name": "web<1>", "team": "ads",
        "submittedBy": "bob", "exists": true, "strategy": "Divided <x>",
        "requested": amounts,
        "placements": [
            {"cluster": "use1a", "replicas": 1, "pods": 1, "requests": amounts, "reason": "room <a>"},
            {"cluster": "use1b", "replicas": 2, "pods": 2, "requests": amounts, "reason": "r"},
            {"cluster": "use1c", "shards": "0-3", "pods": 4, "requests": amounts, "reason": "s"},
            {"cluster": "x&y", "pods": 5, "requests": amounts, "reason": "p"}],
        "excluded": [{"cluster": "euw1", "why": "tainted <gpu>"}],
        "unplaced": 2, "reason": "no room \"left\"",
        "quotas": [{"quota": "ads/q<1>", "rows": [
            {"scope": "all", "resource": "cpu", "adds": "1", "used": "5", "hard": "10", "fits": true},
            {"scope": "use1a", "resource": "memory", "adds": "2Gi", "used": "9Gi", "hard": "8Gi", "fits": false}]}],
        "moves": [{"cluster": "use1a", "before": "1 <r>", "after": "2"}],
        "members": [
            {"cluster": "use1a", "overrides": ["o1", "<o2>"], "objects": "a: <b>\n", "objectCount": 2,
             "diff": "- a\n+ <b>"},
            {"cluster": "use1b", "objects": "", "objectCount": 0, "error": "could not <expand>"}],
        "note": "Nothing is <written>."
    }))
    .unwrap();
    check("plan-answer", &page("t", &form, Some(&reply), None));
    reply.exists = false;
    reply.unplaced = 0;
    reply.placements.clear();
    reply.excluded.clear();
    reply.quotas.clear();
    reply.moves.clear();
    reply.members.clear();
    reply.note.clear();
    check("plan-answer-new", &page("t", &form, Some(&reply), None));
}
