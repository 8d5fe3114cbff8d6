//! `shardgate run`: the operator.
//!
//! A kube-rs [`Controller`] for ValkeyClusters that owns the shard Services
//! and the per-node ConfigMaps, headless Services and StatefulSets, and
//! watches the nodes' Pods; a change to any of them triggers its controlling
//! cluster (a Pod: the one its label names). Each reconcile ([`reconcile`])
//! builds the observed snapshot from the caches
//! ([`shardgate_k8s::cache`]), calls the reconcile module, applies the
//! result with server-side apply and prunes what is no longer wanted.
//! With leader election on, only the holder of the Lease runs the controller.

pub mod context;
mod controller;
pub mod http;
pub mod leader;
pub mod metrics;
pub mod modules;
pub mod rbac;
pub mod reconcile;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use anyhow::Context as _;
use shardgate_wasm::Reconciler;
use shardgate_wasm::swap::{ModuleManager, Serving};
use tokio::sync::watch;
use tracing::info;

pub use context::Context;
pub use http::Health;
pub use metrics::Metrics;
pub use modules::ModuleReporter;
pub use reconcile::Recheck;

/// Watch events for one cluster within this long of each other start one
/// reconcile, not one each: creating a cluster's objects raises dozens, in
/// a burst. Every edit waits this long before its first look, so it is
/// short: 20 ms cost no CPU against 100 ms at 100 clusters and took 0.1 s
/// off each edit (docs/performance.md).
pub const DEBOUNCE: std::time::Duration = std::time::Duration::from_millis(20);

/// How `shardgate run` connects and behaves.
#[derive(Clone, Debug)]
pub struct Options {
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    /// Watch one namespace; all when `None`.
    pub namespace: Option<String>,
    pub listen: Option<SocketAddr>,
    /// `None` disables leader election.
    pub lease: Option<LeaseOptions>,
    pub identity: String,
    /// Each message re-reconciles every cluster (e.g. after a module swap).
    pub reconcile_all: Option<tokio::sync::broadcast::Sender<()>>,
    /// Talk to the Valkey nodes (at their pod IPs): form the cluster, keep
    /// its topology and apply announce settings live. Off only where pods
    /// are not real (API-only tests).
    pub manage_valkey: bool,
    /// Watch events for one cluster this close together start one
    /// reconcile ([`DEBOUNCE`] by default; zero reconciles on each).
    pub debounce: std::time::Duration,
    /// How soon to look again at a cluster whose Valkey is reshaping.
    pub recheck: Recheck,
    /// Skip re-serialising desired objects already known, look up the
    /// names of several objects about to be created with one list
    /// ([`shardgate_k8s::apply::Recent`]), keep a cached object's
    /// owned-fields digest when only its status changed, and wake no
    /// reconcile for a watch event that changes nothing a reconcile reads
    /// (an owned object whose cache entry reads the same, a cluster whose
    /// status alone changed). Off only to measure what that saves, side by
    /// side (`cargo bench -p shardgate --bench scale`).
    pub apply_shortcuts: bool,
}

/// The Lease used for leader election, and its timings.
#[derive(Clone, Debug)]
pub struct LeaseOptions {
    pub name: String,
    pub namespace: String,
    pub duration_seconds: u64,
    pub grace_seconds: u64,
}

/// Runs the operator with one fixed module until `shutdown` resolves (or
/// leadership is lost). See [`run_with_modules`] for hot-swappable modules.
pub async fn run(
    options: Options,
    client: kube::Client,
    module: Arc<dyn Reconciler>,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let reporter = ModuleReporter::new(metrics);
    let modules = Arc::new(ModuleManager::new(
        Serving {
            module,
            digest: "unknown".into(),
            source: "given".into(),
        },
        reporter.clone(),
    ));
    run_with_modules(options, client, modules, reporter, shutdown).await
}

/// Runs the operator until `shutdown` resolves (or leadership is lost),
/// with the module `modules` serves: swaps and rollbacks take effect for
/// reconciles that start afterwards and re-reconcile every cluster.
/// `reporter` is the one `modules` reports to; its metrics are the
/// operator's. Module Events go to the operator's Pod (`identity` in the
/// Lease's namespace, or `default`) unless [`ModuleReporter::set_events`]
/// was called.
pub async fn run_with_modules(
    options: Options,
    client: kube::Client,
    modules: Arc<ModuleManager>,
    reporter: Arc<ModuleReporter>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let metrics = reporter.metrics().clone();
    if !reporter.has_events() {
        let namespace = options
            .lease
            .as_ref()
            .map(|l| l.namespace.as_str())
            .unwrap_or("default");
        reporter.set_events(
            client.clone(),
            &options.identity,
            modules::pod_reference(namespace, &options.identity),
        );
    }
    let module = modules;
    let health = Arc::new(Health::default());
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    tokio::spawn({
        let stop_tx = stop_tx.clone();
        async move {
            shutdown.await;
            let _ = stop_tx.send(true);
        }
    });

    let server = match options.listen {
        Some(addr) => {
            let listener = http::bind(addr)
                .await
                .with_context(|| format!("listening on {addr}"))?;
            info!(addr = %listener.local_addr()?, "serving /metrics, /healthz, /readyz");
            Some(tokio::spawn(http::serve(
                listener,
                metrics.clone(),
                health.clone(),
                stopped(stop_rx.clone()),
            )))
        }
        None => None,
    };

    let result = match &options.lease {
        None => {
            controller::controller(&options, client, module, metrics, health.clone(), stop_rx).await
        }
        Some(lease) => {
            health.ready.store(true, Ordering::Relaxed); // a standby is healthy
            leader::while_leader(client.clone(), lease, &options.identity, stop_rx.clone(), {
                let options = options.clone();
                let health = health.clone();
                move |lost| {
                    let (options, client, module) =
                        (options.clone(), client.clone(), module.clone());
                    let (metrics, health) = (metrics.clone(), health.clone());
                    async move {
                        controller::controller(&options, client, module, metrics, health, lost)
                            .await
                    }
                }
            })
            .await
        }
    };
    let _ = stop_tx.send(true);
    if let Some(server) = server {
        let _ = server.await;
    }
    result
}
