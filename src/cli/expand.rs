//! `pinfed expand`: offline, print the native objects for Pinterest resources.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Args;

use crate::api::parse::{Document, parse_documents, parse_one};
use crate::api::validate;
use crate::api::validation::is_dns_label;
use crate::expand::{ExpandInput, expand, select_profile, to_yaml_stream};

#[derive(Debug, Args)]
pub struct ExpandArgs {
    /// The Pinterest resource(s) to expand: a YAML (or JSON) file, `-` for stdin. Several
    /// documents are expanded in order.
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub file: PathBuf,
    /// A RuntimeProfile file to inject (default: the built-in profile).
    #[arg(long, value_name = "FILE")]
    pub runtime: Option<PathBuf>,
    /// The member cluster the objects are for (identity env vars, default ingress host,
    /// and the workload's overrides that select it).
    #[arg(long, value_name = "NAME")]
    pub cluster: Option<String>,
    /// A topology file (`clusters/*.yaml`) giving `--cluster`'s region, zone and labels,
    /// for overrides that select members by label or use their variables. Without it
    /// the member is known by name only.
    #[arg(long, value_name = "FILE", requires = "cluster")]
    pub topology: Option<PathBuf>,
}

fn read(path: &Path) -> anyhow::Result<String> {
    if path == Path::new("-") {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("reading stdin")?;
        return Ok(s);
    }
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

pub fn run(args: ExpandArgs) -> anyhow::Result<()> {
    let file = args.file.display().to_string();
    if let Some(c) = &args.cluster
        && !is_dns_label(c)
    {
        bail!("--cluster: {c:?} is not a valid cluster name (a DNS label)");
    }
    let profile = match &args.runtime {
        None => None,
        Some(path) => {
            let rfile = path.display().to_string();
            match parse_one(&read(path)?).with_context(|| rfile.clone())? {
                Document::RuntimeProfile(p) => {
                    validate::runtime_profile(&p)
                        .with_context(|| format!("{rfile}: invalid RuntimeProfile"))?;
                    Some(p)
                }
                other => bail!(
                    "{rfile}: --runtime expects a RuntimeProfile, not a {}",
                    other.kind()
                ),
            }
        }
    };
    // The member as overrides see it: from the topology, or by name alone.
    let view = match (&args.cluster, &args.topology) {
        (Some(c), Some(path)) => {
            let t =
                crate::topology::Topology::from_yaml(&path.display().to_string(), &read(path)?)?;
            let views = crate::placement::ClusterView::from_topology(&t);
            let found = views.into_iter().find(|v| &v.name == c);
            Some(found.with_context(|| {
                format!("--cluster: {c:?} is not a member of {}", path.display())
            })?)
        }
        (Some(c), None) => Some(crate::placement::ClusterView {
            name: c.clone(),
            zone: None,
            region: None,
            labels: Default::default(),
            taints: Vec::new(),
            weight: 1,
            ready: true,
            nodes: Vec::new(),
        }),
        _ => None,
    };
    let docs = parse_documents(&read(&args.file)?).with_context(|| file.clone())?;
    let mut objects = Vec::new();
    for (i, doc) in docs.iter().enumerate() {
        let Document::Workload(w) = doc else {
            bail!(
                "{file}: document {}: a {} is not a workload; expand takes PinterestService, PinterestJobSet, PinterestCronJob, PinterestDaemon, PinterestTrainingJob or PinterestStatefulSet{}",
                i + 1,
                doc.kind(),
                if doc.kind() == "RuntimeProfile" {
                    " (pass a RuntimeProfile with --runtime)"
                } else {
                    ""
                }
            );
        };
        // The rules selecting the member, as the hub would write them into its slice.
        let resolved;
        let w = match &view {
            Some(v) if !w.as_ref().overrides().is_empty() => {
                let labels = v.selector_labels();
                let member = crate::overrides::Member {
                    name: &v.name,
                    region: v.region.as_deref(),
                    zone: v.zone.as_deref(),
                    labels: &labels,
                };
                let rules = crate::overrides::resolve(w.as_ref().overrides(), &member)
                    .with_context(|| format!("{file}: {} {:?}", w.kind(), w.as_ref().name()))?;
                let mut one = w.clone();
                one.set_overrides(rules);
                resolved = one;
                resolved.as_ref()
            }
            _ => w.as_ref(),
        };
        let chosen = select_profile(profile.as_slice(), w.runtime_version())
            .with_context(|| format!("{file}: {} {:?}", w.kind(), w.name()))?;
        let input = ExpandInput {
            profile: Some(chosen),
            cluster: args.cluster.as_deref(),
            ..ExpandInput::new(w)
        };
        objects.extend(expand(&input).with_context(|| file.clone())?);
    }
    write_stdout(&to_yaml_stream(&objects))
}

/// Writes to stdout; a closed pipe (`pinfed expand ... | head`) is not an error.
pub(crate) fn write_stdout(s: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(s.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r.context("writing to stdout"),
    }
}
