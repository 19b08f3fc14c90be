//! The one etcd that serves every cluster; each API server keeps its data under its own
//! `--etcd-prefix`, which saves the memory of an etcd per cluster.

use std::path::Path;

use crate::state::Component;

/// etcd on 127.0.0.1:`etcd_port` (peers on `peer_port`), its data in `dir/etcd`; no fsync.
pub fn component(bin: &Path, dir: &Path, logs: &Path, etcd_port: u16, peer_port: u16) -> Component {
    Component {
        name: "etcd".into(),
        argv: vec![
            bin.join("etcd").display().to_string(),
            format!("--data-dir={}", dir.join("etcd").display()),
            format!("--listen-client-urls=http://127.0.0.1:{etcd_port}"),
            format!("--advertise-client-urls=http://127.0.0.1:{etcd_port}"),
            format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"),
            format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}"),
            format!("--initial-cluster=default=http://127.0.0.1:{peer_port}"),
            "--unsafe-no-fsync".into(),
            "--quota-backend-bytes=8589934592".into(),
            "--log-level=warn".into(),
        ],
        port: etcd_port,
        pid: None,
        log: logs.join("etcd.log"),
        env: Vec::new(),
    }
}
