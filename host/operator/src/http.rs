//! `/metrics`, `/healthz` and `/readyz`, served with limits that a slow or
//! greedy client cannot get around (see [`Limits`]).

use std::net::SocketAddr;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::time::Instant;
use tracing::{debug, warn};

use super::metrics::Metrics;

/// Default [`Limits::header_read_timeout`]: a request head is a few hundred
/// bytes, which any real client (Prometheus, the kubelet) sends at once.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Default [`Limits::idle_timeout`].
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Default [`Limits::max_connections`]: far above a few scrapers and the
/// kubelet's probes.
pub const MAX_CONNECTIONS: usize = 256;

/// What the server allows a client, so that slow clients (slow-loris) or
/// many connections cannot exhaust it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// How long a client may take to send a whole request head, counted
    /// from when the server starts waiting for it: on a new connection, and
    /// again after each response on a kept-alive one. A connection that
    /// sends nothing, trickles its headers, or sits idle between requests
    /// for longer is closed (hyper's `header_read_timeout`).
    pub header_read_timeout: Duration,
    /// A connection on which no byte moves either way for this long is
    /// closed, in the middle of a request too: a stalled body, or a client
    /// that stopped reading its response.
    pub idle_timeout: Duration,
    /// At most this many connections are open at once. Further ones are not
    /// accepted until one closes: they wait in the listen backlog (the two
    /// timeouts above bound how long a slot stays taken).
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_read_timeout: HEADER_READ_TIMEOUT,
            idle_timeout: IDLE_TIMEOUT,
            max_connections: MAX_CONNECTIONS,
        }
    }
}

/// What the probes report.
#[derive(Default)]
pub struct Health {
    /// The caches have synced (or this replica is a standby, waiting for the
    /// lease, which is a healthy state too).
    pub ready: AtomicBool,
}

#[derive(Clone)]
struct AppState {
    metrics: Arc<Metrics>,
    health: Arc<Health>,
}

/// Serves with the default [`Limits`] until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    serve_with(listener, metrics, health, Limits::default(), shutdown).await
}

/// Serves with `limits` until `shutdown` resolves; then stops accepting,
/// lets requests in flight finish, and returns once every connection has
/// closed.
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(AppState { metrics, health });
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let (stop, stopping) = watch::channel(());
    let (open, mut all_closed) = mpsc::channel::<()>(1);
    let mut shutdown = pin!(shutdown);
    loop {
        // A slot first, then the connection: over the cap, clients wait
        // unaccepted.
        let slot = tokio::select! {
            () = &mut shutdown => break,
            slot = slots.clone().acquire_owned() => slot?,
        };
        let (tcp, addr) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    warn!(error = %e, "accept");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let (app, stopping, open) = (app.clone(), stopping.clone(), open.clone());
        tokio::spawn(async move {
            serve_connection(tcp, addr, app, limits, stopping).await;
            drop((slot, open));
        });
    }
    drop((listener, open));
    let _ = stop.send(());
    // Every connection task holds a sender: `None` once the last has ended.
    let _ = all_closed.recv().await;
    Ok(())
}

/// Serves one connection's requests under `limits` until it closes, is
/// timed out, or `stopping` changes (then it closes gracefully: idle at
/// once, else after the request in flight).
async fn serve_connection<I>(
    io: I,
    addr: SocketAddr,
    app: Router,
    limits: Limits,
    mut stopping: watch::Receiver<()>,
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
    ) -> Poll<std::io::Result<()>> {
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
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Listens on `addr`, for [`serve`].
pub async fn bind(addr: SocketAddr) -> anyhow::Result<tokio::net::TcpListener> {
    Ok(tokio::net::TcpListener::bind(addr).await?)
}

async fn metrics_handler(State(s): State<AppState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.encode(),
    )
}

async fn readyz(State(s): State<AppState>) -> impl IntoResponse {
    if s.health.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced")
    }
}
