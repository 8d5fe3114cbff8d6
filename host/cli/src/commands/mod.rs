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
use clap::{CommandFactory, Parser, Subcommand};
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
    /// Print the API access the operator needs, as JSON: each resource, its
    /// verbs, where (watched namespaces, cluster-wide, its own namespace) and
    /// why. deploy/operator/rbac-rules.json is this output; the RBAC
    /// manifests are checked against it.
    Rbac,
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
    /// Print a shell completion script. bash: `source <(shardgate
    /// completions bash)`; zsh: `shardgate completions zsh >
    /// "${fpath[1]}/_shardgate"`; fish: `shardgate completions fish >
    /// ~/.config/fish/completions/shardgate.fish`.
    Completions(CompletionsArgs),
}

#[derive(clap::Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

impl Command {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            Command::Render(args) => args.run(),
            Command::Crd => print_crd(),
            Command::Rbac => {
                print!("{}", shardgate_operator::rbac::rules_json());
                Ok(ExitCode::SUCCESS)
            }
            Command::Run(args) => args.run(),
            Command::Check(args) => args.run(),
            #[cfg(feature = "sandbox")]
            Command::Sandbox(args) => args.run(),
            Command::Webhook(args) => args.run(),
            Command::CheckModule(args) => args.run(),
            Command::Endpoints(args) => args.run(),
            Command::Completions(args) => {
                clap_complete::generate(
                    args.shell,
                    &mut Cli::command(),
                    "shardgate",
                    &mut std::io::stdout(),
                );
                Ok(ExitCode::SUCCESS)
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// clap's own consistency checks over every argument and subcommand.
    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    /// Every subcommand, at any depth, has an about text, and `--help` on it
    /// prints its usage and that text, as the binary does.
    #[test]
    fn every_subcommand_has_help() {
        fn walk(cmd: &clap::Command, path: &mut Vec<String>, seen: &mut Vec<String>) {
            for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
                path.push(sub.get_name().to_string());
                let about = sub
                    .get_about()
                    .unwrap_or_else(|| panic!("`shardgate {}` has no about text", path.join(" ")))
                    .to_string();
                let mut argv = vec!["shardgate".to_string()];
                argv.extend(path.iter().cloned());
                argv.push("--help".into());
                let err = match Cli::try_parse_from(&argv) {
                    Ok(_) => panic!("{argv:?} did not print help"),
                    Err(e) => e,
                };
                assert_eq!(err.kind(), clap::error::ErrorKind::DisplayHelp, "{argv:?}");
                let help = err.render().to_string();
                assert!(help.contains("Usage: shardgate"), "{argv:?}: {help}");
                let first = about.lines().next().unwrap_or_default();
                assert!(help.contains(first), "{argv:?} lacks {first:?}: {help}");
                seen.push(path.join(" "));
                walk(sub, path, seen);
                path.pop();
            }
        }
        let mut seen = Vec::new();
        walk(&Cli::command(), &mut Vec::new(), &mut seen);
        for name in [
            "render",
            "crd",
            "run",
            "check",
            "webhook",
            "check-module",
            "endpoints",
            "completions",
        ] {
            assert!(
                seen.iter().any(|s| s == name),
                "{name} not walked: {seen:?}"
            );
        }
    }
}
