//! PinterestCronJob: a scheduled job.

// kube's `printcolumn(...)` repeats the same keys by design.
#![allow(clippy::duplicated_attributes)]

use super::common::{workload_spec, workload_status};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::*;

workload_spec! {
    /// A scheduled job. Expanded into a CronJob in the one member cluster that runs it.
    crd "PinterestCronJob", status "PinterestCronJobStatus", short "pcj" {
        doc = "A scheduled job, run by a CronJob in a single member cluster that changes on failover.",
        printcolumn(name = "Schedule", type_ = "string", json_path = ".spec.schedule"),
        printcolumn(name = "Suspend", type_ = "boolean", json_path = ".spec.suspend"),
        printcolumn(name = "Active", type_ = "integer", json_path = ".status.active"),
        printcolumn(
            name = "Last Schedule",
            type_ = "date",
            json_path = ".status.lastScheduleTime"
        )
    }
    pub struct PinterestCronJobSpec {
        placement: " Where the cron job runs. Default strategy: Single.",
        /// Cron schedule, e.g. `*/5 * * * *` or `@hourly`.
        #[schemars(length(min = 1))]
        pub schedule: String,
        /// IANA time zone of the schedule, e.g. `America/Los_Angeles`. Default: the
        /// controller-manager's zone (UTC).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub time_zone: Option<String>,
        /// Allow (default), Forbid or Replace concurrent runs.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub concurrency_policy: Option<ConcurrencyPolicy>,
        /// Suspends future runs.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub suspend: Option<bool>,
        /// Deadline in seconds for starting a run that missed its time.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 0))]
        pub starting_deadline_seconds: Option<i64>,
        /// Finished runs to keep (succeeded). Default 3.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 0))]
        pub successful_jobs_history_limit: Option<i32>,
        /// Finished runs to keep (failed). Default 1.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 0))]
        pub failed_jobs_history_limit: Option<i32>,
        /// Retries of one run before it counts as failed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 0))]
        pub backoff_limit: Option<i32>,
        /// Pod template of one run (the user's containers only).
        #[schemars(schema_with = "pod_template_schema")]
        pub template: PodTemplateSpec,
    }
}

/// How concurrent runs of a cron job are treated.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ConcurrencyPolicy {
    Allow,
    Forbid,
    Replace,
}

impl ConcurrencyPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            ConcurrencyPolicy::Allow => "Allow",
            ConcurrencyPolicy::Forbid => "Forbid",
            ConcurrencyPolicy::Replace => "Replace",
        }
    }
}

workload_status! {
    /// Status of a PinterestCronJob.
    pub struct PinterestCronJobStatus {
        conditions: " Scheduled, Ready, Degraded, QuotaExceeded, Invalid, Complete, Failed (of the last run).",
        /// Runs in progress.
        #[serde(default)]
        pub active: i32,
        /// When a run was last scheduled.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(schema_with = "optional_date_time_schema")]
        pub last_schedule_time: Option<Time>,
        /// When a run last succeeded.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(schema_with = "optional_date_time_schema")]
        pub last_successful_time: Option<Time>,
    }
}
