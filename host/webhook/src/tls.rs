//! TLS for the webhook: a listener that terminates TLS with rustls (ring),
//! a certificate resolver that picks up renewed files (as cert-manager
//! rotates them) without a restart, and the HTTP serving loop over it, with
//! limits that a slow or greedy client cannot get around (see [`Limits`]).

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch::{Receiver as Signal, channel as signal};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tracing::{debug, info, warn};

/// Default [`Limits::handshake_timeout`].
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Default [`Limits::header_read_timeout`]: the API server sends a request
/// head at once.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Default [`Limits::idle_timeout`]: longer than any admission call (the
/// API server gives a webhook at most 30 s).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Default [`Limits::max_connections`]: far above what the API servers
/// keep open to one webhook replica.
pub const MAX_CONNECTIONS: usize = 256;
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

/// What the webhook allows a client, so that slow clients (slow-loris) or
/// many connections cannot exhaust it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// How long a client may take to finish the TLS handshake.
    pub handshake_timeout: Duration,
    /// How long a client may take to send a whole request head, counted
    /// from when the server starts waiting for it: after the handshake, and
    /// again after each response on a kept-alive connection. A connection
    /// that sends nothing, trickles its headers, or sits idle between
    /// requests for longer is closed (hyper's `header_read_timeout`).
    pub header_read_timeout: Duration,
    /// A connection on which no byte moves either way for this long is
    /// closed, in the middle of a request too: a stalled body, or a client
    /// that stopped reading its response.
    pub idle_timeout: Duration,
    /// At most this many connections are open at once, handshaking ones
    /// included. Further ones are not accepted until one closes: they wait
    /// in the listen backlog (the timeouts above bound how long a slot stays
    /// taken).
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            handshake_timeout: HANDSHAKE_TIMEOUT,
            header_read_timeout: HEADER_READ_TIMEOUT,
            idle_timeout: IDLE_TIMEOUT,
            max_connections: MAX_CONNECTIONS,
        }
    }
}

/// A TCP listener that yields TLS connections, at most
/// [`Limits::max_connections`] at once. Handshakes run concurrently in their
/// own tasks, so a slow client never holds up the others. Serve it with
/// [`TlsListener::serve`] (or, without the HTTP limits, `axum::serve`).
pub struct TlsListener {
    local: SocketAddr,
    limits: Limits,
    ready: mpsc::Receiver<(TlsConnection, SocketAddr)>,
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
        let tcp = TcpListener::bind(addr)
            .await
            .with_context(|| format!("listening on {addr}"))?;
        let local = tcp.local_addr()?;
        let (tx, ready) = mpsc::channel(64);
        tokio::spawn(accept_loop(
            tcp,
            TlsAcceptor::from(Arc::new(config)),
            limits,
            tx,
        ));
        Ok(TlsListener {
            local,
            limits,
            ready,
        })
    }

    /// The address it listens on, with the actual port if bound to port 0.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }

    /// Serves `app` over the TLS connections, under the listener's
    /// [`Limits`], until `shutdown` resolves; then stops accepting, lets
    /// requests in flight finish, and returns once every connection has
    /// closed.
    pub async fn serve(
        mut self,
        app: Router,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let (stop, stopping) = signal(());
        let (open, mut all_closed) = mpsc::channel::<()>(1);
        let mut shutdown = pin!(shutdown);
        loop {
            let (tls, addr) = tokio::select! {
                () = &mut shutdown => break,
                accepted = self.ready.recv() => match accepted {
                    Some(accepted) => accepted,
                    None => break,
                },
            };
            let (app, stopping, open) = (app.clone(), stopping.clone(), open.clone());
            let limits = self.limits;
            tokio::spawn(async move {
                serve_connection(tls, addr, app, limits, stopping).await;
                drop(open);
            });
        }
        // Ends the accept loop, and with it the listening socket.
        drop((self.ready, open));
        let _ = stop.send(());
        // Every connection task holds a sender: `None` once the last has ended.
        let _ = all_closed.recv().await;
        Ok(())
    }
}

async fn accept_loop(
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    limits: Limits,
    ready: mpsc::Sender<(TlsConnection, SocketAddr)>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    loop {
        // A slot first, then the connection: over the cap, clients wait
        // unaccepted.
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => return,
            },
            () = ready.closed() => return,
        };
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
            match tokio::time::timeout(limits.handshake_timeout, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => {
                    let _ = ready.send((TlsConnection { tls, _slot: slot }, addr)).await;
                }
                Ok(Err(e)) => debug!(%addr, error = %e, "TLS handshake failed"),
                Err(_) => debug!(%addr, "TLS handshake timed out"),
            }
        });
    }
}

/// One accepted TLS connection; it holds one of the listener's
/// [`Limits::max_connections`] slots until dropped.
pub struct TlsConnection {
    tls: TlsStream<TcpStream>,
    _slot: OwnedSemaphorePermit,
}

impl AsyncRead for TlsConnection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tls).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConnection {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tls).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tls).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tls.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tls).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tls).poll_shutdown(cx)
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsConnection;
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

/// Serves one connection's requests under `limits` until it closes, is
/// timed out, or `stopping` changes (then it closes gracefully: idle at
/// once, else after the request in flight).
async fn serve_connection<I>(
    io: I,
    addr: SocketAddr,
    app: Router,
    limits: Limits,
    mut stopping: Signal<()>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let activity = Arc::new(Activity::new());
    let io = Watched {
        io,
        activity: activity.clone(),
    };
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let mut conn = pin!(http.serve_connection(TokioIo::new(io), TowerToHyperService::new(app)));
    let mut graceful = false;
    loop {
        tokio::select! {
            served = conn.as_mut() => {
                if let Err(e) = served {
                    debug!(%addr, error = %e, "connection closed");
                }
                return;
            }
            () = tokio::time::sleep_until(activity.last() + limits.idle_timeout) => {
                if activity.last() + limits.idle_timeout <= Instant::now() {
                    debug!(%addr, "connection idle; closing it");
                    return;
                }
            }
            _ = stopping.changed(), if !graceful => {
                graceful = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

/// When a byte last moved on a connection.
struct Activity {
    origin: Instant,
    /// Milliseconds from `origin`.
    last: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Activity {
            origin: Instant::now(),
            last: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let since = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(since, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.origin + Duration::from_millis(self.last.load(Ordering::Relaxed))
    }
}

/// A stream that records its [`Activity`], for the idle timeout.
struct Watched<I> {
    io: I,
    activity: Arc<Activity>,
}

impl<I: AsyncRead + Unpin> AsyncRead for Watched<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Watched<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
