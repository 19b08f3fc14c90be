//! RuntimeProfiles are cluster-scoped and small: every hub profile is applied into every
//! Ready member, where the agent injects the same runtime support from it; a profile
//! deleted on the hub is deleted from the members the hub applied it to (profiles a
//! member's own admins made are left alone).

use std::collections::BTreeSet;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::ApiResource;

use super::{HubContext, HubError};
use crate::api::runtime_profile::{LABEL_PROFILE_DIGEST, RuntimeProfile};
use crate::controller::apply::{HUB_FIELD_MANAGER, applied_by_and_not_in};
use crate::hub::members::Member;

/// What each member was last given of the hub's profiles: the profiles (name and resource
/// version) and the connection they went through, and when. A member is given them again
/// only when that changed, after it was not Ready, or once `RESYNC` has passed (a profile
/// removed or edited in the member by hand comes back then): every member every 10 s cost
/// a LIST and an apply per profile per member, which grows with the fleet.
#[derive(Default)]
pub struct ProfileSync {
    given: std::collections::HashMap<String, Given>,
}

/// The profiles given (name, resource version), through which connection, when.
type Given = (Vec<(String, Option<String>)>, Timestamp, std::time::Instant);

impl ProfileSync {
    /// How often a member is given the profiles though nothing changed.
    pub const RESYNC: std::time::Duration = std::time::Duration::from_secs(300);

    fn due(&self, m: &Member, profiles: &[(String, Option<String>)]) -> bool {
        self.given.get(&m.name).is_none_or(|(given, conn, at)| {
            given != profiles || *conn != m.connected_at() || at.elapsed() >= Self::RESYNC
        })
    }
}

/// The hub's RuntimeProfiles as name and resource version: what changes when any of them
/// is created, changed or deleted.
pub fn profile_versions(ctx: &HubContext) -> Vec<(String, Option<String>)> {
    ctx.profiles
        .state()
        .iter()
        .map(|p| (p.name_any(), p.metadata.resource_version.clone()))
        .collect()
}

/// Applies every hub RuntimeProfile into every Ready member that `sync` says is owed them
/// (they are cluster-scoped and small; the agent in each member needs them to inject the
/// same runtime support), and removes from it those deleted on the hub.
pub async fn propagate_profiles(ctx: &HubContext, sync: &mut ProfileSync) {
    let now = Timestamp::now();
    let ar = ApiResource::erase::<RuntimeProfile>(&());
    let profiles = profile_versions(ctx);
    let members = ctx.registry.all();
    // A member that is not Ready is owed them again when it is back.
    for m in members
        .iter()
        .filter(|m| !m.is_ready(now, ctx.member_grace))
    {
        sync.given.remove(&m.name);
    }
    sync.given
        .retain(|name, _| members.iter().any(|m| &m.name == name));
    let due: Vec<_> = members
        .into_iter()
        .filter(|m| m.is_ready(now, ctx.member_grace) && sync.due(m, &profiles))
        .collect();
    for m in due {
        // A pull member's agent reads the hub's profiles itself.
        let Some(client) = m.push_client() else {
            continue;
        };
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let mut complete = true;
        for p in ctx.profiles.state() {
            let mut v = match serde_json::to_value(p.as_ref()) {
                Ok(v) => v,
                Err(_) => continue,
            };
            if let Some(meta) = v["metadata"].as_object_mut() {
                meta.retain(|k, _| matches!(k.as_str(), "name" | "labels" | "annotations"));
            }
            v.as_object_mut().map(|o| o.remove("status"));
            if let Err(e) = api
                .patch(
                    &p.name_any(),
                    &PatchParams::apply(HUB_FIELD_MANAGER).force(),
                    &Patch::Apply(&v),
                )
                .await
            {
                complete = false;
                tracing::debug!(member = %m.name, error = %e, "runtime profile not propagated yet");
            }
        }
        // The hub's profiles are a cache loaded before the leadership term began (an
        // empty list here means the hub has none, not that it was not read).
        let on_hub: BTreeSet<String> = profiles.iter().map(|p| p.0.clone()).collect();
        match api.list(&ListParams::default()).await {
            Ok(list) => {
                for name in applied_by_and_not_in(&list.items, HUB_FIELD_MANAGER, &on_hub) {
                    match api.delete(&name, &DeleteParams::default()).await {
                        Ok(_) => {
                            tracing::info!(member = %m.name, profile = %name, "runtime profile deleted on the hub: removed from the member");
                        }
                        Err(kube::Error::Api(e)) if e.code == 404 => {}
                        Err(e) => {
                            complete = false;
                            tracing::warn!(member = %m.name, profile = %name, error = %e, "could not remove a runtime profile deleted on the hub");
                        }
                    }
                }
            }
            Err(e) => {
                complete = false;
                tracing::debug!(member = %m.name, error = %e, "member runtime profiles not listed")
            }
        }
        if complete {
            sync.given.insert(
                m.name.clone(),
                (
                    profiles.clone(),
                    m.connected_at(),
                    std::time::Instant::now(),
                ),
            );
        }
    }
}

/// Makes the hub's snapshot of the profile content `pin` names (`version@digest`), unless
/// one exists: called before a revision pinning it is recorded, so the content stays
/// available to members on that revision after the profile is edited in place. A pin
/// without a digest (the built-in profile) or to content no profile has any more (an
/// `undo` to a revision whose snapshot is gone) needs nothing here: the member's agent
/// reports the pin it cannot resolve.
pub async fn ensure_snapshot(ctx: &HubContext, pin: &str) -> Result<(), HubError> {
    let Some((version, digest)) = pin.split_once('@') else {
        return Ok(());
    };
    if ctx.revisions.snapshot_known(digest) {
        return Ok(());
    }
    let profiles = ctx.profiles.state();
    let has_snapshot = profiles
        .iter()
        .any(|p| crate::expand::is_snapshot(p) && crate::expand::profile_digest(p) == digest);
    if has_snapshot {
        ctx.revisions.snapshot_made(digest, true);
        return Ok(());
    }
    let Some(live) = profiles.iter().find(|p| {
        !crate::expand::is_snapshot(p)
            && p.spec.version == version
            && crate::expand::profile_digest(p) == digest
    }) else {
        return Ok(());
    };
    let snap = crate::expand::snapshot_of(live);
    let api: Api<RuntimeProfile> = Api::all(ctx.hub.clone());
    match api.create(&Default::default(), &snap).await {
        Ok(_) => {
            tracing::info!(profile = %live.name_any(), snapshot = %snap.name_any(), "runtime profile content snapshotted for a revision");
        }
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(source) => {
            return Err(HubError::SnapshotProfile {
                profile: live.name_any(),
                source,
            });
        }
    }
    ctx.revisions.snapshot_made(digest, true);
    Ok(())
}

/// How long a snapshot is kept at least: a revision pinning it may be recorded just
/// after it was made.
const SNAPSHOT_MIN_AGE_SECS: i64 = 600;

/// Removes the hub's profile snapshots that no recorded revision pins any more (one
/// metadata LIST with limit 1 per snapshot), nor the profile's present content. Members
/// lose them at the next propagation, as for any profile deleted on the hub.
pub async fn prune_snapshots(ctx: &HubContext) {
    let profiles = ctx.profiles.state();
    let revisions: Api<k8s_openapi::api::apps::v1::ControllerRevision> = Api::all(ctx.hub.clone());
    let api: Api<RuntimeProfile> = Api::all(ctx.hub.clone());
    let candidates = snapshots_to_check(
        profiles.iter().map(|p| p.as_ref()),
        Timestamp::now().as_second(),
    );
    for (name, digest) in candidates {
        let lp = ListParams::default()
            .labels(&format!("{LABEL_PROFILE_DIGEST}={digest}"))
            .limit(1);
        match revisions.list_metadata(&lp).await {
            Ok(l) if l.items.is_empty() => {}
            Ok(_) => continue,
            Err(e) => {
                tracing::debug!(error = %e, "revisions not listed for a profile snapshot's clean-up");
                continue;
            }
        }
        ctx.revisions.snapshot_made(&digest, false);
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {
                tracing::info!(snapshot = %name, "runtime profile snapshot no revision pins removed");
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                tracing::warn!(snapshot = %name, error = %e, "could not remove a runtime profile snapshot");
            }
        }
    }
}

/// The snapshots a clean-up asks about, `(name, digest)`: older than
/// [`SNAPSHOT_MIN_AGE_SECS`] at `now` (seconds) and not the present content of any profile.
/// Whether a revision still pins one is the shell's question.
fn snapshots_to_check<'a>(
    profiles: impl Iterator<Item = &'a RuntimeProfile> + Clone,
    now: i64,
) -> Vec<(String, String)> {
    let live: BTreeSet<String> = profiles
        .clone()
        .filter(|p| !crate::expand::is_snapshot(p))
        .map(crate::expand::profile_digest)
        .collect();
    profiles
        .filter(|p| crate::expand::is_snapshot(p))
        .filter_map(|snap| {
            let digest = snap.labels().get(LABEL_PROFILE_DIGEST)?.clone();
            let made = snap
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(now, |t| t.0.as_second());
            (!live.contains(&digest) && now - made >= SNAPSHOT_MIN_AGE_SECS)
                .then(|| (snap.name_any(), digest))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_old_snapshots_of_content_no_profile_has_now_are_checked() {
        let mut live = crate::expand::builtin_profile().clone();
        live.metadata.name = Some("mesh".into());
        live.spec.version = "1".into();
        let at = |s: i64| {
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                Timestamp::from_second(1_800_000_000 + s).unwrap(),
            ))
        };
        // The present content's snapshot: kept whatever its age.
        let mut current = crate::expand::snapshot_of(&live);
        current.metadata.creation_timestamp = at(0);
        // An earlier content's: checked once old enough.
        let mut before = live.clone();
        before.spec.version = "0".into();
        let mut old = crate::expand::snapshot_of(&before);
        old.metadata.creation_timestamp = at(0);
        let all = [live.clone(), current.clone(), old.clone()];
        let now = 1_800_000_000;
        assert!(snapshots_to_check(all.iter(), now + SNAPSHOT_MIN_AGE_SECS - 1).is_empty());
        let checked = snapshots_to_check(all.iter(), now + SNAPSHOT_MIN_AGE_SECS);
        assert_eq!(
            checked,
            vec![(old.name_any(), crate::expand::profile_digest(&before))]
        );
        // Not a snapshot (no labels): never.
        assert!(snapshots_to_check([live].iter(), now + 100_000).is_empty());
    }
}
