//! Golden files: `pinfed expand` output for every example, checked in under
//! `tests/golden/`, so a change to the engine shows up as a reviewable diff.
//! Regenerate with `PINFED_UPDATE_GOLDEN=1 cargo test --test golden`.

use std::path::Path;

use pinfed::api::parse::{Document, parse_documents, parse_one};
use pinfed::expand::{ExpandInput, expand, select_profile, to_yaml_stream};

const CASES: &[(&str, Option<&str>)] = &[
    ("service.yaml", None),
    ("service.yaml", Some("runtime-profile.yaml")),
    ("jobset.yaml", None),
    ("cronjob.yaml", None),
    ("daemon.yaml", None),
    ("training-pytorch.yaml", None),
    ("training-tensorflow.yaml", None),
    ("statefulset.yaml", None),
];

fn render(example: &str, runtime: Option<&str>) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |f: &str| std::fs::read_to_string(root.join("examples").join(f)).unwrap();
    let profiles: Vec<_> = runtime
        .map(|r| match parse_one(&read(r)).unwrap() {
            Document::RuntimeProfile(p) => p,
            _ => panic!("{r} is not a RuntimeProfile"),
        })
        .into_iter()
        .collect();
    let mut out = Vec::new();
    for doc in parse_documents(&read(example)).unwrap() {
        let Document::Workload(w) = doc else {
            panic!("{example}: not a workload")
        };
        let profile = select_profile(&profiles, w.as_ref().runtime_version()).unwrap();
        out.extend(
            expand(&ExpandInput {
                profile: Some(profile),
                cluster: Some("use1a"),
                ..ExpandInput::new(w.as_ref())
            })
            .unwrap(),
        );
    }
    to_yaml_stream(&out)
}

#[test]
fn expansions_match_the_golden_files() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let update = std::env::var_os("PINFED_UPDATE_GOLDEN").is_some();
    let mut stale = Vec::new();
    for (example, runtime) in CASES {
        let stem = example.trim_end_matches(".yaml");
        let name = match runtime {
            Some(r) => format!("{stem}+{}", r.trim_end_matches(".yaml")),
            None => stem.to_string(),
        };
        let path = dir.join(format!("{name}.yaml"));
        let got = render(example, *runtime);
        if update {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &got).unwrap();
            continue;
        }
        if std::fs::read_to_string(&path).ok().as_deref() != Some(got.as_str()) {
            stale.push(path.display().to_string());
        }
    }
    assert!(
        stale.is_empty(),
        "expansion output differs from {stale:?}; review with `git diff` after regenerating: \
         PINFED_UPDATE_GOLDEN=1 cargo test --test golden"
    );
}
