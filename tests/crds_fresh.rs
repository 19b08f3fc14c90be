//! `crds/` must hold exactly what `pinfed crds` generates. Pure: no cluster.

use std::collections::BTreeSet;
use std::path::Path;

use pinfed::api::workload::{crd_file_name, crd_yaml, crds};

const REGENERATE: &str = "regenerate with: cargo run -- crds --write crds/";

#[test]
fn crds_directory_is_fresh() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("crds");
    let mut expected = BTreeSet::new();
    for crd in crds() {
        let name = crd_file_name(&crd);
        let path = dir.join(&name);
        let on_disk = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}; {REGENERATE}", path.display()));
        assert!(
            on_disk == crd_yaml(&crd),
            "{} is stale (the API types changed); {REGENERATE}",
            path.display()
        );
        expected.insert(name);
    }
    let present: BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}; {REGENERATE}", dir.display()))
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| n.ends_with(".pinterest.com.yaml"))
        .collect();
    let extra: Vec<_> = present.difference(&expected).collect();
    assert!(
        extra.is_empty(),
        "crds/ has CRDs pinfed no longer defines: {extra:?}; {REGENERATE}"
    );
}

#[test]
fn every_crd_has_status_printer_columns_short_names_and_descriptions() {
    for crd in crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        assert!(
            crd.spec
                .names
                .short_names
                .as_ref()
                .is_some_and(|s| !s.is_empty()),
            "{name}: short name"
        );
        let v = &crd.spec.versions[0];
        assert!(
            v.additional_printer_columns
                .as_ref()
                .is_some_and(|c| !c.is_empty()),
            "{name}"
        );
        let schema = v
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .unwrap();
        let spec = &schema.properties.as_ref().unwrap()["spec"];
        for (field, prop) in spec.properties.as_ref().unwrap() {
            assert!(
                prop.description.is_some(),
                "{name}: spec.{field} has no description"
            );
        }
        if crd.spec.names.kind != "RuntimeProfile" {
            assert!(
                v.subresources
                    .as_ref()
                    .and_then(|s| s.status.as_ref())
                    .is_some(),
                "{name}"
            );
        }
    }
}
