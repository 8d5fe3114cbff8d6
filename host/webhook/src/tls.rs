//! TLS for the webhook: a listener that terminates TLS with rustls (ring),
//! a certificate resolver that picks up renewed files (as cert-manager
//! rotates them) without a restart, and the HTTP serving over it
//! (`shardgate-http`'s), with limits that a slow or greedy client cannot get
//! around (see [`Limits`]).

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
pub use shardgate_http::Limits;
use shardgate_http::tls::ReloadingCert;
pub use shardgate_http::tls::TlsFiles;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// How often the certificate files are checked for renewal.
const RELOAD_EVERY: Duration = Duration::from_secs(30);

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
        let resolver = ReloadingCert::watch(files, RELOAD_EVERY)?;
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
