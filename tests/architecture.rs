//! The layers' dependencies point one way: `cli` → {`hub`, `agent`, `jss`} → `controller`
//! (the shared shell) → the pure core (`api`, `expand`, `overrides`, `placement`, `rollout`,
//! `status`, `topology`). This test reads every `crate::` path in `src/` and fails on any that
//! points the other way or sideways, naming the file and line.

use std::path::{Path, PathBuf};

const PURE: &[&str] = &[
    "api",
    "expand",
    "overrides",
    "placement",
    "rollout",
    "status",
    "topology",
];
const SERVICES: &[&str] = &["hub", "agent", "jss"];
/// Macros exported at the crate root by a pure layer (`api::kind::with_kind!`).
const CORE_MACROS: &[&str] = &["with_kind"];

/// The folders a file in `layer` may reach with `crate::`.
fn allowed(layer: &str) -> Vec<&'static str> {
    match layer {
        "cli" => [SERVICES, &["controller"], PURE].concat(),
        "hub" | "agent" | "jss" => [&["controller"], PURE].concat(),
        "controller" => PURE.to_vec(),
        _ => PURE.to_vec(),
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src/ is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every `crate::NAME` in a line (in `use` lines and in paths written inline).
fn crate_paths(line: &str) -> Vec<&str> {
    line.match_indices("crate::")
        .filter(|(i, _)| {
            // `$crate::` in macros and `pinfed_crate::` are not ours.
            !line[..*i].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == '$')
        })
        .map(|(i, m)| {
            let rest = &line[i + m.len()..];
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .collect()
}

#[test]
fn the_shell_depends_one_way_and_the_core_on_nothing_but_itself() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(
        files.len() > 50,
        "expected the crate's sources under {src:?}"
    );
    let mut wrong = Vec::new();
    let mut checked = 0;
    for file in &files {
        let rel = file.strip_prefix(&src).expect("under src/");
        let mut parts = rel.components();
        let first = parts.next().expect("a path").as_os_str().to_string_lossy();
        // Top-level files (lib.rs, main.rs) wire everything together.
        if parts.next().is_none() {
            continue;
        }
        let layer = first.to_string();
        let ok = allowed(&layer);
        let text = std::fs::read_to_string(file).expect("a source file");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            for target in crate_paths(code) {
                checked += 1;
                if target != layer && !ok.contains(&target) && !CORE_MACROS.contains(&target) {
                    wrong.push(format!(
                        "src/{}:{}: {layer} reaches crate::{target}",
                        rel.display(),
                        n + 1
                    ));
                }
            }
        }
    }
    assert!(checked > 100, "too few crate:: paths found ({checked})");
    assert!(
        wrong.is_empty(),
        "dependencies against the layering:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_pure_core_never_touches_a_client_or_the_runtime() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut wrong = Vec::new();
    for layer in PURE {
        let mut files = Vec::new();
        let dir = src.join(layer);
        if dir.is_dir() {
            rust_files(&dir, &mut files);
        }
        for file in files {
            let text = std::fs::read_to_string(&file).expect("a source file");
            for (n, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or_default();
                for banned in [
                    // Types such as kube::api::DynamicObject are plain data; clients are not.
                    "kube::Client",
                    "Client::",
                    "kube::Api",
                    "Api<",
                    "Api::",
                    "tokio::",
                    "std::net::",
                ] {
                    if code.contains(banned) {
                        wrong.push(format!("{}:{}: {banned}", file.display(), n + 1));
                    }
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "the pure core reaches I/O:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn crate_paths_are_found_in_use_lines_and_inline() {
    assert_eq!(
        crate_paths("use crate::hub::x; let y = crate::agent::z();"),
        ["hub", "agent"]
    );
    assert!(crate_paths("$crate::api::x").is_empty());
}

/// Where a kind's variants may be matched without limit: its home (`api::kind`, the
/// `PinterestKind` trait and `with_kind!`, and `api::workload`, the enums themselves).
const KIND_HOME: &[&str] = &["src/api/kind.rs", "src/api/workload.rs"];

/// Files outside the home that still name kind variants, with how many times (issue 42:
/// a kind's knowledge moves into its home; this list only ever shrinks). A file not listed
/// may name none.
const KIND_MATCHES_LEFT: &[(&str, usize)] = &[
    ("src/agent/mod.rs", 6),
    ("src/agent/owned.rs", 3),
    ("src/agent/reconcile.rs", 9),
    ("src/api/ingress_host.rs", 4),
    ("src/api/member_policy.rs", 12),
    ("src/api/pod_policy.rs", 5),
    ("src/api/validate.rs", 17),
    ("src/cli/client.rs", 6),
    ("src/expand/mod.rs", 12),
    ("src/expand/tests.rs", 14),
    ("src/hub/slices.rs", 4),
    ("src/hub/workloads/priority.rs", 2),
    ("src/hub/workloads/rollout.rs", 1),
    ("src/jss/admission.rs", 13),
    ("src/jss/dry_run.rs", 9),
    ("src/jss/hub_view.rs", 1),
    ("src/jss/paging.rs", 7),
    ("src/jss/request.rs", 5),
    ("src/jss/rollout.rs", 3),
    ("src/jss/ui/actions.rs", 1),
    ("src/jss/ui/mod.rs", 1),
    ("src/jss/ui/model.rs", 13),
    ("src/jss/ui/pages.rs", 6),
    // Test fixtures of the golden pages (a workload of each shown kind).
    ("src/jss/ui/pages/golden.rs", 6),
    ("src/jss/views.rs", 18),
    ("src/jss/wire.rs", 7),
    ("src/overrides/tests.rs", 1),
    ("src/placement/from_workload.rs", 8),
];

/// How many times `text` names a kind variant (`WorkloadKind::Service`,
/// `WorkloadRef::JobSet`, `AnyWorkload::Daemon`, ...), comments left out.
fn kind_variant_mentions(text: &str) -> usize {
    const ENUMS: &[&str] = &["WorkloadKind::", "WorkloadRef::", "AnyWorkload::"];
    const VARIANTS: &[&str] = &[
        "Service",
        "JobSet",
        "CronJob",
        "Daemon",
        "TrainingJob",
        "StatefulSet",
    ];
    let mut n = 0;
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or_default();
        for e in ENUMS {
            for (at, _) in code.match_indices(e) {
                let rest = &code[at + e.len()..];
                let word: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if VARIANTS.contains(&word.as_str()) {
                    n += 1;
                }
            }
        }
    }
    n
}

#[test]
fn kind_variants_are_matched_in_their_home_and_nowhere_new() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    let mut wrong = Vec::new();
    let mut seen = std::collections::BTreeMap::new();
    for file in files {
        let rel = file
            .strip_prefix(root)
            .expect("under the crate")
            .to_string_lossy()
            .replace('\\', "/");
        if KIND_HOME.contains(&rel.as_str()) {
            continue;
        }
        let n = kind_variant_mentions(&std::fs::read_to_string(&file).expect("a source file"));
        let allowed = KIND_MATCHES_LEFT
            .iter()
            .find(|(f, _)| *f == rel)
            .map_or(0, |(_, n)| *n);
        if n > allowed {
            wrong.push(format!(
                "{rel}: {n} kind-variant mentions, {allowed} allowed: a kind's knowledge goes into its home ({}), through the PinterestKind trait or with_kind!",
                KIND_HOME.join(", ")
            ));
        } else if n < allowed {
            wrong.push(format!(
                "{rel}: {n} kind-variant mentions, fewer than the {allowed} KIND_MATCHES_LEFT allows: lower it to {n}"
            ));
        }
        seen.insert(rel, n);
    }
    for (f, _) in KIND_MATCHES_LEFT {
        if !seen.contains_key(*f) {
            wrong.push(format!(
                "{f}: listed in KIND_MATCHES_LEFT but gone: remove it"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn kind_variant_mentions_count_paths_not_comments_or_longer_names() {
    assert_eq!(
        kind_variant_mentions(
            "match k { WorkloadKind::Service => 1, AnyWorkload::JobSet(j) => 2 } // WorkloadRef::Daemon"
        ),
        2
    );
    assert_eq!(kind_variant_mentions("WorkloadKind::ServiceX"), 0);
}
