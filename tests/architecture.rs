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
const CORE_MACROS: &[&str] = &["with_kind", "on_workload", "on_any_workload"];

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

/// Where a kind's variants may be matched: its home (`api::kind`, the `PinterestKind`
/// trait, `with_kind!` and `on_workload!`, and `api::workload`, the enums themselves).
const KIND_HOME: &[&str] = &["src/api/kind.rs", "src/api/workload.rs"];

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

/// The part of a source file that is compiled outside tests: up to its `#[cfg(test)]`
/// test module, if it has one inline. Also the names of the test modules it declares in
/// files of their own (`#[cfg(test)] mod tests;`).
fn production_part(text: &str) -> (&str, Vec<String>) {
    let mut test_files = Vec::new();
    let mut end = text.len();
    let mut offset = 0;
    // Where the last `#[cfg(test)]` line began, while the item it applies to is ahead.
    let mut cfg_test_at = None;
    for line in text.split_inclusive('\n') {
        let t = line.trim();
        if let Some(at) = cfg_test_at
            && !t.is_empty()
            && t != "#[cfg(test)]"
        {
            let item = t
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub ");
            if let Some(name) = item.strip_prefix("mod ").and_then(|r| r.strip_suffix(';')) {
                test_files.push(name.trim().to_string());
            } else if item.starts_with("mod ") && end == text.len() {
                end = at;
            }
            cfg_test_at = None;
        }
        if t == "#[cfg(test)]" {
            cfg_test_at = Some(offset);
        }
        offset += line.len();
    }
    (&text[..end], test_files)
}

#[test]
fn kind_variants_are_matched_only_in_their_home() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    // Test modules in files of their own (`expand/tests.rs`, `jss/ui/pages/golden.rs`):
    // fixtures there may name a kind.
    let mut test_files = std::collections::BTreeSet::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("a source file");
        let dir = if file
            .file_name()
            .is_some_and(|n| n == "mod.rs" || n == "lib.rs")
        {
            file.parent().expect("a directory").to_path_buf()
        } else {
            file.with_extension("")
        };
        for name in production_part(&text).1 {
            test_files.insert(dir.join(format!("{name}.rs")));
        }
    }
    assert!(
        test_files.len() >= 3,
        "expected the crate's test modules (expand/tests.rs, ...), found {test_files:?}"
    );
    let mut wrong = Vec::new();
    let mut counted = 0;
    for file in files {
        let rel = file
            .strip_prefix(root)
            .expect("under the crate")
            .to_string_lossy()
            .replace('\\', "/");
        let text = std::fs::read_to_string(&file).expect("a source file");
        let n = kind_variant_mentions(production_part(&text).0);
        if KIND_HOME.contains(&rel.as_str()) {
            counted += n;
            continue;
        }
        if n > 0 && !test_files.contains(&file) {
            wrong.push(format!(
                "{rel}: {n} kind-variant mentions outside tests: a kind's knowledge goes into its home ({}), reached through the PinterestKind trait, a WorkloadKind property, with_kind! or on_workload!",
                KIND_HOME.join(", ")
            ));
        }
    }
    assert!(
        counted > 20,
        "the home should name every kind ({counted} mentions found): is KIND_HOME right?"
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_production_part_ends_at_the_inline_test_module() {
    let text = "fn a() {}\n#[cfg(test)]\nmod x;\nfn b() {}\n#[cfg(test)]\npub(crate) mod tests {\n    fn c() {}\n}\n";
    let (prod, files) = production_part(text);
    assert_eq!(prod, "fn a() {}\n#[cfg(test)]\nmod x;\nfn b() {}\n");
    assert_eq!(files, ["x"]);
    assert_eq!(production_part("fn a() {}\n").0, "fn a() {}\n");
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
