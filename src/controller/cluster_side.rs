//! Which side of a federation a cluster is on, read once when the hub or the agent starts,
//! so that a manifest applied to the wrong cluster (the member overlay in the hub cluster,
//! the hub overlay in a member) stops with a message instead of running: an agent in the
//! hub cluster would expand the hub's workloads in place, a hub in a member would place
//! nothing. The decisions ([`check_agent`], [`check_hub`]) are pure.

use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use crate::api::federation::MemberCluster;

/// The namespace `pinfed join` writes into a member.
pub const MEMBER_NAMESPACE: &str = "pinfed-system";
/// The identity `pinfed join` creates for the hub in a member: a cluster that has it was
/// joined to a hub. Not `pinfed-hub`, the hub's own ServiceAccount in the hub cluster
/// (deploy/hub): in a single-cluster install the hub is its own member, and unjoining it
/// must not delete the identity the hub runs as.
pub const HUB_SERVICE_ACCOUNT: &str = "pinfed-hub-member";
/// The non-expiring token Secret of joins before expiring tokens; a re-join deletes it.
pub const LEGACY_TOKEN_SECRET: &str = "pinfed-hub-member-token";

/// What a cluster shows of its side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Side {
    /// The MemberClusters registered in it (a hub has some); `None` when they cannot be
    /// read (no CRD, no permission): then nothing is concluded from them.
    pub members: Option<Vec<String>>,
    /// Whether `pinfed join` registered it as a member of some hub.
    pub joined_as_member: bool,
}

fn unknown(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if [403, 404].contains(&s.code))
}

/// The MemberClusters registered in the cluster (`None`: no CRD or no permission).
async fn registered_members(client: &Client) -> Result<Option<Vec<String>>, kube::Error> {
    match Api::<MemberCluster>::all(client.clone())
        .list_metadata(&ListParams::default())
        .await
    {
        Ok(l) => Ok(Some(l.items.iter().map(|m| m.name_any()).collect())),
        Err(e) if unknown(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Reads the cluster's side: its members and the hub's identity.
pub async fn read(client: &Client) -> Result<Side, kube::Error> {
    let members = registered_members(client).await?;
    let joined_as_member = match Api::<ServiceAccount>::namespaced(client.clone(), MEMBER_NAMESPACE)
        .get_metadata_opt(HUB_SERVICE_ACCOUNT)
        .await
    {
        Ok(s) => s.is_some(),
        Err(e) if unknown(&e) => false,
        Err(e) => return Err(e),
    };
    Ok(Side {
        members,
        joined_as_member,
    })
}

/// An agent belongs in a member. A cluster with MemberClusters is a hub: an agent runs
/// there only when the hub joined itself as that member (one-cluster federation), which
/// leaves both the MemberCluster of the agent's name and the hub's identity in it.
pub fn check_agent(side: &Side, cluster_name: &str) -> Result<(), String> {
    let Some(members) = side.members.as_ref().filter(|m| !m.is_empty()) else {
        return Ok(()); // not a hub
    };
    if side.joined_as_member && members.iter().any(|m| m == cluster_name) {
        return Ok(()); // a hub that is its own member
    }
    Err(format!(
        "this cluster is a federation hub (MemberClusters: {}) that is not itself \
         joined as member {cluster_name:?}: the agent belongs in a member cluster \
         (deploy/overlays/member-cluster there; here, `kubectl delete -k` what was \
         applied). To run an agent in the hub cluster too, join it to itself first: \
         `pinfed join {cluster_name} --member-context CTX --hub-context CTX`",
        members.join(", ")
    ))
}

/// A hub belongs in the hub cluster: a cluster joined to a hub that registers no member
/// itself is a member.
pub fn check_hub(side: &Side) -> Result<(), String> {
    let registers_members = side.members.as_ref().is_some_and(|m| !m.is_empty());
    if side.joined_as_member && !registers_members {
        return Err(format!(
            "this cluster is a member of a federation (`pinfed join` left the ServiceAccount \
             {MEMBER_NAMESPACE}/{HUB_SERVICE_ACCOUNT} here) and registers no member itself: \
             the hub belongs in the hub cluster (deploy/overlays/hub-cluster there; here, \
             `kubectl delete -k` what was applied, or deploy/overlays/member-cluster for the agent)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(members: Option<&[&str]>, joined: bool) -> Side {
        Side {
            members: members.map(|m| m.iter().map(|s| s.to_string()).collect()),
            joined_as_member: joined,
        }
    }

    #[test]
    fn an_agent_refuses_a_hub_that_is_not_its_own_member() {
        let hub = side(Some(&["use1a", "use1b"]), false);
        let e = check_agent(&hub, "use1c").unwrap_err();
        assert!(
            e.contains("federation hub (MemberClusters: use1a, use1b)"),
            "{e}"
        );
        // The member overlay named for a real member, applied to the hub by mistake.
        check_agent(&hub, "use1a").unwrap_err();
        check_agent(&side(Some(&["local"]), true), "local").unwrap();
        check_agent(&side(Some(&["local"]), true), "other").unwrap_err();
        check_agent(&side(Some(&[]), true), "use1a").unwrap();
        check_agent(&side(None, true), "use1a").unwrap();
    }

    #[test]
    fn a_hub_refuses_a_member_that_registers_no_member() {
        let e = check_hub(&side(Some(&[]), true)).unwrap_err();
        assert!(e.contains("member of a federation"), "{e}");
        check_hub(&side(None, false)).unwrap();
        assert!(
            check_hub(&side(None, true)).is_err(),
            "a member whose MemberClusters cannot be read"
        );
        check_hub(&side(Some(&[]), false)).unwrap();
        check_hub(&side(Some(&["local"]), true)).unwrap();
    }
}
