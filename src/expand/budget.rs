//! The PodDisruptionBudget of a service or stateful set in one member.
//!
//! A budget that lets every pod it covers go at once protects nothing: the member's
//! eviction API allows the same with it as without it. So it is not written, which saves
//! one object, one write and its watch events per workload in every member where the
//! slice runs a single pod with the default budget (issue 40: members' writes per
//! workload). It is written again as soon as it protects something (the slice grows, the
//! budget tightens); the agent prunes it when it stops. An override patching a budget
//! keeps it, so that the patch has its object.

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{Ctx, Out};
use crate::api::overrides::Override;
use crate::api::service::Disruption;

const KIND: &str = "PodDisruptionBudget";

/// Adds the budget of `replicas` pods (`disruption` as the spec says it, default
/// `maxUnavailable: 1`) to `out`, unless it would protect nothing.
pub(super) fn add(
    out: &mut Out,
    ctx: &Ctx<'_>,
    name: String,
    disruption: Option<&Disruption>,
    replicas: i32,
    overrides: &[Override],
) {
    let max_unavailable = disruption
        .and_then(|d| d.max_unavailable.clone())
        .unwrap_or(IntOrString::Int(1));
    let patched = overrides
        .iter()
        .any(|o| o.patches.iter().any(|p| p.kind == KIND));
    if !patched && lets_all_go(&max_unavailable, replicas) {
        return;
    }
    out.push(PodDisruptionBudget {
        metadata: ctx.meta(name, &[]),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(max_unavailable),
            selector: Some(ctx.label_selector()),
            ..Default::default()
        }),
        status: None,
    });
}

/// Whether `maxUnavailable` lets all of `replicas` pods be disrupted at once. A percent
/// is scaled rounding up, as the disruption controller does; one it cannot read (the API
/// server's validation refuses it) is kept, so the member says why.
fn lets_all_go(max_unavailable: &IntOrString, replicas: i32) -> bool {
    let allowed = match max_unavailable {
        IntOrString::Int(n) => i64::from(*n),
        IntOrString::String(s) => {
            let Some(pct) = s.strip_suffix('%').and_then(|p| p.parse::<i64>().ok()) else {
                return false;
            };
            (pct * i64::from(replicas) + 99) / 100
        }
    };
    allowed >= i64::from(replicas)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_that_lets_every_pod_go_is_seen_as_such() {
        let int = IntOrString::Int;
        let pct = |s: &str| IntOrString::String(s.into());
        // The default budget: nothing for one pod, one at a time for more.
        assert!(lets_all_go(&int(1), 1));
        assert!(lets_all_go(&int(1), 0));
        assert!(!lets_all_go(&int(1), 2));
        assert!(lets_all_go(&int(3), 3));
        assert!(
            !lets_all_go(&int(0), 1),
            "maxUnavailable 0 blocks every eviction"
        );
        // Percents round up: 50% of 1 pod is 1, of 3 pods 2.
        assert!(lets_all_go(&pct("50%"), 1));
        assert!(!lets_all_go(&pct("50%"), 3));
        assert!(lets_all_go(&pct("100%"), 7));
        assert!(!lets_all_go(&pct("0%"), 1));
        assert!(
            !lets_all_go(&pct("ten"), 1),
            "unreadable: kept for the API server to refuse"
        );
    }
}
