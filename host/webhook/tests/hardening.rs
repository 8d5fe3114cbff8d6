//! The webhook's server under slow and greedy clients, over real TLS:
//! slow-loris connections (no handshake, silent or trickling after it, a
//! stalled body) are cut off by the handshake, header-read and idle
//! timeouts, and connections over the cap wait — while a normal client is
//! served. Timeouts are short here; every wait for an effect has a generous
//! deadline, and no test bounds how fast anything happens.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::{CertificateDer, ServerName};
use shardgate_wasm::{Engine, Limits as ModuleLimits, Reconciler};
use shardgate_webhook::{self as webhook, Limits, TlsFiles};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_rustls::client::TlsStream;

/// How long a test waits for what must happen.
const DEADLINE: Duration = Duration::from_secs(30);
/// The short timeout under test.
const SHORT: Duration = Duration::from_millis(200);
/// A timeout that never fires during a test.
const LONG: Duration = Duration::from_secs(600);

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
    tokio::time::timeout(DEADLINE, async {
        let mut tls = connect(server).await;
        tls.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut response = Vec::new();
        // A server may close without close_notify; what arrived counts.
        let _ = tls.read_to_end(&mut response).await;
        let response = String::from_utf8_lossy(&response).into_owned();
        response.lines().next().unwrap_or_default().to_string()
    })
    .await
    .unwrap_or_else(|_| panic!("GET /healthz not answered within {DEADLINE:?}"))
}

/// Sends a keep-alive `GET /healthz` on `tls` and reads its whole response.
async fn healthz_kept_alive(tls: &mut TlsStream<TcpStream>) {
    tls.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut response = Vec::new();
    let mut chunk = [0u8; 512];
    while !response.ends_with(b"\r\n\r\nok") {
        let n = tls.read(&mut chunk).await.unwrap();
        assert!(n > 0, "closed before the response ended");
        response.extend_from_slice(&chunk[..n]);
    }
    assert!(response.starts_with(b"HTTP/1.1 200"));
}

/// Waits (up to [`DEADLINE`]) for the server to close `io`; whatever it
/// sent before closing is ignored.
async fn closed_by_server(mut io: impl AsyncRead + Unpin, what: &'static str) {
    tokio::time::timeout(DEADLINE, async {
        let mut buf = [0u8; 512];
        loop {
            match io.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what}: still open after {DEADLINE:?}"));
}

/// Opens a TCP connection and never starts the handshake.
async fn no_handshake(server: &Server) -> JoinHandle<()> {
    let tcp = TcpStream::connect(server.addr).await.unwrap();
    tokio::spawn(closed_by_server(tcp, "a client that never shakes hands"))
}

/// Completes the handshake, then sends nothing.
async fn silent(server: &Server) -> JoinHandle<()> {
    let tls = connect(server).await;
    tokio::spawn(closed_by_server(tls, "a silent TLS client"))
}

/// Completes the handshake, then sends `head` and trickles `tail` forever
/// (a byte every 20 ms).
async fn trickling(server: &Server, head: &'static [u8], tail: u8) -> JoinHandle<()> {
    let tls = connect(server).await;
    let (read, mut write) = tokio::io::split(tls);
    tokio::spawn(async move {
        let trickle = tokio::spawn(async move {
            let mut sent = write.write_all(head).await;
            while sent.is_ok() {
                tokio::time::sleep(Duration::from_millis(20)).await;
                sent = write.write_all(&[tail]).await;
            }
        });
        closed_by_server(read, "a trickling TLS client").await;
        trickle.abort();
    })
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
    tokio::spawn(closed_by_server(tls, "a client that stalls its body"))
}

async fn finished(clients: Vec<JoinHandle<()>>) {
    for client in clients {
        client.await.unwrap();
    }
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
    // Two served connections, kept alive: every slot is taken.
    let mut first = connect(&server).await;
    healthz_kept_alive(&mut first).await;
    let mut second = connect(&server).await;
    healthz_kept_alive(&mut second).await;

    let server = Arc::new(server);
    let mut third = tokio::spawn({
        let server = server.clone();
        async move { healthz(&server).await }
    });
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
