//! What runs: written to `state.json` in the state directory after every change, so
//! `down`, `status`, `stop` and `start` work from any later process.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Component {
    pub name: String,
    pub argv: Vec<String>,
    pub port: u16,
    pub pid: Option<u32>,
    pub log: PathBuf,
    /// Environment set for it beyond the shared `GOGC` (which an entry here overrides).
    #[serde(default)]
    pub env: Vec<(String, String)>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterState {
    pub name: String,
    pub role: String,
    pub apiserver_port: u16,
    /// In start order: kube-apiserver first.
    pub components: Vec<Component>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct State {
    pub topology_file: PathBuf,
    pub topology_digest: String,
    pub bin_dir: PathBuf,
    pub kubeconfig: PathBuf,
    pub etcd: Component,
    pub clusters: BTreeMap<String, ClusterState>,
}

impl State {
    pub fn path(dir: &Path) -> PathBuf {
        dir.join("state.json")
    }

    pub fn load(dir: &Path) -> anyhow::Result<Option<State>> {
        match std::fs::read_to_string(Self::path(dir)) {
            Ok(text) => Ok(Some(serde_json::from_str(&text)?)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    pub fn save(&self, dir: &Path) -> anyhow::Result<()> {
        let tmp = dir.join("state.json.tmp");
        std::fs::write(&tmp, serde_json::to_string_pretty(self)?)?;
        std::fs::rename(tmp, Self::path(dir))?;
        Ok(())
    }

    pub fn all_components(&self) -> impl Iterator<Item = &Component> {
        std::iter::once(&self.etcd).chain(self.clusters.values().flat_map(|c| c.components.iter()))
    }
}
