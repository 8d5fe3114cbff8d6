//! Slow and greedy clients, and what to expect of a server built on this
//! crate, for its hardening tests (the `test-util` feature). They work on
//! any connection, plain TCP or TLS. Every wait for an effect has a
//! generous deadline ([`DEADLINE`]); nothing bounds how fast anything
//! happens.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::task::JoinHandle;

/// How long a test waits for what must happen.
pub const DEADLINE: Duration = Duration::from_secs(30);
/// A short timeout under test.
pub const SHORT: Duration = Duration::from_millis(200);
/// A timeout that never fires during a test.
pub const LONG: Duration = Duration::from_secs(600);

/// `GET path` (with `Connection: close`) on the connection `connect`
/// opens: the response's status line. Panics if not answered within
/// [`DEADLINE`].
pub async fn get<S>(connect: impl Future<Output = S>, path: &str) -> String
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    tokio::time::timeout(DEADLINE, async {
        let mut io = connect.await;
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        io.write_all(request.as_bytes()).await.unwrap();
        let mut response = Vec::new();
        // A TLS server may close without close_notify; what arrived counts.
        let _ = io.read_to_end(&mut response).await;
        let response = String::from_utf8_lossy(&response).into_owned();
        response.lines().next().unwrap_or_default().to_string()
    })
    .await
    .unwrap_or_else(|_| panic!("GET {path} not answered within {DEADLINE:?}"))
}

/// Sends a keep-alive `GET /healthz` on `io` and reads its whole response,
/// which must be a `200` with the body `ok`.
pub async fn healthz_kept_alive<S>(io: &mut S)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    io.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut response = Vec::new();
    let mut chunk = [0u8; 512];
    while !response.ends_with(b"\r\n\r\nok") {
        let n = io.read(&mut chunk).await.unwrap();
        assert!(n > 0, "closed before the response ended");
        response.extend_from_slice(&chunk[..n]);
    }
    assert!(response.starts_with(b"HTTP/1.1 200"));
}

/// Waits (up to [`DEADLINE`]) for the server to close `io`; whatever it
/// sent before closing is ignored. Panics, naming `what`, if it stays open.
pub async fn closed_by_server(mut io: impl AsyncRead + Unpin, what: &'static str) {
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

/// A client that sends nothing more on `io`: a task that ends once the
/// server closes it (see [`closed_by_server`]).
pub fn silent<S>(io: S, what: &'static str) -> JoinHandle<()>
where
    S: AsyncRead + Unpin + Send + 'static,
{
    tokio::spawn(closed_by_server(io, what))
}

/// A client that sends `head` on `io` and then trickles `tail` forever, a
/// byte every 20 ms: a task that ends once the server closes `io`.
pub fn trickling<S>(io: S, head: &'static [u8], tail: u8) -> JoinHandle<()>
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (read, mut write) = tokio::io::split(io);
    tokio::spawn(async move {
        let trickle = tokio::spawn(async move {
            let mut sent = write.write_all(head).await;
            while sent.is_ok() {
                tokio::time::sleep(Duration::from_millis(20)).await;
                sent = write.write_all(&[tail]).await;
            }
        });
        closed_by_server(read, "a trickling client").await;
        trickle.abort();
    })
}

/// Checks a server capped at two connections: with two kept-alive ones
/// served, a third (each opened by `connect`) is not served until one of
/// the two closes, and is served then.
pub async fn a_third_connection_waits_for_a_free_slot<S, F>(connect: impl Fn() -> F)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    F: Future<Output = S> + Send + 'static,
{
    // Two served connections, kept alive: every slot is taken.
    let mut first = connect().await;
    healthz_kept_alive(&mut first).await;
    let mut second = connect().await;
    healthz_kept_alive(&mut second).await;

    let mut third = tokio::spawn(get(connect(), "/healthz"));
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

/// Waits for every client task to end (each panics if not closed in time).
pub async fn finished(clients: Vec<JoinHandle<()>>) {
    for client in clients {
        client.await.unwrap();
    }
}
