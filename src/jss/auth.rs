//! Who is calling and what they may do. Pure: the token and team configuration is plain
//! data read from files; authentication maps a bearer token to a [`Principal`] and the
//! authorization functions answer from the caller's teams and the teams' policies.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// One token of the token file. Either the token itself or its SHA-256 (hex), so the file
/// need not hold secrets in the clear.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TokenEntry {
    pub user: String,
    #[serde(default)]
    pub token: Option<String>,
    #[serde(default)]
    pub token_sha256: Option<String>,
    #[serde(default)]
    pub teams: Vec<String>,
}

/// Never prints the token (logs and panics must not carry it); the digest is not secret.
impl std::fmt::Debug for TokenEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenEntry")
            .field("user", &self.user)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("token_sha256", &self.token_sha256)
            .field("teams", &self.teams)
            .finish()
    }
}

/// What a team may do.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TeamPolicy {
    /// Namespaces the team may submit to and read: exact names, `prefix-*`, or `*`.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// Whether the team may submit inline resources (otherwise only reviewed artifacts).
    #[serde(default)]
    pub inline: bool,
    /// Users (as the hub's TokenReview names them) who belong to the team.
    #[serde(default)]
    pub users: Vec<String>,
    /// Groups (as the hub's TokenReview names them) whose members belong to the team.
    #[serde(default)]
    pub groups: Vec<String>,
    /// What the team's pods may do beyond an ordinary pod (`api::pod_policy`): hostPath,
    /// privileged, hostNetwork, hostPID, hostIPC, pinfedServiceAccount, daemon (submitting
    /// PinterestDaemons: infrastructure teams). None by default.
    #[serde(default)]
    pub privileges: Vec<String>,
    /// Members see every team's workloads in the owners report (platform and governance
    /// teams); others see their teams' and their namespaces' only.
    #[serde(default)]
    pub admin: bool,
    /// PriorityClasses the team's workloads may name (`spec.priorityClassName`): names,
    /// or `*`. None by default: the hub's global default class (or 0) applies.
    #[serde(default)]
    pub priority_classes: Vec<String>,
    /// Ingress host names the team's services may claim (`spec.ingress.host`): exact
    /// names, or `*.suffix` for any name under it. None by default: the default host
    /// (`<name>.<namespace>.<cluster>.pinterest.internal`) only.
    #[serde(default)]
    pub hosts: Vec<String>,
}

/// The token and team file(s): `tokens:` and `teams:`, in YAML or JSON. Either part may
/// be in its own file (`--tokens`, `--teams`); [`AuthConfig::merge`] joins them.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthFile {
    #[serde(default)]
    pub tokens: Vec<TokenEntry>,
    #[serde(default)]
    pub teams: BTreeMap<String, TeamPolicy>,
}

/// The authenticated caller.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Principal {
    pub user: String,
    pub teams: BTreeSet<String>,
}

/// Tokens (by their SHA-256) and team policies, ready to answer requests.
#[derive(Clone, Debug, Default)]
pub struct AuthConfig {
    by_digest: BTreeMap<[u8; 32], Principal>,
    pub teams: BTreeMap<String, TeamPolicy>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("{file}: {message}")]
    Syntax { file: String, message: String },
    #[error("{file}: tokens[{index}] ({user}): {message}")]
    Token {
        file: String,
        index: usize,
        user: String,
        message: String,
    },
    #[error("team {team:?} is defined in more than one file")]
    DuplicateTeam { team: String },
    #[error("{file}: teams.{team}.privileges: unknown privilege {privilege:?} (known: {known})")]
    UnknownPrivilege {
        file: String,
        team: String,
        privilege: String,
        known: String,
    },
    #[error("{file}: teams.{team}.hosts[{index}]: {message}")]
    HostPattern {
        file: String,
        team: String,
        index: usize,
        message: String,
    },
}

pub fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

fn parse_hex32(s: &str) -> Option<[u8; 32]> {
    let s = s.trim();
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

impl AuthFile {
    pub fn parse(file: &str, text: &str) -> Result<AuthFile, ConfigError> {
        crate::api::yaml::from_str::<Option<AuthFile>>(text)
            .map(Option::unwrap_or_default)
            .map_err(|e| ConfigError::Syntax {
                file: file.to_string(),
                message: e.to_string(),
            })
    }
}

impl AuthConfig {
    /// Joins the files given on the command line (each named for error messages).
    pub fn merge(files: &[(String, AuthFile)]) -> Result<AuthConfig, ConfigError> {
        let mut cfg = AuthConfig::default();
        for (file, f) in files {
            for (team, policy) in &f.teams {
                if let Some(bad) = policy
                    .privileges
                    .iter()
                    .find(|p| crate::api::pod_policy::Privilege::parse(p).is_none())
                {
                    return Err(ConfigError::UnknownPrivilege {
                        file: file.clone(),
                        team: team.clone(),
                        privilege: bad.clone(),
                        known: crate::api::pod_policy::Privilege::ALL
                            .map(|p| p.as_str())
                            .join(", "),
                    });
                }
                for (index, h) in policy.hosts.iter().enumerate() {
                    crate::api::ingress_host::check_pattern(h).map_err(|message| {
                        ConfigError::HostPattern {
                            file: file.clone(),
                            team: team.clone(),
                            index,
                            message,
                        }
                    })?;
                }
                if cfg.teams.insert(team.clone(), policy.clone()).is_some() {
                    return Err(ConfigError::DuplicateTeam { team: team.clone() });
                }
            }
            for (index, t) in f.tokens.iter().enumerate() {
                let err = |message: &str| ConfigError::Token {
                    file: file.clone(),
                    index,
                    user: t.user.clone(),
                    message: message.to_string(),
                };
                if t.user.trim().is_empty() {
                    return Err(err("user is required"));
                }
                let d = match (&t.token, &t.token_sha256) {
                    (Some(tok), None) if !tok.is_empty() => digest(tok),
                    (None, Some(h)) => {
                        parse_hex32(h).ok_or_else(|| err("tokenSha256 must be 64 hex digits"))?
                    }
                    _ => return Err(err("exactly one of token and tokenSha256 is required")),
                };
                let p = Principal {
                    user: t.user.clone(),
                    teams: t.teams.iter().cloned().collect(),
                };
                if cfg.by_digest.insert(d, p).is_some() {
                    return Err(err("the same token is listed twice"));
                }
            }
        }
        Ok(cfg)
    }

    /// Teams a user named by the hub's TokenReview belongs to (by user or group).
    pub fn teams_of_reviewed(&self, user: &str, groups: &[String]) -> BTreeSet<String> {
        self.teams
            .iter()
            .filter(|(_, p)| {
                p.users.iter().any(|u| u == user) || p.groups.iter().any(|g| groups.contains(g))
            })
            .map(|(t, _)| t.clone())
            .collect()
    }

    pub fn token_count(&self) -> usize {
        self.by_digest.len()
    }
}

/// Why a request is not authenticated (401).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AuthError {
    #[error("no bearer token (send `Authorization: Bearer TOKEN`)")]
    Missing,
    #[error("the Authorization header is not `Bearer TOKEN`")]
    Malformed,
    #[error("unknown or expired token")]
    Unknown,
}

/// The bearer token of an `Authorization` header value.
pub fn bearer(header: Option<&[u8]>) -> Result<&str, AuthError> {
    let h = header.ok_or(AuthError::Missing)?;
    let h = std::str::from_utf8(h).map_err(|_| AuthError::Malformed)?;
    let (scheme, token) = h.trim().split_once(' ').ok_or(AuthError::Malformed)?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(AuthError::Malformed);
    }
    Ok(token)
}

/// Looks a token up in the token file.
pub fn authenticate(cfg: &AuthConfig, token: &str) -> Result<Principal, AuthError> {
    cfg.by_digest
        .get(&digest(token))
        .cloned()
        .ok_or(AuthError::Unknown)
}

/// Whether `pattern` (`ns`, `prefix-*` or `*`) admits namespace `ns`.
pub fn namespace_matches(pattern: &str, ns: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => ns.starts_with(prefix),
        None => pattern == ns,
    }
}

/// Why an authenticated caller may not do something (403).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Forbidden {
    #[error(
        "user {user} is not a member of team {team:?} (the workload's spec.owner.team); their teams: {teams}"
    )]
    NotInTeam {
        user: String,
        team: String,
        teams: String,
    },
    #[error("team {team:?} has no policy in the JSS configuration")]
    UnknownTeam { team: String },
    #[error("team {team:?} may not use namespace {namespace:?} (allowed: {allowed})")]
    Namespace {
        team: String,
        namespace: String,
        allowed: String,
    },
    #[error(
        "team {team:?} may only submit reviewed artifacts (inline resources are not allowed for it)"
    )]
    InlineNotAllowed { team: String },
    #[error("none of user {user}'s teams ({teams}) may submit inline resources")]
    NoInlineTeam { user: String, teams: String },
    #[error("none of user {user}'s teams ({teams}) may use namespace {namespace:?}")]
    NamespaceRead {
        user: String,
        teams: String,
        namespace: String,
    },
    #[error(
        "{field}: team {team:?} is not granted {privilege:?} (the team file's privileges: {granted})"
    )]
    Privilege {
        team: String,
        privilege: String,
        field: String,
        granted: String,
    },
    #[error(
        "spec.priorityClassName: team {team:?} may not use PriorityClass {class:?} (the team file's priorityClasses: {granted})"
    )]
    PriorityClass {
        team: String,
        class: String,
        granted: String,
    },
    #[error(
        "spec.ingress.host: team {team:?} may not claim host {host:?} (the team file's hosts: {granted})"
    )]
    Host {
        team: String,
        host: String,
        granted: String,
    },
}

/// May `p` see a workload of `team` in `namespace` in reports (owners)? Its own teams',
/// its namespaces', or everything for a member of an admin team.
pub fn may_see_workload(cfg: &AuthConfig, p: &Principal, team: &str, namespace: &str) -> bool {
    p.teams.contains(team) || is_admin(cfg, p) || may_use_namespace(cfg, p, namespace)
}

/// Is `p` in an admin team (sees every team's workloads, may drain members)?
pub fn is_admin(cfg: &AuthConfig, p: &Principal) -> bool {
    p.teams
        .iter()
        .any(|t| cfg.teams.get(t).is_some_and(|pol| pol.admin))
}

/// May `team`'s workload use what it uses? Every use needs the team's grant; the first
/// one missing is named with its field.
pub fn authorize_privileges(
    cfg: &AuthConfig,
    team: &str,
    uses: &[crate::api::pod_policy::Use],
) -> Result<(), Forbidden> {
    let granted = cfg
        .teams
        .get(team)
        .map(|p| p.privileges.clone())
        .unwrap_or_default();
    match uses
        .iter()
        .find(|u| !granted.iter().any(|g| g == u.privilege.as_str()))
    {
        None => Ok(()),
        Some(u) => Err(Forbidden::Privilege {
            team: team.to_string(),
            privilege: u.privilege.as_str().to_string(),
            field: u.field.clone(),
            granted: if granted.is_empty() {
                "none".into()
            } else {
                granted.join(", ")
            },
        }),
    }
}

/// May `team` name PriorityClass `class`? Only one its policy lists (or `*`).
pub fn authorize_priority_class(
    cfg: &AuthConfig,
    team: &str,
    class: &str,
) -> Result<(), Forbidden> {
    let granted = grants(cfg, team, |p| &p.priority_classes);
    if granted.iter().any(|g| g == class || g == "*") {
        return Ok(());
    }
    Err(Forbidden::PriorityClass {
        team: team.to_string(),
        class: class.to_string(),
        granted: grant_list(granted),
    })
}

/// May `team` claim ingress host `host`? Only one its policy's `hosts` cover.
pub fn authorize_host(cfg: &AuthConfig, team: &str, host: &str) -> Result<(), Forbidden> {
    let granted = grants(cfg, team, |p| &p.hosts);
    if granted
        .iter()
        .any(|g| crate::api::ingress_host::pattern_covers(g, host))
    {
        return Ok(());
    }
    Err(Forbidden::Host {
        team: team.to_string(),
        host: host.to_string(),
        granted: grant_list(granted),
    })
}

/// One list of a team's policy (none for a team without one).
fn grants<'a>(
    cfg: &'a AuthConfig,
    team: &str,
    of: fn(&TeamPolicy) -> &Vec<String>,
) -> &'a [String] {
    cfg.teams.get(team).map_or(&[][..], |p| of(p).as_slice())
}

/// A grant list as an error message shows it.
fn grant_list(granted: &[String]) -> String {
    if granted.is_empty() {
        "none".into()
    } else {
        granted.join(", ")
    }
}

fn list(teams: &BTreeSet<String>) -> String {
    if teams.is_empty() {
        "none".into()
    } else {
        teams.iter().cloned().collect::<Vec<_>>().join(", ")
    }
}

/// May `p` submit a workload owned by `owner_team` into `namespace`? Returns the team the
/// submission is made for.
pub fn authorize_submission<'a>(
    cfg: &AuthConfig,
    p: &Principal,
    owner_team: &'a str,
    namespace: &str,
    inline: bool,
) -> Result<&'a str, Forbidden> {
    if !p.teams.contains(owner_team) {
        return Err(Forbidden::NotInTeam {
            user: p.user.clone(),
            team: owner_team.to_string(),
            teams: list(&p.teams),
        });
    }
    let policy = cfg
        .teams
        .get(owner_team)
        .ok_or_else(|| Forbidden::UnknownTeam {
            team: owner_team.to_string(),
        })?;
    if !policy
        .namespaces
        .iter()
        .any(|pat| namespace_matches(pat, namespace))
    {
        return Err(Forbidden::Namespace {
            team: owner_team.to_string(),
            namespace: namespace.to_string(),
            allowed: if policy.namespaces.is_empty() {
                "none".into()
            } else {
                policy.namespaces.join(", ")
            },
        });
    }
    if inline && !policy.inline {
        return Err(Forbidden::InlineNotAllowed {
            team: owner_team.to_string(),
        });
    }
    Ok(owner_team)
}

/// A cheap check before an inline body is even parsed: some team of the caller must allow
/// inline resources.
pub fn may_submit_inline(cfg: &AuthConfig, p: &Principal) -> Result<(), Forbidden> {
    if p.teams
        .iter()
        .any(|t| cfg.teams.get(t).is_some_and(|pol| pol.inline))
    {
        Ok(())
    } else {
        Err(Forbidden::NoInlineTeam {
            user: p.user.clone(),
            teams: list(&p.teams),
        })
    }
}

/// Whether one of the caller's teams may use `namespace` (reads of its workloads).
pub fn may_use_namespace(cfg: &AuthConfig, p: &Principal, namespace: &str) -> bool {
    p.teams.iter().any(|t| {
        cfg.teams.get(t).is_some_and(|pol| {
            pol.namespaces
                .iter()
                .any(|pat| namespace_matches(pat, namespace))
        })
    })
}

/// [`may_use_namespace`] as an error for a request about one namespace.
pub fn authorize_namespace(
    cfg: &AuthConfig,
    p: &Principal,
    namespace: &str,
) -> Result<(), Forbidden> {
    if may_use_namespace(cfg, p, namespace) {
        Ok(())
    } else {
        Err(Forbidden::NamespaceRead {
            user: p.user.clone(),
            teams: list(&p.teams),
            namespace: namespace.to_string(),
        })
    }
}

/// May `p` delete (or replace) a workload owned by `owner_team` in `namespace`?
pub fn authorize_change_of_existing(
    cfg: &AuthConfig,
    p: &Principal,
    owner_team: &str,
    namespace: &str,
) -> Result<(), Forbidden> {
    authorize_submission(cfg, p, owner_team, namespace, false).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> AuthConfig {
        let f = AuthFile::parse(
            "tokens.yaml",
            r#"
tokens:
  - {user: alice, token: a-token, teams: [ads]}
  - {user: bob, tokenSha256: "97dd3707015dcf069cf73022ed7173b1165db6eff24b441cb57fd069a8c4e525", teams: [search, ads-ml]}
teams:
  ads: {namespaces: [ads, "ads-*"], inline: true}
  search: {namespaces: [search]}
  ads-ml: {namespaces: ["*"], groups: ["system:serviceaccounts:ml"]}
"#,
        )
        .unwrap();
        AuthConfig::merge(&[("tokens.yaml".into(), f)]).unwrap()
    }

    #[test]
    fn tokens_authenticate_in_clear_or_by_digest() {
        let c = cfg();
        assert_eq!(authenticate(&c, "a-token").unwrap().user, "alice");
        // sha256("bob-token")
        assert_eq!(authenticate(&c, "bob-token").unwrap().user, "bob");
        assert_eq!(authenticate(&c, "nope"), Err(AuthError::Unknown));
        assert_eq!(bearer(None), Err(AuthError::Missing));
        assert_eq!(bearer(Some(b"Basic abc")), Err(AuthError::Malformed));
        assert_eq!(bearer(Some(b"Bearer ")), Err(AuthError::Malformed));
        assert_eq!(bearer(Some(b"bearer  tok ")), Ok("tok"));
        assert_eq!(bearer(Some(&[0xff, 0xfe])), Err(AuthError::Malformed));
    }

    #[test]
    fn bad_token_files_are_rejected_with_the_entry() {
        let f = AuthFile::parse("t", "tokens: [{user: x}]").unwrap();
        let e = AuthConfig::merge(&[("t".into(), f)]).unwrap_err();
        assert!(e.to_string().contains("tokens[0] (x)"), "{e}");
        let f = AuthFile::parse("t", "tokens: [{user: x, tokenSha256: abc}]").unwrap();
        assert!(AuthConfig::merge(&[("t".into(), f)]).is_err());
        assert!(AuthFile::parse("t", "tokenz: []").is_err(), "unknown keys");
        let a = AuthFile::parse("a", "teams: {x: {namespaces: [a]}}").unwrap();
        let e = AuthConfig::merge(&[("a".into(), a.clone()), ("b".into(), a)]).unwrap_err();
        assert_eq!(e, ConfigError::DuplicateTeam { team: "x".into() });
        assert_eq!(AuthFile::parse("e", "").unwrap().tokens.len(), 0);
    }

    #[test]
    fn submissions_need_the_owner_team_its_namespace_and_inline_permission() {
        let c = cfg();
        let alice = authenticate(&c, "a-token").unwrap();
        let bob = authenticate(&c, "bob-token").unwrap();
        assert_eq!(
            authorize_submission(&c, &alice, "ads", "ads", true),
            Ok("ads")
        );
        assert_eq!(
            authorize_submission(&c, &alice, "ads", "ads-canary", false),
            Ok("ads")
        );
        assert!(matches!(
            authorize_submission(&c, &alice, "search", "search", false),
            Err(Forbidden::NotInTeam { .. })
        ));
        assert!(matches!(
            authorize_submission(&c, &alice, "ads", "search", false),
            Err(Forbidden::Namespace { .. })
        ));
        assert!(matches!(
            authorize_submission(&c, &bob, "search", "search", true),
            Err(Forbidden::InlineNotAllowed { .. })
        ));
        assert!(may_submit_inline(&c, &alice).is_ok());
        assert!(may_submit_inline(&c, &bob).is_err());
        assert!(may_use_namespace(&c, &bob, "anything"), "ads-ml has *");
        assert!(!may_use_namespace(&c, &alice, "search"));
        assert!(authorize_namespace(&c, &alice, "search").is_err());
    }

    #[test]
    fn privileges_need_the_teams_grant_and_unknown_grants_are_refused() {
        use crate::api::pod_policy::{Privilege, Use};
        let file = AuthFile::parse(
            "t.yaml",
            "teams:\n  infra: {namespaces: [x], privileges: [hostPath, daemon]}\n  ads: {namespaces: [x]}\n",
        )
        .unwrap();
        let cfg = AuthConfig::merge(&[("t.yaml".into(), file)]).unwrap();
        let host = Use {
            privilege: Privilege::HostPath,
            field: "spec.template.spec.volumes[0].hostPath".into(),
        };
        let privileged = Use {
            privilege: Privilege::Privileged,
            field: "spec.template.spec.containers[0].securityContext.privileged".into(),
        };
        assert!(authorize_privileges(&cfg, "infra", std::slice::from_ref(&host)).is_ok());
        assert!(authorize_privileges(&cfg, "ads", &[]).is_ok());
        let err = authorize_privileges(&cfg, "ads", std::slice::from_ref(&host)).unwrap_err();
        assert!(err.to_string().contains("volumes[0].hostPath"), "{err}");
        let err = authorize_privileges(&cfg, "infra", &[host, privileged]).unwrap_err();
        assert!(err.to_string().contains("\"privileged\""), "{err}");
        let bad = AuthFile::parse("b.yaml", "teams:\n  x: {privileges: [root]}\n").unwrap();
        let err = AuthConfig::merge(&[("b.yaml".into(), bad)]).unwrap_err();
        assert!(err.to_string().contains("teams.x.privileges"), "{err}");
    }

    #[test]
    fn debug_output_never_shows_a_token() {
        let file = AuthFile::parse(
            "t.yaml",
            "tokens:\n  - {user: alice, token: s3cr3t-value, teams: [ads]}\n",
        )
        .unwrap();
        let shown = format!("{file:?}");
        assert!(!shown.contains("s3cr3t-value"), "{shown}");
        assert!(
            shown.contains("alice") && shown.contains("<redacted>"),
            "{shown}"
        );
    }

    #[test]
    fn reports_show_own_teams_and_namespaces_or_everything_to_admins() {
        let file = AuthFile::parse(
            "t.yaml",
            "teams:\n  ads: {namespaces: [ads]}\n  gov: {namespaces: [], admin: true}\n",
        )
        .unwrap();
        let cfg = AuthConfig::merge(&[("t.yaml".into(), file)]).unwrap();
        let who = |team: &str| Principal {
            user: "u".into(),
            teams: [team.to_string()].into(),
        };
        assert!(may_see_workload(&cfg, &who("ads"), "ads", "elsewhere"));
        assert!(may_see_workload(&cfg, &who("ads"), "search", "ads"));
        assert!(!may_see_workload(&cfg, &who("ads"), "search", "search"));
        assert!(may_see_workload(&cfg, &who("gov"), "search", "search"));
    }

    #[test]
    fn namespace_patterns() {
        assert!(namespace_matches("*", "x"));
        assert!(namespace_matches("ads-*", "ads-1"));
        assert!(!namespace_matches("ads-*", "ads"));
        assert!(namespace_matches("ads", "ads"));
        assert!(!namespace_matches("ads", "ads2"));
    }

    #[test]
    fn reviewed_users_get_teams_by_user_or_group() {
        let c = cfg();
        let t = c.teams_of_reviewed(
            "system:serviceaccount:ml:x",
            &["system:serviceaccounts:ml".into()],
        );
        assert_eq!(
            t.into_iter().collect::<Vec<_>>(),
            vec!["ads-ml".to_string()]
        );
        assert!(c.teams_of_reviewed("nobody", &[]).is_empty());
    }

    #[test]
    fn a_team_claims_only_the_hosts_its_file_names_and_a_bad_pattern_names_its_line() {
        let f = AuthFile::parse(
            "teams.yaml",
            "teams:\n  ads: {namespaces: [ads], hosts: [\"*.ads.example\", shared.example]}\n  search: {namespaces: [search]}\n",
        )
        .unwrap();
        let c = AuthConfig::merge(&[("teams.yaml".into(), f)]).unwrap();
        assert_eq!(authorize_host(&c, "ads", "web.ads.example"), Ok(()));
        assert_eq!(authorize_host(&c, "ads", "shared.example"), Ok(()));
        let e = authorize_host(&c, "ads", "web.search.example").unwrap_err();
        assert!(
            e.to_string().starts_with("spec.ingress.host:")
                && e.to_string().contains("*.ads.example"),
            "{e}"
        );
        let e = authorize_host(&c, "search", "web.search.example").unwrap_err();
        assert!(e.to_string().contains("hosts: none"), "{e}");
        let bad = AuthFile::parse(
            "teams.yaml",
            "teams:\n  ads: {namespaces: [ads], hosts: [ok.example, \"*.com\"]}\n",
        )
        .unwrap();
        let e = AuthConfig::merge(&[("teams.yaml".into(), bad)]).unwrap_err();
        assert!(
            e.to_string().starts_with("teams.yaml: teams.ads.hosts[1]:"),
            "{e}"
        );
    }
}
