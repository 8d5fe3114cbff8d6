//! A Kubernetes client from a kubeconfig, or inferred.

use std::path::Path;

use anyhow::Context as _;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// Builds a client from a kubeconfig file, or infers one (in-cluster
/// service account, then `$KUBECONFIG`/`~/.kube/config`).
pub async fn client(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> anyhow::Result<kube::Client> {
    let options = KubeConfigOptions {
        context: context.map(String::from),
        ..KubeConfigOptions::default()
    };
    let config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .with_context(|| format!("reading {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &options).await?
        }
        None if context.is_some() => kube::Config::from_kubeconfig(&options).await?,
        None => kube::Config::infer().await?,
    };
    Ok(kube::Client::try_from(config)?)
}
