//! The real operator loop (`shardgate_operator::run`, managing Valkey, with
//! the embedded module) in a process of its own, for the chaos suite to
//! SIGKILL and start again:
//!
//! ```text
//! chaos-operator KUBECONFIG IDENTITY NAMESPACE [LEASE_NAME LEASE_SECONDS GRACE_SECONDS]
//! ```
//!
//! Without a lease it runs with no leader election. It logs to standard
//! error (`RUST_LOG`, default `info`) and runs until killed or interrupted.

use std::sync::Arc;

use anyhow::Context;
use shardgate_operator::{self as operator, LeaseOptions, Metrics, Options};
use shardgate_wasm::{Engine, Limits, Reconciler};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: chaos-operator KUBECONFIG IDENTITY NAMESPACE [LEASE_NAME LEASE_SECONDS GRACE_SECONDS]";
    let [kubeconfig, identity, namespace, lease @ ..] = args.as_slice() else {
        anyhow::bail!("{usage}");
    };
    let lease = match lease {
        [] => None,
        [name, duration, grace] => Some(LeaseOptions {
            name: name.clone(),
            namespace: namespace.clone(),
            duration_seconds: duration.parse().context("LEASE_SECONDS")?,
            grace_seconds: grace.parse().context("GRACE_SECONDS")?,
        }),
        _ => anyhow::bail!("{usage}"),
    };
    let text = std::fs::read_to_string(kubeconfig).with_context(|| kubeconfig.clone())?;
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::from_yaml(&text)?,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    let client = kube::Client::try_from(config)?;
    let engine = Engine::new(Limits::default())?;
    let module = engine.load_embedded()?;
    operator::run(
        Options {
            kubeconfig: None,
            context: None,
            namespace: Some(namespace.clone()),
            listen: None,
            lease,
            identity: identity.clone(),
            reconcile_all: None,
            manage_valkey: true,
            debounce: operator::DEBOUNCE,
            recheck: Default::default(),
            apply_shortcuts: true,
        },
        client,
        Arc::new(module) as Arc<dyn Reconciler>,
        Arc::new(Metrics::default()),
        async {
            let _ = tokio::signal::ctrl_c().await;
        },
    )
    .await
}
