//! Which members each stage of a rollout takes, fixed when the rollout begins. Pure.

use std::collections::BTreeMap;

use crate::api::rollout::RolloutStage;

/// The members of each stage, in stage order: each stage takes from the members not
/// taken by an earlier one (in name order); a stage that chooses none takes the rest.
/// No stages: one stage of every member. Members left in no stage are an error (the
/// policy must say when they change), as is a policy that takes no member at all.
pub fn stage_members(
    stages: &[RolloutStage],
    members: &BTreeMap<String, BTreeMap<String, String>>,
) -> Result<Vec<Vec<String>>, String> {
    let mut left: Vec<&String> = members.keys().collect();
    if stages.is_empty() {
        return Ok(vec![left.into_iter().cloned().collect()]);
    }
    let total = left.len();
    let mut out = Vec::with_capacity(stages.len());
    for s in stages {
        let take: Vec<String> = if !s.clusters.is_empty() {
            left.iter()
                .filter(|m| s.clusters.contains(m))
                .map(|m| (*m).clone())
                .collect()
        } else if let Some(sel) = &s.cluster_selector {
            left.iter()
                .filter(|m| sel.matches(&members[m.as_str()]))
                .map(|m| (*m).clone())
                .collect()
        } else if let Some(n) = s.count {
            let n = usize::try_from(n.max(0)).unwrap_or(0);
            left.iter().take(n).map(|m| (*m).clone()).collect()
        } else if let Some(p) = s.percent {
            let p = usize::try_from(p.clamp(0, 100)).unwrap_or(0);
            let n = (total * p).div_ceil(100);
            left.iter().take(n).map(|m| (*m).clone()).collect()
        } else {
            left.iter().map(|m| (*m).clone()).collect()
        };
        left.retain(|m| !take.contains(m));
        out.push(take);
    }
    if !left.is_empty() {
        let names: Vec<&str> = left.iter().map(|m| m.as_str()).collect();
        return Err(format!(
            "spec.rollout.stages: members {} are in no stage (end with a stage that chooses none: it takes the rest)",
            names.join(", ")
        ));
    }
    if total > 0 && out.iter().all(Vec::is_empty) {
        return Err("spec.rollout.stages: no stage takes any of the workload's members".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::common::LabelSelector;

    fn members(list: &[(&str, &str)]) -> BTreeMap<String, BTreeMap<String, String>> {
        list.iter()
            .map(|(n, tier)| {
                (
                    n.to_string(),
                    [("tier".to_string(), tier.to_string())].into(),
                )
            })
            .collect()
    }

    fn names(v: &[Vec<String>]) -> Vec<Vec<&str>> {
        v.iter()
            .map(|s| s.iter().map(String::as_str).collect())
            .collect()
    }

    #[test]
    fn stages_take_in_order_and_the_last_takes_the_rest() {
        let m = members(&[("a", "canary"), ("b", "prod"), ("c", "prod"), ("d", "prod")]);
        let stages = vec![
            RolloutStage {
                cluster_selector: Some(LabelSelector {
                    match_labels: [("tier".into(), "canary".into())].into(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            RolloutStage {
                percent: Some(25),
                ..Default::default()
            },
            RolloutStage::default(),
        ];
        let got = stage_members(&stages, &m).unwrap();
        assert_eq!(names(&got), vec![vec!["a"], vec!["b"], vec!["c", "d"]]);
        let by_name = vec![
            RolloutStage {
                clusters: vec!["c".into(), "x".into()],
                ..Default::default()
            },
            RolloutStage {
                count: Some(2),
                ..Default::default()
            },
            RolloutStage::default(),
        ];
        let got = stage_members(&by_name, &m).unwrap();
        assert_eq!(names(&got), vec![vec!["c"], vec!["a", "b"], vec!["d"]]);
        assert_eq!(
            names(&stage_members(&[], &m).unwrap()),
            vec![vec!["a", "b", "c", "d"]]
        );
    }

    #[test]
    fn members_left_out_or_none_taken_are_errors_naming_them() {
        let m = members(&[("a", "x"), ("b", "x")]);
        let only_a = vec![RolloutStage {
            clusters: vec!["a".into()],
            ..Default::default()
        }];
        let e = stage_members(&only_a, &m).unwrap_err();
        assert!(e.contains("members b are in no stage"), "{e}");
        let nobody = vec![RolloutStage {
            clusters: vec!["zz".into()],
            ..Default::default()
        }];
        assert!(stage_members(&nobody, &m).is_err());
    }
}
