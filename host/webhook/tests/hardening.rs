//! The webhook's server under slow and greedy clients, over real TLS:
//! slow-loris connections (no handshake, silent or trickling after it, a
//! stalled body) are cut off by the handshake, header-read and idle
//! timeouts, and connections over the cap wait — while a normal client is
//! served. Timeouts are short here; every wait for an effect has a generous
//! deadline, and no test bounds how fast anything happens.

use std::net::SocketAddr;
use std::sync::Arc;

use rustls_pki_types::{CertificateDer, ServerName};
use shardgate_http::testing::{LONG, SHORT, closed_by_server, finished, healthz_kept_alive};
use shardgate_wasm::{Engine, Limits as ModuleLimits, Reconciler};
use shardgate_webhook::{self as webhook, Limits, TlsFiles};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_rustls::client::TlsStream;

struct Server {
    addr: SocketAddr,
    cert: CertificateDer<'static>,
    _stop: oneshot::Sender<()>,
    _engine: Engine,
}

async fn start(name: &str, limits: Limits) -> Server {
    let key =
        rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let dir = std::env::temp_dir().join(format!(
        "shardgate-webhook-hardening-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let files = TlsFiles {
        cert: dir.join(format!("{name}.crt")),
        key: dir.join(format!("{name}.key")),
    };
    std::fs::write(&files.cert, key.cert.pem()).unwrap();
    std::fs::write(&files.key, key.signing_key.serialize_pem()).unwrap();
    let engine = Engine::new(ModuleLimits::default()).unwrap();
    let module: Arc<dyn Reconciler> = Arc::new(engine.load_embedded().unwrap());
    let listener = webhook::TlsListener::bind_with("127.0.0.1:0".parse().unwrap(), files, limits)
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let app = webhook::router(module, Arc::new(webhook::NoClusters));
    tokio::spawn(listener.serve(app, async move {
        let _ = stopped.await;
    }));
    Server {
        addr,
        cert: key.cert.der().clone(),
        _stop: stop,
        _engine: engine,
    }
}

/// A TLS connection to `server`, trusting only its certificate.
async fn connect(server: &Server) -> TlsStream<TcpStream> {
    let tcp = TcpStream::connect(server.addr).await.unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(server.cert.clone()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap()
}

/// `GET /healthz` on a new connection: the response's status line.
async fn healthz(server: &Server) -> String {
    shardgate_http::testing::get(connect(server), "/healthz").await
}

/// Opens a TCP connection and never starts the handshake.
async fn no_handshake(server: &Server) -> JoinHandle<()> {
    let tcp = TcpStream::connect(server.addr).await.unwrap();
    shardgate_http::testing::silent(tcp, "a client that never shakes hands")
}

/// Completes the handshake, then sends nothing.
async fn silent(server: &Server) -> JoinHandle<()> {
    shardgate_http::testing::silent(connect(server).await, "a silent TLS client")
}

/// Completes the handshake, then sends `head` and trickles `tail` forever.
async fn trickling(server: &Server, head: &'static [u8], tail: u8) -> JoinHandle<()> {
    shardgate_http::testing::trickling(connect(server).await, head, tail)
}

/// Completes the handshake, sends a request head and part of its body,
/// then stalls.
async fn stalled_body(server: &Server) -> JoinHandle<()> {
    let mut tls = connect(server).await;
    tls.write_all(
        b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
          Content-Length: 1000\r\n\r\n{\"apiVersion\": ",
    )
    .await
    .unwrap();
    shardgate_http::testing::silent(tls, "a client that stalls its body")
}

#[tokio::test]
async fn slow_loris_clients_are_cut_off_while_a_normal_client_is_served() {
    // The idle timeout never fires here: the handshake and header-read
    // timeouts do.
    let server = start(
        "loris",
        Limits {
            handshake_timeout: SHORT,
            header_read_timeout: SHORT,
            idle_timeout: LONG,
            ..Limits::default()
        },
    )
    .await;
    let mut slow = Vec::new();
    for _ in 0..4 {
        slow.push(no_handshake(&server).await);
        slow.push(silent(&server).await);
        slow.push(trickling(&server, b"GET /healthz HTTP/1.1\r\nX-Slow: ", b'a').await);
    }
    assert_eq!(healthz(&server).await, "HTTP/1.1 200 OK");
    finished(slow).await;
    assert_eq!(healthz(&server).await, "HTTP/1.1 200 OK");
}

#[tokio::test]
async fn a_stalled_body_is_cut_off_by_the_idle_timeout() {
    let server = start(
        "stalled",
        Limits {
            handshake_timeout: LONG,
            header_read_timeout: LONG,
            idle_timeout: SHORT,
            ..Limits::default()
        },
    )
    .await;
    let slow = vec![stalled_body(&server).await];
    assert_eq!(healthz(&server).await, "HTTP/1.1 200 OK");
    finished(slow).await;
}

#[tokio::test]
async fn an_idle_kept_alive_connection_is_closed() {
    let server = start(
        "kept-alive",
        Limits {
            header_read_timeout: SHORT,
            idle_timeout: LONG,
            ..Limits::default()
        },
    )
    .await;
    let mut tls = connect(&server).await;
    healthz_kept_alive(&mut tls).await;
    closed_by_server(tls, "a kept-alive connection after its response").await;
}

#[tokio::test]
async fn a_connection_over_the_cap_waits_for_a_free_slot() {
    let server = start(
        "cap",
        Limits {
            handshake_timeout: LONG,
            header_read_timeout: LONG,
            idle_timeout: LONG,
            max_connections: 2,
        },
    )
    .await;
    let server = Arc::new(server);
    shardgate_http::testing::a_third_connection_waits_for_a_free_slot(|| {
        let server = server.clone();
        async move { connect(&server).await }
    })
    .await;
}
