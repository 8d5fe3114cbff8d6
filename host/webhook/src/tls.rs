//! TLS for the webhook: a listener that terminates TLS with rustls (ring),
//! a certificate resolver that picks up renewed files (as cert-manager
//! rotates them) without a restart, and the HTTP serving over it
//! (`shardgate-http`'s), with limits that a slow or greedy client cannot get
//! around (see [`Limits`]).

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use axum::Router;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
pub use shardgate_http::Limits;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tracing::{info, warn};

/// How often the certificate files are checked for renewal.
const RELOAD_EVERY: Duration = Duration::from_secs(30);

/// The server certificate chain and its private key, PEM files.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// The certificate chain, leaf first.
    pub cert: PathBuf,
    /// The private key of the leaf certificate.
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

/// One accepted TLS connection; it holds one of the listener's
/// [`Limits::max_connections`] slots until dropped.
pub type TlsConnection = shardgate_http::Connection<TlsStream<TcpStream>>;

/// A TCP listener that yields TLS connections, at most
/// [`Limits::max_connections`] at once. Handshakes run concurrently in their
/// own tasks, under [`Limits::handshake_timeout`], so a slow client never
/// holds up the others. Serve it with [`TlsListener::serve`] (or, without
/// the HTTP limits, `axum::serve`).
pub struct TlsListener {
    inner: shardgate_http::Listener<TlsStream<TcpStream>>,
}

impl TlsListener {
    /// Binds `addr` with the default [`Limits`] and loads the certificate
    /// (failing now if it cannot).
    pub async fn bind(addr: SocketAddr, files: TlsFiles) -> anyhow::Result<Self> {
        Self::bind_with(addr, files, Limits::default()).await
    }

    /// Binds `addr` with `limits` and loads the certificate (failing now if
    /// it cannot).
    pub async fn bind_with(
        addr: SocketAddr,
        files: TlsFiles,
        limits: Limits,
    ) -> anyhow::Result<Self> {
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
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let tcp = TcpListener::bind(addr)
            .await
            .with_context(|| format!("listening on {addr}"))?;
        let inner = shardgate_http::Listener::new(tcp, limits, move |tcp| acceptor.accept(tcp))?;
        Ok(TlsListener { inner })
    }

    /// The address it listens on, with the actual port if bound to port 0.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// Serves `app` over the TLS connections, under the listener's
    /// [`Limits`], until `shutdown` resolves; then stops accepting, lets
    /// requests in flight finish, and returns once every connection has
    /// closed.
    pub async fn serve(
        self,
        app: Router,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        self.inner.serve(app, shutdown).await
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsConnection;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        axum::serve::Listener::accept(&mut self.inner).await
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}
