//! FederatedQuota at placement: the hub charges each decision's pods against the quota
//! of the workload's namespace, so what does not fit stays unplaced with QuotaExceeded,
//! and keeps each quota's `status.used` / `usedPerCluster` current.
//!
//! Usage lives in memory ([`QuotaBook`]), updated under the same lock as each decision, so
//! two workloads placed at once cannot both take the last room. A namespace's book is
//! seeded from the placements recorded in hub status the first time a quota there is
//! consulted (a restarted or newly elected hub starts from what is placed).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};

use crate::api::common::{Condition, ConditionStatus, PlacementDecision, set_condition};
use crate::api::federation::FederatedQuota;
use crate::api::runtime_profile::RuntimeProfile;
use crate::api::workload::{AnyWorkload, WorkloadKind};
use crate::controller::apply::HUB_FIELD_MANAGER;
use crate::placement::model::Resources;
use crate::placement::quota::Usage;
use crate::placement::{self, from_workload, recorded};

#[derive(Default)]
struct Book {
    /// Workload key → (namespace, usage per cluster).
    by_workload: BTreeMap<String, (String, BTreeMap<String, Resources>)>,
    /// The sum of `by_workload` per namespace, kept as entries change: a decision reads
    /// its namespace's usage without walking every workload (that walk, once per
    /// decision, made a first sync of 10,000 workloads quadratic).
    by_namespace: BTreeMap<String, Usage>,
    seeded: BTreeSet<String>,
}

impl Book {
    fn take_out(&mut self, key: &str) {
        if let Some((ns, per_cluster)) = self.by_workload.remove(key)
            && let Some(u) = self.by_namespace.get_mut(&ns)
        {
            u.subtract(&per_cluster);
            if u.total == Resources::ZERO && u.per_cluster.is_empty() {
                self.by_namespace.remove(&ns);
            }
        }
    }
}

/// Quota usage of every placed workload, by namespace.
#[derive(Default)]
pub struct QuotaBook {
    inner: Mutex<Book>,
}

impl QuotaBook {
    pub fn set(&self, key: &str, ns: &str, usage: BTreeMap<String, Resources>) {
        if let Ok(mut b) = self.inner.lock() {
            b.take_out(key);
            b.by_namespace
                .entry(ns.to_string())
                .or_default()
                .add(&usage);
            b.by_workload
                .insert(key.to_string(), (ns.to_string(), usage));
        }
    }

    pub fn remove(&self, key: &str) {
        if let Ok(mut b) = self.inner.lock() {
            b.take_out(key);
        }
    }

    /// What the workloads of `ns` use, except `except`.
    pub fn usage(&self, ns: &str, except: Option<&str>) -> Usage {
        let Ok(b) = self.inner.lock() else {
            return Usage::default();
        };
        let mut u = b.by_namespace.get(ns).cloned().unwrap_or_default();
        if let Some((wns, per_cluster)) = except.and_then(|k| b.by_workload.get(k))
            && wns == ns
        {
            u.subtract(per_cluster);
        }
        u
    }

    fn is_seeded(&self, ns: &str) -> bool {
        self.inner.lock().is_ok_and(|b| b.seeded.contains(ns))
    }

    fn mark_seeded(&self, ns: &str) {
        if let Ok(mut b) = self.inner.lock() {
            b.seeded.insert(ns.to_string());
        }
    }

    fn has(&self, key: &str) -> bool {
        self.inner
            .lock()
            .is_ok_and(|b| b.by_workload.contains_key(key))
    }
}

pub fn workload_key(kind: WorkloadKind, ns: &str, name: &str) -> String {
    format!("{}/{ns}/{name}", kind.as_str())
}

/// Fills the book for `ns` from the placements recorded in hub status (once per
/// namespace and process).
pub async fn seed_namespace(
    hub: &Client,
    book: &QuotaBook,
    profiles: &[RuntimeProfile],
    members: &[crate::placement::ClusterView],
    ns: &str,
) -> Result<(), kube::Error> {
    if book.is_seeded(ns) {
        return Ok(());
    }
    for kind in WorkloadKind::ALL {
        let ar = crate::api::kind::api_resource(kind);
        let list = Api::<DynamicObject>::namespaced_with(hub.clone(), ns, &ar)
            .list(&ListParams::default())
            .await?;
        for o in list.items {
            let key = workload_key(kind, ns, &o.name_any());
            if book.has(&key) {
                continue;
            }
            let Some(placement) = o
                .data
                .pointer("/status/placement")
                .and_then(|p| serde_json::from_value::<PlacementDecision>(p.clone()).ok())
            else {
                continue;
            };
            let mut v = o.data.clone();
            v["apiVersion"] = ar.api_version.clone().into();
            v["kind"] = ar.kind.clone().into();
            v["metadata"] = serde_json::to_value(&o.metadata).unwrap_or_default();
            let Some(w) = AnyWorkload::from_value(kind, v) else {
                continue;
            };
            let profile = crate::expand::select_profile(profiles, w.as_ref().runtime_version())
                .ok()
                .cloned();
            // Charged as overridden in the members whose rules change the pod.
            if let Some((demand, _)) = from_workload::sized(&w, profile.as_ref(), members) {
                book.set(
                    &key,
                    ns,
                    placement::quota::usage_of(&recorded::from_status(&placement), &demand),
                );
            }
        }
    }
    book.mark_seeded(ns);
    Ok(())
}

/// Writes every quota's usage (and QuotaExceeded while a workload of its namespace is
/// held back by it) into its status.
pub async fn write_quota_status(
    hub: &Client,
    book: &QuotaBook,
    quotas: &[std::sync::Arc<FederatedQuota>],
    held_back: &BTreeMap<String, String>,
) {
    for q in quotas {
        let ns = q.namespace().unwrap_or_default();
        if !book.is_seeded(&ns) {
            continue;
        }
        let u = book.usage(&ns, None);
        let mut status = q.status.clone().unwrap_or_default();
        status.observed_generation = q.metadata.generation;
        status.used = Some(placement::quota::amounts(&u.total));
        status.used_per_cluster = u
            .per_cluster
            .iter()
            .map(|(c, r)| (c.clone(), placement::quota::amounts(r)))
            .collect();
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::now(),
        );
        let cond = match held_back.get(&ns) {
            Some(why) => Condition::new(
                crate::api::common::condition_types::QUOTA_EXCEEDED,
                ConditionStatus::True,
                "WorkloadsHeldBack",
                why,
                q.metadata.generation,
                &now,
            ),
            None => Condition::new(
                crate::api::common::condition_types::QUOTA_EXCEEDED,
                ConditionStatus::False,
                "WithinQuota",
                "",
                q.metadata.generation,
                &now,
            ),
        };
        set_condition(&mut status.conditions, cond);
        if q.status.as_ref() == Some(&status) {
            continue;
        }
        let patch = serde_json::json!({
            "apiVersion": "federation.pinterest.com/v1alpha1",
            "kind": "FederatedQuota",
            "status": status,
        });
        // Untyped: the answer is not read (see members::write_status).
        let quotas: Api<kube::api::DynamicObject> = Api::namespaced_with(
            hub.clone(),
            &ns,
            &kube::api::ApiResource::erase::<FederatedQuota>(&()),
        );
        if let Err(e) = quotas
            .patch_status(
                &q.name_any(),
                &PatchParams::apply(HUB_FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await
        {
            tracing::warn!(quota = %q.name_any(), error = %e, "quota status not written");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(pods: i64) -> Resources {
        Resources {
            pods,
            ..Resources::ZERO
        }
    }

    fn per(cs: &[(&str, i64)]) -> BTreeMap<String, Resources> {
        cs.iter().map(|(c, m)| (c.to_string(), r(*m))).collect()
    }

    /// The sum kept per namespace equals walking every workload of it, through sets,
    /// replacements and removals.
    #[test]
    fn the_namespace_sum_follows_every_change() {
        let book = QuotaBook::default();
        book.set("a", "ns1", per(&[("x", 100), ("y", 50)]));
        book.set("b", "ns1", per(&[("x", 10)]));
        book.set("c", "ns2", per(&[("y", 7)]));
        let u = book.usage("ns1", None);
        assert_eq!(u.total, r(160));
        assert_eq!(u.per_cluster, per(&[("x", 110), ("y", 50)]));
        // Except a workload of the namespace; a key of another namespace excepts nothing.
        assert_eq!(book.usage("ns1", Some("a")).per_cluster, per(&[("x", 10)]));
        assert_eq!(book.usage("ns1", Some("c")).total, r(160));
        // Replaced: the old charge leaves the sum.
        book.set("a", "ns1", per(&[("y", 1)]));
        assert_eq!(
            book.usage("ns1", None).per_cluster,
            per(&[("x", 10), ("y", 1)])
        );
        book.remove("b");
        book.remove("a");
        assert_eq!(book.usage("ns1", None), Usage::default());
        assert_eq!(book.usage("ns2", None).total, r(7));
    }
}
