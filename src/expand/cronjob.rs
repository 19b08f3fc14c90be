//! PinterestCronJob → CronJob (its pods get native sidecars, so runs complete).

use k8s_openapi::api::batch::v1::{CronJob, CronJobSpec, JobSpec, JobTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::names::{self, MAX_CRONJOB_NAME};
use super::{BuildError, Ctx, Out, runtime};
use crate::api::cronjob::PinterestCronJob;

pub(crate) fn expand(ctx: &Ctx<'_>, c: &PinterestCronJob, out: &mut Out) -> Result<(), BuildError> {
    let spec = &c.spec;
    let mut pod = ctx.pod_template(&spec.template, &[], Some("Never"));
    runtime::inject(ctx, &mut pod, "spec.template", None)?;
    let name = names::child_name(ctx.name, "", MAX_CRONJOB_NAME, false);
    out.push(CronJob {
        metadata: ctx.meta(name, &[]),
        spec: CronJobSpec {
            schedule: spec.schedule.clone(),
            time_zone: spec.time_zone.clone(),
            concurrency_policy: spec.concurrency_policy.map(|p| p.as_str().to_string()),
            suspend: spec.suspend,
            starting_deadline_seconds: spec.starting_deadline_seconds,
            successful_jobs_history_limit: spec.successful_jobs_history_limit,
            failed_jobs_history_limit: spec.failed_jobs_history_limit,
            job_template: JobTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(ctx.labels.clone()),
                    annotations: Some(ctx.annotations.clone()),
                    ..Default::default()
                }),
                spec: Some(JobSpec {
                    backoff_limit: spec.backoff_limit,
                    template: pod,
                    ..Default::default()
                }),
            },
        },
        status: None,
    });
    Ok(())
}
