//! `/metrics` and the probes under slow and greedy clients: slow-loris
//! connections (silent, or trickling their headers) are cut off by the
//! header-read timeout, a connection on which nothing moves by the idle
//! timeout, and connections over the cap wait — while a normal client is
//! served. Timeouts are short here; every wait for an effect has a generous
//! deadline, and no test bounds how fast anything happens.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use shardgate_operator::Metrics;
use shardgate_operator::http::{self, Health, Limits};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// How long a test waits for what must happen.
const DEADLINE: Duration = Duration::from_secs(30);
/// The short timeout under test.
const SHORT: Duration = Duration::from_millis(200);
/// A timeout that never fires during a test.
const LONG: Duration = Duration::from_secs(600);

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

/// One request on a new connection; returns the response's status line.
async fn get(addr: SocketAddr, path: &str) -> String {
    tokio::time::timeout(DEADLINE, async {
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
        tcp.write_all(request.as_bytes()).await.unwrap();
        let mut response = Vec::new();
        tcp.read_to_end(&mut response).await.unwrap();
        let response = String::from_utf8_lossy(&response).into_owned();
        response.lines().next().unwrap_or_default().to_string()
    })
    .await
    .unwrap_or_else(|_| panic!("GET {path} not answered within {DEADLINE:?}"))
}

/// Sends a keep-alive `GET /healthz` on `tcp` and reads its whole response.
async fn healthz_kept_alive(tcp: &mut TcpStream) {
    tcp.write_all(b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n")
        .await
        .unwrap();
    let mut response = Vec::new();
    let mut chunk = [0u8; 512];
    while !response.ends_with(b"\r\n\r\nok") {
        let n = tcp.read(&mut chunk).await.unwrap();
        assert!(n > 0, "closed before the response ended");
        response.extend_from_slice(&chunk[..n]);
    }
    assert!(response.starts_with(b"HTTP/1.1 200"));
}

/// Waits (up to [`DEADLINE`]) for the server to close `tcp`; whatever it
/// sent before closing is ignored.
async fn closed_by_server(mut tcp: impl AsyncReadExt + Unpin, what: &'static str) {
    tokio::time::timeout(DEADLINE, async {
        let mut buf = [0u8; 512];
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what}: still open after {DEADLINE:?}"));
}

/// A client that opens a connection (connected when this returns) and
/// sends nothing; its task ends once the server closes the connection.
async fn silent(addr: SocketAddr) -> JoinHandle<()> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    tokio::spawn(closed_by_server(tcp, "a silent client"))
}

/// A client that opens a connection (connected when this returns) and
/// trickles a request head that never ends, a byte every 20 ms; its task
/// ends once the server closes the connection.
async fn trickling(addr: SocketAddr) -> JoinHandle<()> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (read, mut write) = tcp.into_split();
    tokio::spawn(async move {
        let trickle = tokio::spawn(async move {
            let mut sent = write.write_all(b"GET /metrics HTTP/1.1\r\nX-Slow: ").await;
            while sent.is_ok() {
                tokio::time::sleep(Duration::from_millis(20)).await;
                sent = write.write_all(b"a").await;
            }
        });
        closed_by_server(read, "a trickling client").await;
        trickle.abort();
    })
}

async fn finished(clients: Vec<JoinHandle<()>>) {
    for client in clients {
        client.await.unwrap();
    }
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
    let mut tcp = TcpStream::connect(server.addr).await.unwrap();
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
    })
    .await;
    // Two served connections, kept alive: every slot is taken.
    let mut first = TcpStream::connect(server.addr).await.unwrap();
    healthz_kept_alive(&mut first).await;
    let mut second = TcpStream::connect(server.addr).await.unwrap();
    healthz_kept_alive(&mut second).await;

    let mut third = tokio::spawn(get(server.addr, "/healthz"));
    // Not served while the cap is reached (however long we look).
    assert!(
        tokio::time::timeout(Duration::from_millis(500), &mut third)
            .await
            .is_err(),
        "a connection over the cap was served"
    );
    // A slot frees: the waiting client is served.
    drop(first);
    assert_eq!(third.await.unwrap(), "HTTP/1.1 200 OK");
    healthz_kept_alive(&mut second).await;
}

#[tokio::test]
async fn slow_clients_holding_every_slot_are_cut_and_a_waiting_client_is_served() {
    let server = start(Limits {
        header_read_timeout: SHORT,
        idle_timeout: LONG,
        max_connections: 2,
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
    let mut tcp = TcpStream::connect(server.addr).await.unwrap();
    healthz_kept_alive(&mut tcp).await;
    server.stop.take().unwrap().send(()).unwrap();
    closed_by_server(tcp, "an idle connection at shutdown").await;
    tokio::time::timeout(DEADLINE, server.task)
        .await
        .expect("serve returns after shutdown")
        .unwrap()
        .unwrap();
}
