//! Read stage: the members as one workload sees them — each member's standing under the
//! workload's failover policy (Ready, Settling after a return, Lost, Draining), which are
//! reachable, and the capacity views placement needs. Also the watcher that reconciles
//! every workload when any member's health changes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use super::{ANNOTATION_DRAINING, HubContext};
use crate::api::kind::PinterestKind;
use crate::api::workload::WorkloadRef;
use crate::placement::failover::{self, FailoverPolicy, MemberHealth, Standing};
use crate::placement::from_member;
use crate::placement::model::ClusterView;

/// The members' standings for one workload at one moment.
pub struct Standings {
    pub standings: BTreeMap<String, Standing>,
    /// Members this reconcile reads and writes slices in: a push member whose API server
    /// answers (even while its agent is lost: the fence must reach it before its agent,
    /// back, runs what moved away), every pull member (its slices are on the hub).
    pub reachable: BTreeSet<String>,
    /// Members whose reports count (Ready, Settling or Draining, their agent alive):
    /// the others' statuses show Unknown.
    pub ready: BTreeSet<String>,
    /// Members back from a loss, within the failback window.
    pub settling: BTreeSet<String>,
    /// When a standing changes by the clock (end of a failover grace or of the failback
    /// window), capped at the resync period.
    pub requeue: Duration,
    /// The workload fails over: a member Waiting turns Lost at the end of its grace
    /// (otherwise it waits for as long as it is NotReady).
    pub fails_over: bool,
}

impl Standings {
    pub fn read<K: PinterestKind>(ctx: &HubContext, obj: &K, now: Timestamp) -> Standings {
        let fpolicy = failover_policy::<K>(obj.as_workload(), ctx.failback_window);
        let health = member_health(ctx, now);
        let standings: BTreeMap<String, Standing> = health
            .iter()
            .map(|(n, h)| (n.clone(), failover::standing(h, &fpolicy, now.as_second())))
            .collect();
        // Heartbeat changes trigger every workload anyway; the clock does not.
        let requeue = health
            .values()
            .filter_map(|h| failover::secs_until_standing_changes(h, &fpolicy, now.as_second()))
            .min()
            .map(|s| Duration::from_secs(s.unsigned_abs() + 1).min(ctx.resync))
            .unwrap_or(ctx.resync);
        let ready: BTreeSet<String> = standings
            .iter()
            .filter(|(n, s)| {
                matches!(s, Standing::Ready | Standing::Settling | Standing::Draining)
                    && ctx.registry.get(n).is_some()
            })
            .map(|(n, _)| n.clone())
            .collect();
        let reachable = ctx
            .registry
            .all()
            .iter()
            .filter(|m| standings.contains_key(&m.name) && m.is_writable(now, ctx.member_grace))
            .map(|m| m.name.clone())
            .chain(ready.iter().cloned())
            .collect();
        let settling = standings
            .iter()
            .filter(|(_, s)| **s == Standing::Settling)
            .map(|(n, _)| n.clone())
            .collect();
        Standings {
            standings,
            reachable,
            ready,
            settling,
            requeue,
            fails_over: fpolicy.enabled,
        }
    }

    /// A cluster that is no member any more is gone for good.
    pub fn of(&self, cluster: &str) -> Standing {
        self.standings
            .get(cluster)
            .copied()
            .unwrap_or(Standing::Lost)
    }

    /// Whether a placed member keeps the job-set shards it holds on a re-plan: back from a
    /// loss, or not lost by its heartbeats. `ready` is not asked: a hub that has just taken
    /// over has not connected to every member yet, and a failback it planned then moved a
    /// live member's running shards (one whose Job had just completed ran twice).
    pub fn keeps_held(&self, cluster: &str) -> bool {
        matches!(
            self.of(cluster),
            Standing::Ready | Standing::Settling | Standing::Waiting
        )
    }

    /// Whether a member the workload left counts for failback (it is still a member and
    /// is not being unjoined).
    pub fn counts_for_failback(&self, cluster: &str) -> bool {
        self.standings.contains_key(cluster) && self.of(cluster) != Standing::Draining
    }
}

/// Cluster views for placement: MemberCluster spec plus live node room, not counting
/// the pods of `own` (namespace, kind, name); only members standing Ready are eligible.
///
/// Node room costs a pass over every pod the member runs, so it is computed only with
/// `with_nodes` (when a workload is placed again), not on every reconcile.
pub fn cluster_views(
    ctx: &HubContext,
    now: Timestamp,
    own: Option<(&str, &str, &str)>,
    standings: &Standings,
    with_nodes: bool,
) -> Vec<ClusterView> {
    let mut views: Vec<ClusterView> = ctx
        .members
        .state()
        .iter()
        .map(|mc| {
            let name = mc.name_any();
            let member = ctx.registry.get(&name);
            let ready = member
                .as_ref()
                .is_some_and(|m| m.is_ready(now, ctx.member_grace))
                && standings.standings.get(&name) == Some(&Standing::Ready);
            let nodes = member
                .filter(|_| ready && with_nodes)
                .map(|m| crate::placement::capacity::node_rooms(m.node_usage_without(own)))
                .unwrap_or_default();
            from_member::cluster_view(mc, ready, nodes)
        })
        .collect();
    views.sort_by(|a, b| a.name.cmp(&b.name));
    views
}

/// A member's health as recorded: live readiness (heartbeat within the grace), drain,
/// and the loss and return times the member loop wrote into its MemberCluster status.
#[derive(Clone, Debug, PartialEq, Eq)]
struct RecordedHealth {
    name: String,
    ready: bool,
    draining: bool,
    lost_time: Option<i64>,
    returned_time: Option<i64>,
}

fn recorded_health(ctx: &HubContext, now: Timestamp) -> Vec<RecordedHealth> {
    ctx.members
        .state()
        .iter()
        .map(|mc| {
            let name = mc.name_any();
            let ready = ctx
                .registry
                .get(&name)
                .is_some_and(|m| m.is_ready(now, ctx.member_grace));
            let status = mc.status.as_ref();
            let secs = |t: Option<&Time>| t.map(|t| t.0.as_second());
            RecordedHealth {
                ready,
                draining: mc.annotations().contains_key(ANNOTATION_DRAINING),
                lost_time: secs(status.and_then(|s| s.lost_time.as_ref())),
                returned_time: secs(status.and_then(|s| s.returned_time.as_ref())),
                name,
            }
        })
        .collect()
}

/// Member health from MemberCluster status (loss and return times) and live heartbeats.
fn member_health(ctx: &HubContext, now: Timestamp) -> BTreeMap<String, MemberHealth> {
    recorded_health(ctx, now)
        .into_iter()
        .map(|r| {
            let health = MemberHealth {
                ready: r.ready,
                // Not recorded yet (the member loop writes it): the loss starts now.
                lost_since: (!r.ready).then(|| r.lost_time.unwrap_or(now.as_second())),
                // Back, but the member loop has not recorded the return yet.
                returned_at: if r.ready && r.lost_time.is_some() {
                    Some(now.as_second())
                } else {
                    r.returned_time
                },
                draining: r.draining,
            };
            (r.name, health)
        })
        .collect()
}

fn failover_policy<K: PinterestKind>(w: WorkloadRef<'_>, window: Duration) -> FailoverPolicy {
    let f = w.placement().failover.unwrap_or_default();
    FailoverPolicy {
        enabled: f.enabled.unwrap_or(K::KIND.failover_by_default()),
        grace_secs: i64::from(
            f.grace_period_seconds
                .unwrap_or(DEFAULT_FAILOVER_GRACE_SECS),
        ),
        window_secs: window.as_secs() as i64,
    }
}

/// A workload's failover grace when it names none (`failover.gracePeriodSeconds`): with
/// the hub's default member grace (20 s), a lost member's work starts moving 40 s after
/// its last heartbeat. Shorter moves work on blips (a member API server restart, a
/// network hiccup); a workload that would rather wait says so.
pub const DEFAULT_FAILOVER_GRACE_SECS: i32 = 20;

/// Watches the members' health once a second and, when it changes, has every workload of
/// every kind reconciled — so failover starts within a second of a member turning
/// NotReady, without every workload polling on a short timer.
pub async fn watch_member_health(ctx: Arc<HubContext>) {
    // What makes workloads re-plan: readiness, drain, and the recorded loss and return
    // times (these change once per transition, not per heartbeat).
    // And which members are connected: a member whose recorded status is Ready from
    // before this process started counts only once the registry has it, and its arrival
    // changes nothing recorded (a daemon placed without it waited for the resync).
    // And what placement reads of each member that can make a workload leave it or come
    // to it: its labels, region, zone and taints (a NoExecute taint or a selector a member
    // no longer matches moves work off it at once, not at the next resync).
    let observed = |ctx: &HubContext| {
        let connected: BTreeSet<String> =
            ctx.registry.all().iter().map(|m| m.name.clone()).collect();
        let placement_facts: Vec<String> = ctx
            .members
            .state()
            .iter()
            .map(|m| {
                let s = &m.spec;
                serde_json::json!([m.name_any(), s.region, s.zone, s.labels, s.taints]).to_string()
            })
            .collect();
        // And the RuntimeProfiles: a new default (or a changed one) is a new revision of
        // every workload that resolves to it, rolled out stage by stage.
        let profiles = super::profiles::profile_versions(ctx);
        (
            recorded_health(ctx, Timestamp::now()),
            connected,
            placement_facts,
            profiles,
        )
    };
    let mut last = observed(&ctx);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let current = observed(&ctx);
        if current != last {
            tracing::debug!(members = ?current, "member health changed; reconciling every workload");
            ctx.member_health.send_modify(|g| *g += 1);
            last = current;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_keeps_its_shards_until_it_is_lost_or_drained_connected_or_not() {
        let standings = Standings {
            standings: [
                ("ready", Standing::Ready),
                ("settling", Standing::Settling),
                ("waiting", Standing::Waiting),
                ("lost", Standing::Lost),
                ("draining", Standing::Draining),
            ]
            .into_iter()
            .map(|(n, s)| (n.to_string(), s))
            .collect(),
            reachable: BTreeSet::new(),
            // No member connected yet: a hub that has just taken over.
            ready: BTreeSet::new(),
            settling: BTreeSet::new(),
            requeue: Duration::from_secs(600),
            fails_over: true,
        };
        let keep: Vec<&str> = ["ready", "settling", "waiting", "lost", "draining", "gone"]
            .into_iter()
            .filter(|c| standings.keeps_held(c))
            .collect();
        assert_eq!(keep, ["ready", "settling", "waiting"]);
    }
}
