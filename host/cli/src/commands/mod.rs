//! One module per subcommand, each with its arguments and its `run`.

mod check;
mod check_module;
mod endpoints;
mod render;
mod run;
#[cfg(feature = "sandbox")]
mod sandbox;
mod webhook;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use kube::CustomResourceExt;
use shardgate_k8s::crd::ValkeyCluster;
use shardgate_wasm::{Engine, Module};

#[derive(Parser)]
#[command(
    name = "shardgate",
    version,
    about = "Makes a Valkey cluster reachable from outside Kubernetes."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Print everything the operator would apply for one ValkeyCluster, as a
    /// v1 List, followed by the cluster with its computed status.
    Render(render::RenderArgs),
    /// Print the ValkeyCluster CustomResourceDefinition.
    Crd,
    /// Run the operator.
    Run(run::RunArgs),
    /// Validate ValkeyCluster manifests offline (files or directories) and
    /// print every violation with its field path. Exits non-zero on any error.
    Check(check::CheckArgs),
    /// Run one ValkeyCluster on this machine, without Kubernetes: the API
    /// emulator, the real operator loop, a kubelet that runs each pod as a
    /// real valkey-server process on its own loopback IP (127.0.1.N), and a
    /// kube-proxy that forwards NodePorts (127.0.0.1) and load balancers
    /// (127.0.2.S). Prints the external endpoints once ready; stops every
    /// process on Ctrl-C or SIGTERM.
    #[cfg(feature = "sandbox")]
    Sandbox(sandbox::SandboxArgs),
    /// Serve a ValidatingAdmissionWebhook for ValkeyClusters over TLS, with
    /// the same reconcile module: every violation with its field path, and
    /// name collisions with the namespace's other clusters.
    Webhook(webhook::WebhookArgs),
    /// Run the checks `shardgate run` runs before it swaps a module in:
    /// digest, compile and type check, self-check on the golden inputs.
    /// Prints the digest and timings; exits non-zero if the module would be
    /// rejected.
    CheckModule(check_module::CheckModuleArgs),
    /// Print a live ValkeyCluster's external endpoints, its Ready condition
    /// and a valkey-cli command that logs in as `default` (the password is
    /// read from its Secret by kubectl, never printed). Exits non-zero while
    /// no endpoint is ready.
    Endpoints(endpoints::EndpointsArgs),
}

impl Command {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            Command::Render(args) => args.run(),
            Command::Crd => print_crd(),
            Command::Run(args) => args.run(),
            Command::Check(args) => args.run(),
            #[cfg(feature = "sandbox")]
            Command::Sandbox(args) => args.run(),
            Command::Webhook(args) => args.run(),
            Command::CheckModule(args) => args.run(),
            Command::Endpoints(args) => args.run(),
        }
    }
}

fn print_crd() -> anyhow::Result<ExitCode> {
    print!("{}", serde_saphyr::to_string(&ValkeyCluster::crd())?);
    Ok(ExitCode::SUCCESS)
}

/// The module at `path`, or the embedded one.
fn load_module(engine: &Engine, path: Option<&PathBuf>) -> anyhow::Result<Module> {
    match path {
        Some(p) => {
            let bytes = std::fs::read(p).with_context(|| format!("reading {}", p.display()))?;
            engine
                .load(&bytes)
                .with_context(|| format!("loading module {}", p.display()))
        }
        None => engine.load_embedded(),
    }
}
