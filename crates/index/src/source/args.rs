//! `--cluster-state DIR` / `--kubeconfig PATH`: the flags that choose the source.

use clap::Args;
use std::path::PathBuf;

use super::{ClusterSource, kube::KubeSource, offline::OfflineSource};
use crate::metrics::IndexMetrics;

/// `--cluster-state DIR` (offline mode) or `--kubeconfig PATH` (else in-cluster config or
/// `KUBECONFIG`).
#[derive(Clone, Debug, Args)]
pub struct ClusterArgs {
    /// Serve from the manifests in this directory instead of a Kubernetes API server: every
    /// `*.yaml`/`*.yml`/`*.json` file, re-read when it changes.
    #[arg(
        long,
        env = "LINKERD_CLUSTER_STATE",
        value_name = "DIR",
        conflicts_with = "kubeconfig"
    )]
    pub cluster_state: Option<PathBuf>,

    /// Path to a kubeconfig; without it the in-cluster configuration (or `KUBECONFIG`) is used.
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
}

impl ClusterArgs {
    /// Builds the chosen source; nothing is read or watched until
    /// [`Watches::start`](crate::Watches::start). Must be called within a Tokio runtime.
    ///
    /// Errors when the state directory is not a readable directory, or no Kubernetes
    /// configuration is found.
    pub async fn source(&self, metrics: IndexMetrics) -> anyhow::Result<ClusterSource> {
        if let Some(dir) = &self.cluster_state {
            let source = OfflineSource::new(dir.clone(), metrics)?;
            tracing::info!(dir = %dir.display(), "offline mode: serving the cluster state directory");
            return Ok(ClusterSource::Offline(source));
        }
        let config = match &self.kubeconfig {
            Some(path) => {
                let kubeconfig = ::kube::config::Kubeconfig::read_from(path)
                    .map_err(|e| anyhow::anyhow!("cannot read kubeconfig {}: {e}", path.display()))?;
                ::kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?
            }
            None => ::kube::Config::infer().await.map_err(|e| {
                anyhow::anyhow!("no Kubernetes configuration found ({e}); use --cluster-state DIR for offline mode")
            })?,
        };
        tracing::info!(cluster_url = %config.cluster_url, "watching the Kubernetes API");
        Ok(ClusterSource::Kube(KubeSource::new(
            ::kube::Client::try_from(config)?,
            metrics,
        )))
    }
}
