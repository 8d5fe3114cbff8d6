//! `/metrics`, `/healthz` and `/readyz`, served with limits that a slow or
//! greedy client cannot get around (see [`Limits`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
pub use shardgate_http::{HEADER_READ_TIMEOUT, IDLE_TIMEOUT, Limits, MAX_CONNECTIONS};
use shardgate_http::{Listener, plain};

use super::metrics::Metrics;

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
    Listener::new(listener, limits, plain)?
        .serve(app, shutdown)
        .await
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
