//! The `shardgate` command line.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResourceExt;
use shardgate::crd::ValkeyCluster;
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
