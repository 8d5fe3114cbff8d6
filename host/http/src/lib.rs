//! Serving an axum [`Router`] over HTTP/1 with limits that a slow or greedy
//! client cannot get around (see [`Limits`]): one implementation for the
//! operator's `/metrics` and probes (plain TCP) and for the webhook (TLS).
//!
//! A [`Listener`] accepts TCP connections under a cap and turns each into
//! the stream to serve with a "wrap" step ([`plain`] for plain HTTP, the
//! TLS handshake for the webhook) under a timeout, concurrently, so that a
//! slow client never holds up the others. [`Listener::serve`] serves the
//! router on them until shutdown.

use std::io;
use std::net::SocketAddr;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio::time::Instant;
use tracing::{debug, warn};

#[cfg(any(test, feature = "test-util"))]
pub mod testing;
pub mod tls;

/// Default [`Limits::handshake_timeout`].
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Default [`Limits::header_read_timeout`]: a request head is a few hundred
/// bytes, which any real client (Prometheus, the kubelet, the API server)
/// sends at once.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Default [`Limits::idle_timeout`]: longer than any admission call (the
/// API server gives a webhook at most 30 s).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Default [`Limits::max_connections`]: far above a few scrapers, the
/// kubelet's probes, or what the API servers keep open to one webhook
/// replica.
pub const MAX_CONNECTIONS: usize = 256;

/// What the server allows a client, so that slow clients (slow-loris) or
/// many connections cannot exhaust it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// How long a client may take over the wrap step that turns its TCP
    /// connection into the stream to serve: the TLS handshake (plain HTTP
    /// has none).
    pub handshake_timeout: Duration,
    /// How long a client may take to send a whole request head, counted
    /// from when the server starts waiting for it: on a new connection
    /// (after the handshake), and again after each response on a kept-alive
    /// one. A connection that sends nothing, trickles its headers, or sits
    /// idle between requests for longer is closed (hyper's
    /// `header_read_timeout`).
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

/// The wrap step of plain HTTP: serves the TCP connection as it is.
pub async fn plain(tcp: TcpStream) -> io::Result<TcpStream> {
    Ok(tcp)
}

/// A TCP listener that yields wrapped connections (`I`), at most
/// [`Limits::max_connections`] at once. Serve it with [`Listener::serve`]
/// (or, without the HTTP limits, `axum::serve`).
pub struct Listener<I> {
    local: SocketAddr,
    limits: Limits,
    ready: mpsc::Receiver<(Connection<I>, SocketAddr)>,
}

impl<I> Listener<I>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    /// Starts accepting on `tcp` under `limits` (in a task of the current
    /// Tokio runtime): each connection goes through `wrap`, in its own task
    /// and under [`Limits::handshake_timeout`]; one that fails or times out
    /// is closed.
    pub fn new<W, F>(tcp: TcpListener, limits: Limits, wrap: W) -> io::Result<Self>
    where
        W: FnMut(TcpStream) -> F + Send + 'static,
        F: Future<Output = io::Result<I>> + Send + 'static,
    {
        let local = tcp.local_addr()?;
        let (tx, ready) = mpsc::channel(64);
        tokio::spawn(accept_loop(tcp, limits, wrap, tx));
        Ok(Listener {
            local,
            limits,
            ready,
        })
    }

    /// The address it listens on, with the actual port if bound to port 0.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }

    /// Serves `app` over the connections, under the listener's [`Limits`],
    /// until `shutdown` resolves; then stops accepting, lets requests in
    /// flight finish, and returns once every connection has closed.
    pub async fn serve(
        mut self,
        app: Router,
        shutdown: impl Future<Output = ()>,
    ) -> anyhow::Result<()> {
        let (stop, stopping) = watch::channel(());
        let (open, mut all_closed) = mpsc::channel::<()>(1);
        let mut shutdown = pin!(shutdown);
        loop {
            let (conn, addr) = tokio::select! {
                () = &mut shutdown => break,
                accepted = self.ready.recv() => match accepted {
                    Some(accepted) => accepted,
                    None => break,
                },
            };
            let (app, stopping, open) = (app.clone(), stopping.clone(), open.clone());
            let limits = self.limits;
            tokio::spawn(async move {
                serve_connection(conn, addr, app, limits, stopping).await;
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

impl<I> axum::serve::Listener for Listener<I>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Io = Connection<I>;
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

/// Accepts under the cap and hands each wrapped connection to `ready`,
/// until `ready`'s receiver is gone.
async fn accept_loop<I, W, F>(
    tcp: TcpListener,
    limits: Limits,
    mut wrap: W,
    ready: mpsc::Sender<(Connection<I>, SocketAddr)>,
) where
    I: Send + 'static,
    W: FnMut(TcpStream) -> F,
    F: Future<Output = io::Result<I>> + Send + 'static,
{
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
        let (handshake, ready) = (wrap(stream), ready.clone());
        tokio::spawn(async move {
            match tokio::time::timeout(limits.handshake_timeout, handshake).await {
                Ok(Ok(io)) => {
                    let _ = ready.send((Connection::new(io, slot), addr)).await;
                }
                Ok(Err(e)) => debug!(%addr, error = %e, "handshake failed"),
                Err(_) => debug!(%addr, "handshake timed out"),
            }
        });
    }
}

/// Serves one connection's requests under `limits` until it closes, is
/// timed out, or `stopping` changes (then it closes gracefully: idle at
/// once, else after the request in flight).
async fn serve_connection<I>(
    conn: Connection<I>,
    addr: SocketAddr,
    app: Router,
    limits: Limits,
    mut stopping: watch::Receiver<()>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let activity = conn.activity.clone();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let mut conn = pin!(http.serve_connection(TokioIo::new(conn), TowerToHyperService::new(app)));
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

/// One accepted, wrapped connection: it holds one of the listener's
/// [`Limits::max_connections`] slots until dropped, and records when a byte
/// last moved on it, for the idle timeout.
pub struct Connection<I> {
    io: I,
    activity: Arc<Activity>,
    _slot: OwnedSemaphorePermit,
}

impl<I> Connection<I> {
    fn new(io: I, slot: OwnedSemaphorePermit) -> Self {
        Connection {
            io,
            activity: Arc::new(Activity::new()),
            _slot: slot,
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Connection<I> {
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

impl<I: AsyncWrite + Unpin> AsyncWrite for Connection<I> {
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

#[cfg(test)]
mod tests {
    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::testing::{self, SHORT};

    /// A wrap step that never finishes is cut off by the handshake timeout,
    /// and frees its slot: with room for one connection, a client that
    /// completes the wrap step (sends `!`) is served after one that does not.
    #[tokio::test]
    async fn a_stalled_wrap_step_is_cut_off_and_frees_its_slot() {
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let limits = Limits {
            handshake_timeout: SHORT,
            max_connections: 1,
            ..Limits::default()
        };
        let listener = Listener::new(tcp, limits, |mut tcp: TcpStream| async move {
            let mut bang = [0u8; 1];
            tcp.read_exact(&mut bang).await?;
            Ok(tcp)
        })
        .unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().route("/healthz", get(|| async { "ok" }));
        tokio::spawn(listener.serve(app, std::future::pending()));

        let stalled = TcpStream::connect(addr).await.unwrap();
        let stalled = testing::silent(stalled, "a client that stalls the wrap step");
        let status = testing::get(
            async {
                let mut tcp = TcpStream::connect(addr).await.unwrap();
                tcp.write_all(b"!").await.unwrap();
                tcp
            },
            "/healthz",
        )
        .await;
        assert_eq!(status, "HTTP/1.1 200 OK");
        testing::finished(vec![stalled]).await;
    }
}
