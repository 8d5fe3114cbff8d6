//! `shardgate webhook`: the validating admission webhook.

use std::path::PathBuf;
use std::process::ExitCode;

use shardgate_k8s::crd::ValkeyCluster;
use shardgate_wasm::{CallBudget, Engine, Limits};
use shardgate_webhook as webhook;

use super::load_module;
use crate::logging::{self, LogFormat, shutdown_signal};

#[derive(clap::Args)]
pub struct WebhookArgs {
    /// Address to serve HTTPS on.
    #[arg(long, default_value = "0.0.0.0:8443")]
    listen: std::net::SocketAddr,
    /// Serving certificate chain (PEM). Renewed files are picked up.
    #[arg(long, default_value = "/etc/shardgate/tls/tls.crt")]
    tls_cert: PathBuf,
    /// Its private key (PEM).
    #[arg(long, default_value = "/etc/shardgate/tls/tls.key")]
    tls_key: PathBuf,
    /// Kubeconfig for the collision check's cluster lookups, or a
    /// `:`-separated list of them merged as kubectl does (default: in
    /// cluster, then $KUBECONFIG).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Kubeconfig context.
    #[arg(long)]
    context: Option<String>,
    /// Do not look up other clusters (no collision check).
    #[arg(long)]
    offline: bool,
    /// Run this reconcile component instead of the embedded one.
    #[arg(long)]
    module: Option<PathBuf>,
    /// Total memory the reconcile module's calls may use at once (bytes, or
    /// with a Ki/Mi/Gi suffix): at most budget / 64 MiB (the per-call cap)
    /// calls run at once, at least one. A review that finds no free slot
    /// waits up to 3 s, then answers 503 (the failurePolicy decides).
    #[arg(long, value_name = "BYTES", default_value = "64Mi", value_parser = shardgate_wasm::budget::parse_bytes)]
    module_memory_budget: usize,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Json)]
    log_format: LogFormat,
}

impl WebhookArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let args = self;
        logging::init(args.log_format);
        let runtime = tokio::runtime::Runtime::new()?;
        runtime.block_on(async move {
            let wasm = Engine::new(Limits::default())?;
            let module = load_module(&wasm, args.module.as_ref())?;
            let clusters: std::sync::Arc<dyn webhook::ClusterNames> = if args.offline {
                std::sync::Arc::new(webhook::NoClusters)
            } else {
                let client =
                    shardgate_k8s::client(args.kubeconfig.as_deref(), args.context.as_deref())
                        .await?;
                let (store, writer) = kube::runtime::reflector::store();
                let api: kube::Api<ValkeyCluster> = kube::Api::all(client);
                tokio::spawn(async move {
                    use futures::StreamExt;
                    use kube::runtime::WatchStreamExt;
                    kube::runtime::watcher(api, kube::runtime::watcher::Config::default())
                        .default_backoff()
                        .reflect(writer)
                        .for_each(|_| async {})
                        .await;
                });
                std::sync::Arc::new(store)
            };
            webhook::serve(
                webhook::Options {
                    listen: args.listen,
                    tls: webhook::TlsFiles {
                        cert: args.tls_cert,
                        key: args.tls_key,
                    },
                    slots: webhook::Slots {
                        budget: CallBudget::new(
                            args.module_memory_budget,
                            wasm.limits().memory_bytes,
                        ),
                        wait: webhook::SLOT_WAIT,
                    },
                },
                std::sync::Arc::new(module),
                clusters,
                shutdown_signal(),
            )
            .await?;
            drop(wasm);
            Ok(ExitCode::SUCCESS)
        })
    }
}
