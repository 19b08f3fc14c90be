//! PinterestDaemon → DaemonSet.

use k8s_openapi::api::apps::v1::{
    DaemonSet, DaemonSetSpec, DaemonSetUpdateStrategy, RollingUpdateDaemonSet,
};

use super::names;
use super::{BuildError, Ctx, Out, runtime};
use crate::api::daemon::{DaemonUpdateType, PinterestDaemon};

pub(crate) fn expand(ctx: &Ctx<'_>, d: &PinterestDaemon, out: &mut Out) -> Result<(), BuildError> {
    let spec = &d.spec;
    let mut pod = ctx.pod_template(&spec.template, &[], None);
    runtime::inject(ctx, &mut pod, "spec.template", None)?;
    let update_strategy = spec
        .update_strategy
        .as_ref()
        .map(|u| DaemonSetUpdateStrategy {
            type_: u.type_.map(|t| match t {
                DaemonUpdateType::RollingUpdate => "RollingUpdate".to_string(),
                DaemonUpdateType::OnDelete => "OnDelete".to_string(),
            }),
            rolling_update: u.rolling_update.as_ref().map(|r| RollingUpdateDaemonSet {
                max_unavailable: r.max_unavailable.clone(),
                max_surge: r.max_surge.clone(),
            }),
        });
    out.push(DaemonSet {
        metadata: ctx.meta(names::object_name(ctx.name), &[]),
        spec: Some(DaemonSetSpec {
            selector: ctx.label_selector(),
            template: pod,
            update_strategy,
            ..Default::default()
        }),
        status: None,
    });
    Ok(())
}
