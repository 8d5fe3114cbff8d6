//! `/metrics` and the probes under slow and greedy clients: slow-loris
//! connections (silent, or trickling their headers) are cut off by the
//! header-read timeout, a connection on which nothing moves by the idle
//! timeout, and connections over the cap wait — while a normal client is
//! served. Timeouts are short here; every wait for an effect has a generous
//! deadline, and no test bounds how fast anything happens.

use std::net::SocketAddr;
use std::sync::Arc;

use shardgate_http::testing::{
    DEADLINE, LONG, SHORT, closed_by_server, finished, healthz_kept_alive,
};
use shardgate_operator::Metrics;
use shardgate_operator::http::{self, Health, Limits};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

struct Server {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<anyhow::Result<()>>,
}

async fn start(limits: Limits) -> Server {
    let listener = http::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(http::serve_with(
        listener,
        Arc::new(Metrics::default()),
        Arc::new(Health::default()),
        limits,
        async move {
            let _ = stopped.await;
        },
    ));
    Server {
        addr,
        stop: Some(stop),
        task,
    }
}

async fn connect(addr: SocketAddr) -> TcpStream {
    TcpStream::connect(addr).await.unwrap()
}

/// One request on a new connection; returns the response's status line.
async fn get(addr: SocketAddr, path: &str) -> String {
    shardgate_http::testing::get(connect(addr), path).await
}

/// A client that opens a connection (connected when this returns) and
/// sends nothing; its task ends once the server closes the connection.
async fn silent(addr: SocketAddr) -> JoinHandle<()> {
    shardgate_http::testing::silent(connect(addr).await, "a silent client")
}

/// A client that opens a connection (connected when this returns) and
/// trickles a request head that never ends; its task ends once the server
/// closes the connection.
async fn trickling(addr: SocketAddr) -> JoinHandle<()> {
    let tcp = connect(addr).await;
    shardgate_http::testing::trickling(tcp, b"GET /metrics HTTP/1.1\r\nX-Slow: ", b'a')
}

#[tokio::test]
async fn slow_loris_clients_are_cut_off_while_a_normal_client_is_served() {
    // Only the header-read timeout is short: a trickling client keeps its
    // connection active, and the idle timeout never fires here.
    let server = start(Limits {
        header_read_timeout: SHORT,
        idle_timeout: LONG,
        ..Limits::default()
    })
    .await;
    let mut slow = Vec::new();
    for _ in 0..8 {
        slow.push(silent(server.addr).await);
        slow.push(trickling(server.addr).await);
    }
    assert_eq!(get(server.addr, "/healthz").await, "HTTP/1.1 200 OK");
    assert_eq!(get(server.addr, "/metrics").await, "HTTP/1.1 200 OK");
    finished(slow).await;
    assert_eq!(
        get(server.addr, "/readyz").await,
        "HTTP/1.1 503 Service Unavailable"
    );
}

#[tokio::test]
async fn an_idle_kept_alive_connection_is_closed() {
    let server = start(Limits {
        header_read_timeout: SHORT,
        idle_timeout: LONG,
        ..Limits::default()
    })
    .await;
    let mut tcp = connect(server.addr).await;
    healthz_kept_alive(&mut tcp).await;
    closed_by_server(tcp, "a kept-alive connection after its response").await;
}

#[tokio::test]
async fn a_connection_on_which_nothing_moves_is_closed_by_the_idle_timeout() {
    // The header-read timeout never fires here: the idle timeout does.
    let server = start(Limits {
        header_read_timeout: LONG,
        idle_timeout: SHORT,
        ..Limits::default()
    })
    .await;
    finished(vec![silent(server.addr).await]).await;
    assert_eq!(get(server.addr, "/healthz").await, "HTTP/1.1 200 OK");
}

#[tokio::test]
async fn a_connection_over_the_cap_waits_for_a_free_slot() {
    let server = start(Limits {
        header_read_timeout: LONG,
        idle_timeout: LONG,
        max_connections: 2,
        ..Limits::default()
    })
    .await;
    let addr = server.addr;
    shardgate_http::testing::a_third_connection_waits_for_a_free_slot(|| connect(addr)).await;
}

#[tokio::test]
async fn slow_clients_holding_every_slot_are_cut_and_a_waiting_client_is_served() {
    let server = start(Limits {
        header_read_timeout: SHORT,
        idle_timeout: LONG,
        max_connections: 2,
        ..Limits::default()
    })
    .await;
    // Connected first, so accepted first: they take both slots.
    let slow = vec![silent(server.addr).await, trickling(server.addr).await];
    assert_eq!(get(server.addr, "/healthz").await, "HTTP/1.1 200 OK");
    finished(slow).await;
}

#[tokio::test]
async fn shutdown_closes_idle_connections_and_returns() {
    let mut server = start(Limits::default()).await;
    let mut tcp = connect(server.addr).await;
    healthz_kept_alive(&mut tcp).await;
    server.stop.take().unwrap().send(()).unwrap();
    closed_by_server(tcp, "an idle connection at shutdown").await;
    tokio::time::timeout(DEADLINE, server.task)
        .await
        .expect("serve returns after shutdown")
        .unwrap()
        .unwrap();
}
