//! Ingress hosts held across the fleet (`api::ingress_host`). An index of every
//! workload's claim, kept from the hub's own watches (no list per reconcile), and the hold
//! a reconcile makes before anything moves: a workload whose host another one holds is
//! marked Invalid (`IngressHostHeld`) and nothing of it is written into a member; its
//! slices out there, if any, stay as they are. When the holder goes or names another
//! host, the other claimants are looked at again at once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use super::{HubContext, HubError, untyped_workload_key, workload_key};
use crate::api::common::{Condition, condition_types};
use crate::api::ingress_host::{
    Claim, explicit_host, explicit_host_json, holder, in_default_domain,
};
use crate::api::kind::PinterestKind;

/// The reason of the Invalid condition of a workload whose host another one holds.
pub const HOST_HELD: &str = "IngressHostHeld";

#[derive(Default)]
pub struct HostIndex(Mutex<Index>);

#[derive(Default)]
struct Index {
    /// Host → claimants by key.
    by_host: BTreeMap<String, BTreeMap<String, Claim>>,
    /// Key → the host it claims.
    host_of: BTreeMap<String, String>,
    /// Keys seen since a relist began (`None`: no relist under way).
    relisting: Option<BTreeSet<String>>,
}

impl Index {
    /// Sets `key`'s claim; returns the claimants left on a host it let go.
    fn set(&mut self, key: &str, claim: Option<(String, Claim)>) -> Vec<String> {
        let before = self.host_of.get(key).cloned();
        let mut wake = Vec::new();
        if let Some(old) = &before
            && claim.as_ref().is_none_or(|(h, _)| h != old)
        {
            self.host_of.remove(key);
            if let Some(claims) = self.by_host.get_mut(old) {
                claims.remove(key);
                wake.extend(claims.keys().cloned());
                if claims.is_empty() {
                    self.by_host.remove(old);
                }
            }
        }
        if let Some((host, c)) = claim {
            self.host_of.insert(key.to_string(), host.clone());
            self.by_host
                .entry(host)
                .or_default()
                .insert(key.to_string(), c);
        }
        wake
    }
}

/// The host `obj` (a workload of kind `K`, read untyped) claims, if any.
fn claim_of<K: PinterestKind>(obj: &DynamicObject) -> Option<(String, Claim)> {
    let host = explicit_host_json(&obj.data)?;
    Some((
        host.to_string(),
        Claim {
            kind: K::KIND,
            namespace: obj.namespace().unwrap_or_default(),
            name: obj.name_any(),
            created: obj.meta().creation_timestamp.as_ref().map(|t| t.0),
        },
    ))
}

impl HostIndex {
    /// Takes in one event of a kind's watch; returns the keys of workloads to look at
    /// again (the other claimants of a host one let go).
    pub fn observe<K: PinterestKind>(&self, event: &watcher::Event<DynamicObject>) -> Vec<String> {
        let Ok(mut ix) = self.0.lock() else {
            return Vec::new();
        };
        match event {
            watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                let key = untyped_workload_key::<K>(o);
                if let Some(seen) = ix.relisting.as_mut() {
                    seen.insert(key.clone());
                }
                ix.set(&key, claim_of::<K>(o))
            }
            watcher::Event::Delete(o) => ix.set(&untyped_workload_key::<K>(o), None),
            watcher::Event::Init => {
                ix.relisting = Some(BTreeSet::new());
                Vec::new()
            }
            watcher::Event::InitDone => {
                // Gone while the watch was down: let their hosts go.
                let seen = ix.relisting.take().unwrap_or_default();
                let prefix = format!("{}/", K::KIND);
                let gone: Vec<String> = ix
                    .host_of
                    .keys()
                    .filter(|k| k.starts_with(&prefix) && !seen.contains(*k))
                    .cloned()
                    .collect();
                gone.iter().flat_map(|k| ix.set(k, None)).collect()
            }
        }
    }

    /// The claimant that holds `host` if it is not `key`.
    pub fn held_by(&self, host: &str, key: &str) -> Option<Claim> {
        let ix = self.0.lock().ok()?;
        let h = holder(ix.by_host.get(host)?.values())?;
        (h.key() != key).then(|| h.clone())
    }
}

/// Holds `obj` if another workload holds the host it names: Invalid with
/// [`HOST_HELD`], an Event once per holder, nothing written into a member. `None`: it
/// holds its host (or names none) and goes on.
pub async fn hold_if_taken<K: PinterestKind>(
    ctx: &HubContext,
    obj: &K,
    stored: &K::Status,
) -> Result<Option<Action>, HubError> {
    let Some(host) = explicit_host(obj.as_workload()) else {
        return Ok(None);
    };
    // (Refused by validation, which says why.)
    if in_default_domain(host) {
        return Ok(None);
    }
    let Some(h) = ctx.hosts.held_by(host, &workload_key(obj)) else {
        return Ok(None);
    };
    let message = format!(
        "spec.ingress.host: {host:?} is held by {} {}/{} (created first); this workload is placed once that one is deleted or names another host",
        h.kind, h.namespace, h.name
    );
    let mut part = K::hub_part(stored);
    let said = part.conditions.iter().any(|c| {
        c.type_ == condition_types::INVALID && c.reason == HOST_HELD && c.message == message
    });
    if !said {
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let generation = obj.meta().generation;
        for (type_, status, msg) in [
            (
                condition_types::INVALID,
                crate::api::common::ConditionStatus::True,
                message.as_str(),
            ),
            (
                condition_types::READY,
                crate::api::common::ConditionStatus::False,
                message.as_str(),
            ),
        ] {
            crate::api::common::set_condition(
                &mut part.conditions,
                Condition::new(type_, status, HOST_HELD, msg, generation, &now),
            );
        }
        // The whole status as stored, but for the conditions: what runs stays reported.
        let status = K::hub_status(part, &K::totals(stored));
        super::write_hub_status(ctx, obj, None, &status).await?;
        ctx.hub_metrics.host_holds.inc();
        ctx.event(obj, EventType::Warning, HOST_HELD, message.clone())
            .await;
        tracing::info!(workload = %workload_key(obj), %host, holder = %h.key(), "ingress host held by another workload");
    }
    // Looked at again when the holder lets go (`HostIndex::observe`); the resync is the
    // net under it.
    Ok(Some(Action::requeue(ctx.resync)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::service::PinterestService;

    fn svc(ns: &str, name: &str, host: Option<&str>, created: i64) -> DynamicObject {
        let mut v = serde_json::json!({
            "apiVersion": "compute.pinterest.com/v1alpha1", "kind": "PinterestService",
            "metadata": {"name": name, "namespace": ns,
                         "creationTimestamp": k8s_openapi::jiff::Timestamp::from_second(created).unwrap().to_string()},
            "spec": {"owner": {"team": "t", "contact": "t@x"}, "replicas": 1,
                     "template": {"spec": {"containers": [{"name": "w", "image": "w:1"}]}}}
        });
        if let Some(h) = host {
            v["spec"]["ingress"] = serde_json::json!({"host": h});
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_first_claimant_holds_and_the_others_wake_when_it_lets_go() {
        let ix = HostIndex::default();
        let first = svc("a", "web", Some("web.example"), 100);
        let second = svc("b", "web", Some("web.example"), 200);
        let third = svc("c", "web", Some("web.example"), 300);
        for o in [&second, &first, &third] {
            assert!(
                ix.observe::<PinterestService>(&watcher::Event::Apply(o.clone()))
                    .is_empty()
            );
        }
        let k = |o: &DynamicObject| untyped_workload_key::<PinterestService>(o);
        assert_eq!(ix.held_by("web.example", &k(&first)), None);
        assert_eq!(
            ix.held_by("web.example", &k(&second)).map(|c| c.key()),
            Some(k(&first))
        );
        // The holder names another host: the others look again, the second holds.
        let moved = svc("a", "web", Some("other.example"), 100);
        let mut woken = ix.observe::<PinterestService>(&watcher::Event::Apply(moved));
        woken.sort();
        assert_eq!(woken, vec![k(&second), k(&third)]);
        assert_eq!(ix.held_by("web.example", &k(&second)), None);
        // Deleted: the last one holds.
        assert_eq!(
            ix.observe::<PinterestService>(&watcher::Event::Delete(second.clone())),
            vec![k(&third)]
        );
        assert_eq!(ix.held_by("web.example", &k(&third)), None);
        // A workload without a host claims nothing.
        assert!(
            ix.observe::<PinterestService>(&watcher::Event::Apply(svc("d", "x", None, 1)))
                .is_empty()
        );
        assert_eq!(
            ix.held_by("web.example", "PinterestService/d/x")
                .map(|c| c.key()),
            Some(k(&third))
        );
    }

    #[test]
    fn a_relist_lets_go_of_the_hosts_of_workloads_deleted_meanwhile() {
        let ix = HostIndex::default();
        let first = svc("a", "web", Some("web.example"), 100);
        let second = svc("b", "web", Some("web.example"), 200);
        ix.observe::<PinterestService>(&watcher::Event::Apply(first.clone()));
        ix.observe::<PinterestService>(&watcher::Event::Apply(second.clone()));
        ix.observe::<PinterestService>(&watcher::Event::<DynamicObject>::Init);
        ix.observe::<PinterestService>(&watcher::Event::InitApply(second.clone()));
        let woken = ix.observe::<PinterestService>(&watcher::Event::<DynamicObject>::InitDone);
        let k = untyped_workload_key::<PinterestService>(&second);
        assert_eq!(woken, vec![k.clone()]);
        assert_eq!(ix.held_by("web.example", &k), None);
    }
}
