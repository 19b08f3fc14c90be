//! How every command that talks to a cluster finds it.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// `pinfed/VERSION (pid PID)`: every request names the process that made it (set by the
/// write gate's layer on every client), so an API server's audit log tells two replicas
/// apart (they share one ServiceAccount).
pub fn user_agent() -> String {
    format!(
        "pinfed/{} (pid {})",
        env!("CARGO_PKG_VERSION"),
        std::process::id()
    )
}

#[derive(Debug, Clone, Args)]
pub struct KubeArgs {
    /// Kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster).
    #[arg(long, env = "KUBECONFIG", global = true)]
    pub kubeconfig: Option<PathBuf>,
    /// Context in the kubeconfig (default: its current context).
    #[arg(long, env = "PINFED_CONTEXT", global = true)]
    pub context: Option<String>,
}

impl KubeArgs {
    pub async fn client(&self) -> anyhow::Result<Client> {
        self.client_for(self.context.as_deref()).await
    }

    /// A client for a named context of the same kubeconfig.
    pub async fn client_for(&self, context: Option<&str>) -> anyhow::Result<Client> {
        let opts = KubeConfigOptions {
            context: context.map(String::from),
            ..Default::default()
        };
        let mut config = match &self.kubeconfig {
            Some(path) => {
                let first = first_file(path);
                let kc = Kubeconfig::read_from(&first)
                    .with_context(|| format!("reading kubeconfig {first}"))?;
                kube::Config::from_custom_kubeconfig(kc, &opts)
                    .await
                    .with_context(|| {
                        format!("context {:?} in {first}", context.unwrap_or("(current)"))
                    })?
            }
            None if context.is_some() => kube::Config::from_kubeconfig(&opts).await?,
            None => kube::Config::infer().await?,
        };
        config.connect_timeout = Some(Duration::from_secs(5));
        Ok(super::write_gate::client(config)?)
    }

    /// The server URL and CA of a context, as written in the kubeconfig.
    pub async fn server_and_ca(&self, context: &str) -> anyhow::Result<(String, Vec<u8>)> {
        let opts = KubeConfigOptions {
            context: Some(context.to_string()),
            ..Default::default()
        };
        let config = match &self.kubeconfig {
            Some(path) => {
                let first = first_file(path);
                kube::Config::from_custom_kubeconfig(Kubeconfig::read_from(&first)?, &opts).await?
            }
            None => kube::Config::from_kubeconfig(&opts).await?,
        };
        let ca = config
            .root_cert
            .as_ref()
            .and_then(|certs| certs.first())
            .map(|der| der_to_pem(der))
            .context("the member context has no certificate-authority data")?;
        Ok((
            config
                .cluster_url
                .to_string()
                .trim_end_matches('/')
                .to_string(),
            ca,
        ))
    }
}

fn der_to_pem(der: &[u8]) -> Vec<u8> {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        pem.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        pem.push('\n');
    }
    pem.push_str("-----END CERTIFICATE-----\n");
    pem.into_bytes()
}

/// $KUBECONFIG may list several files; the first one is used.
fn first_file(path: &std::path::Path) -> String {
    path.to_string_lossy()
        .split(':')
        .next()
        .unwrap_or_default()
        .to_string()
}
