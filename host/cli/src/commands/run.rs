//! `shardgate run`: the operator.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use shardgate_operator::modules as operator_modules;
use shardgate_operator::{LeaseOptions, Metrics, ModuleReporter, Options};
use shardgate_wasm::swap::{
    Candidate, Checker, DEFAULT_CONFIGMAP_KEY, DEFAULT_ROLLBACK_AFTER, ModuleManager, ModuleSource,
    Serving,
};
use shardgate_wasm::{CallBudget, Engine, Limits, Precompiled, Tier};

use crate::logging::{self, LogFormat, shutdown_signal};

#[derive(clap::Args)]
pub struct RunArgs {
    /// Kubeconfig file, or a list of them separated by `:` (merged as
    /// kubectl merges $KUBECONFIG: the first to set a value wins). Without
    /// it: $KUBECONFIG, else the in-cluster service account, else
    /// ~/.kube/config.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use.
    #[arg(long)]
    context: Option<String>,
    /// Watch only this namespace (default: all namespaces).
    #[arg(short = 'n', long)]
    namespace: Option<String>,
    /// Address for /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:8080")]
    listen: std::net::SocketAddr,
    /// Name of the coordination.k8s.io Lease used for leader election.
    #[arg(long, default_value = "shardgate-leader")]
    lease_name: String,
    /// Namespace of the Lease.
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    lease_namespace: String,
    /// Run without leader election (only one replica may run).
    #[arg(long)]
    no_leader_election: bool,
    /// Manage Kubernetes objects only: never connect to the Valkey nodes
    /// (no cluster formation, no live announce changes; departing shards are
    /// deleted without draining).
    #[arg(long)]
    no_manage_valkey: bool,
    /// Watch events for one cluster this close together (milliseconds)
    /// start one reconcile; 0 reconciles on every event.
    #[arg(long, default_value_t = shardgate_operator::DEBOUNCE.as_millis() as u64)]
    debounce_ms: u64,
    /// This replica's identity in the Lease.
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// Run this reconcile component instead of the embedded one. The file
    /// is watched: each new version is checked (digest, compile, self-check
    /// on golden inputs) and swapped in live if it passes.
    #[arg(long, conflicts_with = "module_configmap")]
    module: Option<PathBuf>,
    /// The SHA-256 (hex) the module's bytes must have; any other version is
    /// rejected. Needs --module or --module-configmap.
    #[arg(long, value_name = "HEX")]
    module_sha256: Option<String>,
    /// Take the reconcile component from this ConfigMap's binaryData
    /// (NAMESPACE/NAME), watched through the API. The embedded module serves
    /// until the ConfigMap yields one that passes the checks.
    #[arg(long, value_name = "NAMESPACE/NAME")]
    module_configmap: Option<String>,
    /// The binaryData key of --module-configmap.
    #[arg(long, default_value = DEFAULT_CONFIGMAP_KEY)]
    module_configmap_key: String,
    /// Roll back to the previous good module after this many consecutive
    /// reconciles of one cluster in which the module trapped, exited, ran
    /// out of time or memory (whatever other clusters do).
    #[arg(long, default_value_t = DEFAULT_ROLLBACK_AFTER, value_parser = clap::value_parser!(u32).range(1..))]
    module_rollback_after: u32,
    /// Total memory the reconcile module's calls may use at once (bytes, or
    /// with a Ki/Mi/Gi suffix): at most budget / 64 MiB (the per-call cap)
    /// calls run at once, at least one. Keep it well below the container's
    /// memory limit.
    #[arg(long, value_name = "BYTES", default_value = "128Mi", value_parser = shardgate_wasm::budget::parse_bytes)]
    module_memory_budget: usize,
    /// Keep precompiled modules (.cwasm) in this directory (owner-only; only
    /// blobs this operator compiled are ever loaded), so a restart skips
    /// compiling. Off by default.
    #[arg(long, value_name = "DIR")]
    module_cache: Option<PathBuf>,
    /// Serve each new module version (--module, --module-configmap) from
    /// quickly compiled baseline code (Winch) as soon as it passes the
    /// checks, and switch to the optimised code (Cranelift) when that is
    /// compiled and checked too. With false, a swap waits for the optimised
    /// compile.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    module_baseline: bool,
    /// Allocate wasm instances from a pool (hundreds of GiB of address space
    /// reserved up front, quickest instantiation). With false, on demand:
    /// for environments that refuse the reservation, such as valgrind.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    wasm_pooling: bool,
    /// Skip re-serialising desired objects already known, look up several
    /// missing names with one list, keep a cached object's digest when
    /// only its status changed, and wake no reconcile for a watch event
    /// that changes nothing a reconcile reads. Off only to measure what
    /// that saves (`cargo bench -p shardgate --bench scale`).
    #[arg(long, hide = true, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    apply_shortcuts: bool,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

/// Where `shardgate run` takes its module from.
fn module_source(args: &RunArgs) -> anyhow::Result<ModuleSource> {
    let sha256 = args.module_sha256.clone();
    if let Some(pin) = &sha256
        && (pin.len() != 64 || !pin.chars().all(|c| c.is_ascii_hexdigit()))
    {
        anyhow::bail!("--module-sha256 must be 64 hex digits, got {pin:?}");
    }
    Ok(match (&args.module, &args.module_configmap) {
        (Some(path), _) => ModuleSource::File {
            path: path.clone(),
            sha256,
        },
        (None, Some(cm)) => {
            let (namespace, name) = cm
                .split_once('/')
                .filter(|(ns, n)| !ns.is_empty() && !n.is_empty() && !n.contains('/'))
                .with_context(|| {
                    format!("--module-configmap must be NAMESPACE/NAME, got {cm:?}")
                })?;
            ModuleSource::ConfigMap {
                namespace: namespace.into(),
                name: name.into(),
                key: args.module_configmap_key.clone(),
                sha256,
            }
        }
        (None, None) => {
            if sha256.is_some() {
                anyhow::bail!("--module-sha256 needs --module or --module-configmap");
            }
            ModuleSource::Embedded
        }
    })
}

impl RunArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let args = self;
        logging::init(args.log_format);
        let source = module_source(&args)?;
        let runtime = tokio::runtime::Runtime::new()?;
        runtime.block_on(async move {
            let wasm = Arc::new(Engine::with_options(
                Limits::default(),
                Tier::Optimized,
                args.wasm_pooling,
            )?);
            let mut checker = Checker::new(wasm.clone());
            if let Some(dir) = &args.module_cache {
                checker = checker.with_precompiled(Precompiled::open(dir)?);
            }
            if args.module_baseline && source != ModuleSource::Embedded {
                checker = checker.with_baseline(Arc::new(Engine::with_options(
                    Limits::default(),
                    Tier::Baseline,
                    args.wasm_pooling,
                )?));
            }
            // A file must pass the checks to start; a ConfigMap is read once the
            // client is up, and the embedded module serves until then.
            let initial = match &source {
                ModuleSource::File { path, sha256 } => {
                    let bytes = std::fs::read(path)
                        .with_context(|| format!("reading {}", path.display()))?;
                    let accepted = Candidate {
                        bytes: &bytes,
                        sha256: sha256.as_deref(),
                    }
                    .check(&wasm, &checker.golden, checker.precompiled.as_ref())
                    .with_context(|| format!("module {}", path.display()))?;
                    Serving {
                        module: accepted.module,
                        digest: accepted.digest,
                        source: source.label(),
                    }
                }
                _ => Serving::embedded(&wasm)?,
            };
            let initial_digest = initial.digest.clone();
            let client =
                shardgate_k8s::client(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
            let identity = args
                .identity
                .unwrap_or_else(|| format!("shardgate-{}", std::process::id()));
            let reporter = ModuleReporter::new(Arc::new(Metrics::default()));
            let modules = Arc::new(
                ModuleManager::new(initial, reporter.clone())
                    .with_rollback_after(args.module_rollback_after)
                    .with_budget(CallBudget::new(
                        args.module_memory_budget,
                        wasm.limits().memory_bytes,
                    )),
            );
            reporter.set_events(
                client.clone(),
                &identity,
                operator_modules::event_reference(&source, &args.lease_namespace, &identity),
            );
            let follower = operator_modules::follow(
                modules.clone(),
                checker,
                source.clone(),
                Some(client.clone()),
                matches!(source, ModuleSource::File { .. }).then_some(initial_digest),
            );
            let options = Options {
                kubeconfig: args.kubeconfig,
                context: args.context,
                namespace: args.namespace,
                listen: Some(args.listen),
                lease: (!args.no_leader_election).then_some(LeaseOptions {
                    name: args.lease_name,
                    namespace: args.lease_namespace,
                    duration_seconds: 15,
                    grace_seconds: 5,
                }),
                identity,
                reconcile_all: None,
                manage_valkey: !args.no_manage_valkey,
                debounce: std::time::Duration::from_millis(args.debounce_ms),
                recheck: Default::default(),
                apply_shortcuts: args.apply_shortcuts,
            };
            shardgate_operator::run_with_modules(
                options,
                client,
                modules,
                reporter,
                shutdown_signal(),
            )
            .await?;
            follower.abort();
            // The wasm engine (and its epoch thread) lives until here.
            drop(wasm);
            Ok(ExitCode::SUCCESS)
        })
    }
}
