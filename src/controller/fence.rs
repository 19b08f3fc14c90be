//! The hub's fence on run-to-completion work in a member.
//!
//! When a member is lost the hub moves its unfinished shards elsewhere. The member's
//! agent must then start none of them — but a member cut off from the hub cannot be told,
//! and a member whose API server comes back still stores the old slice until the hub
//! rewrites it (an agent that acts in those first seconds starts shards that already ran
//! elsewhere). So the hub *vouches* for each member it can reach: it renews the Lease
//! `pinfed-system/pinfed-hub-fence` in the member with every heartbeat, for less than the
//! grace after which it would call the member lost, and writes the member's **epoch** into
//! it and into every job-set slice it writes there. The epoch changes each time the
//! member returns from a loss (it is the `returnedTime` the hub recorded), so after a
//! return the slices stored before it no longer match until the hub has written them
//! again — fenced.
//!
//! A job-set slice starts new shards only while the Lease is current and its epoch is the
//! slice's; otherwise the Jobs already running go on and none is added. A job set created
//! in the member directly (no hub) is not fenced, nor is a member without the Lease (joined
//! before it existed). A pull member's agent renews the Lease
//! itself while the hub answers it, with the epoch from its MemberCluster.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;

use crate::api::member_slice::LABEL_SLICE_OF;

/// The Lease the hub renews in each member it vouches for, and its namespace.
pub const FENCE_LEASE: &str = "pinfed-hub-fence";
pub const FENCE_NAMESPACE: &str = "pinfed-system";
/// The member's epoch, on the fence Lease and on every job-set slice the hub writes.
pub const ANNOTATION_MEMBER_EPOCH: &str = "federation.pinterest.com/member-epoch";
/// The epoch of a member that never returned from a loss.
pub const FIRST_EPOCH: &str = "0";

/// A member's epoch: when it last returned from a loss (Unix seconds), as recorded in its
/// MemberCluster status.
pub fn member_epoch(returned: Option<Timestamp>) -> String {
    returned.map_or_else(|| FIRST_EPOCH.to_string(), |t| t.as_second().to_string())
}

/// How long a renewal vouches: less than the grace after which the hub calls the member
/// lost, by one heartbeat (the renewal is written just after the heartbeat that counts),
/// and at least a second.
pub fn vouch_secs(grace_secs: u64, heartbeat_secs: u64) -> i32 {
    i32::try_from(grace_secs.saturating_sub(heartbeat_secs).max(1)).unwrap_or(i32::MAX)
}

/// The server-side apply body of a renewal.
pub fn renewal(namespace: &str, epoch: &str, vouch_secs: i32, now: Timestamp) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": FENCE_LEASE, "namespace": namespace,
                     "annotations": {ANNOTATION_MEMBER_EPOCH: epoch}},
        "spec": {
            "holderIdentity": "pinfed-hub",
            "leaseDurationSeconds": vouch_secs,
            "renewTime": k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(now),
        },
    })
}

/// Why a job-set slice may not start new shards now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Hold {
    #[error("the hub has not vouched for this member yet (no Lease {FENCE_LEASE} renewal)")]
    NotVouched,
    #[error("the hub's last renewal of {FENCE_LEASE} ({renewed}) vouched for {secs}s only")]
    Expired { renewed: Timestamp, secs: i32 },
    #[error(
        "the slice was written for member epoch {slice}, the hub vouches for epoch {lease}: \
         the member returned from a loss and the hub has not rewritten the slice yet"
    )]
    OldEpoch { slice: String, lease: String },
}

/// Whether the slice `slice` may start new shards at `now`, given the fence Lease as the
/// member stores it. Objects that are not hub slices are never held, nor are slices in a
/// member without the Lease (`pinfed join` makes it; one joined by a release before the
/// fence is not fenced until it is joined again, and the hub warns meanwhile).
pub fn may_start(slice: &ObjectMeta, lease: Option<&Lease>, now: Timestamp) -> Result<(), Hold> {
    let is_slice = slice
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(LABEL_SLICE_OF));
    let Some(lease) = lease.filter(|_| is_slice) else {
        return Ok(());
    };
    let lease = Some(lease);
    let spec = lease.and_then(|l| l.spec.as_ref());
    let (Some(renewed), Some(secs)) = (
        spec.and_then(|s| s.renew_time.as_ref()).map(|t| t.0),
        spec.and_then(|s| s.lease_duration_seconds),
    ) else {
        return Err(Hold::NotVouched);
    };
    if now.as_millisecond() - renewed.as_millisecond() >= i64::from(secs) * 1000 {
        return Err(Hold::Expired { renewed, secs });
    }
    let epoch_of = |m: Option<&ObjectMeta>| {
        m.and_then(|m| m.annotations.as_ref())
            .and_then(|a| a.get(ANNOTATION_MEMBER_EPOCH))
            .cloned()
            .unwrap_or_else(|| FIRST_EPOCH.to_string())
    };
    let lease_epoch = epoch_of(lease.map(|l| &l.metadata));
    let slice_epoch = epoch_of(Some(slice));
    if lease_epoch != slice_epoch {
        return Err(Hold::OldEpoch {
            slice: slice_epoch,
            lease: lease_epoch,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(epoch: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            labels: Some([(LABEL_SLICE_OF.to_string(), "PinterestJobSet".to_string())].into()),
            annotations: epoch
                .map(|e| [(ANNOTATION_MEMBER_EPOCH.to_string(), e.to_string())].into()),
            ..Default::default()
        }
    }

    fn lease(epoch: &str, renewed: Timestamp, secs: i32) -> Lease {
        serde_json::from_value(renewal("pinfed-system", epoch, secs, renewed)).unwrap()
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    #[test]
    fn a_current_renewal_of_the_slices_epoch_lets_it_start_shards() {
        let l = lease("1700", at(100), 3);
        assert_eq!(may_start(&slice(Some("1700")), Some(&l), at(102)), Ok(()));
        // No epoch on either side: a member that never returned.
        let l = lease(FIRST_EPOCH, at(100), 3);
        assert_eq!(may_start(&slice(None), Some(&l), at(100)), Ok(()));
    }

    #[test]
    fn no_renewal_or_an_expired_one_holds_new_shards() {
        // As `pinfed join` makes it: never renewed.
        let empty = Lease::default();
        assert_eq!(
            may_start(&slice(None), Some(&empty), at(100)),
            Err(Hold::NotVouched)
        );
        let l = lease(FIRST_EPOCH, at(100), 3);
        assert_eq!(
            may_start(&slice(None), Some(&l), at(103)),
            Err(Hold::Expired {
                renewed: at(100),
                secs: 3
            })
        );
    }

    #[test]
    fn a_slice_stored_before_the_members_return_waits_for_the_hubs_rewrite() {
        // The member came back at 1800: the hub vouches for that epoch at once, but the
        // slice it stored before the loss says 1700 (or nothing) until it is rewritten.
        let l = lease("1800", at(1801), 3);
        let held = may_start(&slice(Some("1700")), Some(&l), at(1802)).unwrap_err();
        assert!(held.to_string().contains("epoch 1700"), "{held}");
        assert!(may_start(&slice(None), Some(&l), at(1802)).is_err());
        assert_eq!(may_start(&slice(Some("1800")), Some(&l), at(1802)), Ok(()));
    }

    #[test]
    fn a_job_set_made_in_the_member_itself_or_a_member_joined_before_the_fence_is_not_held() {
        let lapsed = lease(FIRST_EPOCH, at(0), 3);
        assert_eq!(
            may_start(&ObjectMeta::default(), Some(&lapsed), at(100)),
            Ok(())
        );
        assert_eq!(may_start(&slice(None), None, at(100)), Ok(()));
    }

    #[test]
    fn a_renewal_vouches_for_a_heartbeat_less_than_the_grace() {
        assert_eq!(vouch_secs(40, 5), 35);
        assert_eq!(vouch_secs(4, 1), 3);
        assert_eq!(vouch_secs(2, 5), 1);
        assert_eq!(member_epoch(None), "0");
        assert_eq!(member_epoch(Some(at(1800))), "1800");
    }
}
