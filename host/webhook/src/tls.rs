//! TLS for the webhook: an axum listener that terminates TLS with rustls
//! (ring), and a certificate resolver that picks up renewed files (as
//! cert-manager rotates them) without a restart.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tracing::{debug, info, warn};

/// How long a client may take to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the certificate files are checked for renewal.
const RELOAD_EVERY: Duration = Duration::from_secs(30);

/// The server certificate chain and its private key, PEM files.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TlsFiles {
    fn load(&self) -> anyhow::Result<CertifiedKey> {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&self.cert)
            .with_context(|| format!("reading {}", self.cert.display()))?
            .collect::<Result<_, _>>()
            .with_context(|| format!("parsing {}", self.cert.display()))?;
        if certs.is_empty() {
            anyhow::bail!("{} holds no certificate", self.cert.display());
        }
        let key = PrivateKeyDer::from_pem_file(&self.key)
            .with_context(|| format!("reading the private key {}", self.key.display()))?;
        let provider = rustls::crypto::ring::default_provider();
        CertifiedKey::from_der(certs, key, &provider).with_context(|| {
            format!(
                "{} does not match {}",
                self.key.display(),
                self.cert.display()
            )
        })
    }

    fn modified(&self) -> Option<(SystemTime, SystemTime)> {
        let m = |p: &PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        Some((m(&self.cert)?, m(&self.key)?))
    }
}

/// Serves the current certificate; a background task swaps in renewed
/// files. A renewal that fails to load keeps the old certificate (and says
/// so).
#[derive(Debug)]
struct Reloading {
    current: RwLock<Arc<CertifiedKey>>,
}

impl ResolvesServerCert for Reloading {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().unwrap().clone())
    }
}

fn watch(files: TlsFiles, resolver: Arc<Reloading>) {
    tokio::spawn(async move {
        let mut seen = files.modified();
        loop {
            tokio::time::sleep(RELOAD_EVERY).await;
            let now = files.modified();
            if now == seen {
                continue;
            }
            match files.load() {
                Ok(key) => {
                    *resolver.current.write().unwrap() = Arc::new(key);
                    seen = now;
                    info!(cert = %files.cert.display(), "reloaded the serving certificate");
                }
                Err(e) => {
                    warn!(error = %format!("{e:#}"), "renewed certificate not loaded; keeping the old one")
                }
            }
        }
    });
}

/// A TCP listener that hands axum TLS streams. Handshakes run concurrently
/// in their own tasks, so a slow client never holds up the others.
pub struct TlsListener {
    local: SocketAddr,
    ready: tokio::sync::mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
}

impl TlsListener {
    /// Binds `addr` and loads the certificate (failing now if it cannot).
    pub async fn bind(addr: SocketAddr, files: TlsFiles) -> anyhow::Result<Self> {
        let key = files.load()?;
        let resolver = Arc::new(Reloading {
            current: RwLock::new(Arc::new(key)),
        });
        watch(files, resolver.clone());
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let tcp = TcpListener::bind(addr)
            .await
            .with_context(|| format!("listening on {addr}"))?;
        let local = tcp.local_addr()?;
        let (tx, ready) = tokio::sync::mpsc::channel(64);
        tokio::spawn(accept_loop(tcp, TlsAcceptor::from(Arc::new(config)), tx));
        Ok(TlsListener { local, ready })
    }

    /// The address it listens on, with the actual port if bound to port 0.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }
}

async fn accept_loop(
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    ready: tokio::sync::mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
) {
    loop {
        let (stream, addr) = tokio::select! {
            accepted = tcp.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    warn!(error = %e, "accept");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = ready.closed() => return,
        };
        let (acceptor, ready) = (acceptor.clone(), ready.clone());
        tokio::spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => {
                    let _ = ready.send((tls, addr)).await;
                }
                Ok(Err(e)) => debug!(%addr, error = %e, "TLS handshake failed"),
                Err(_) => debug!(%addr, "TLS handshake timed out"),
            }
        });
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(accepted) => accepted,
            // The accept loop only ends once this receiver is gone.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local)
    }
}
