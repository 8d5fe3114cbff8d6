//! The server name (SNI) a TLS client asks for, read from its ClientHello
//! without consuming it: the bytes are only peeked at, so the connection
//! can then be relayed untouched (TLS passthrough). rustls' [`Acceptor`]
//! parses the ClientHello.

use std::time::{Duration, Instant};

use rustls::server::Acceptor;
use tokio::net::TcpStream;

/// The most of a ClientHello the gateway looks at.
pub const MAX_HELLO: usize = 16 * 1024;
/// How long a client may take to send its ClientHello.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// How soon the stream is peeked at again while a ClientHello is
/// incomplete (a peek returns at once while any unread byte is there).
const PEEK_AGAIN: Duration = Duration::from_millis(5);

/// The server name in the ClientHello at the start of `stream`, which is
/// left unread. An error says why there is none: the client closed or
/// was too slow, sent something that is not a TLS ClientHello, or named
/// no server.
pub async fn peek_server_name(stream: &TcpStream) -> Result<String, String> {
    let deadline = Instant::now() + HELLO_TIMEOUT;
    let mut buf = vec![0u8; MAX_HELLO];
    let mut acceptor = Acceptor::default();
    let mut fed = 0;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let n = match tokio::time::timeout(left, stream.peek(&mut buf)).await {
            Err(_) => return Err(format!("no ClientHello within {HELLO_TIMEOUT:?}")),
            Ok(Err(e)) => return Err(format!("reading the ClientHello: {e}")),
            Ok(Ok(0)) => return Err("the client closed before its ClientHello".into()),
            Ok(Ok(n)) => n,
        };
        if n > fed {
            let mut fresh = &buf[fed..n];
            while !fresh.is_empty() {
                acceptor
                    .read_tls(&mut fresh)
                    .map_err(|e| format!("not a TLS ClientHello: {e}"))?;
            }
            fed = n;
            match acceptor.accept() {
                Ok(Some(accepted)) => {
                    return accepted
                        .client_hello()
                        .server_name()
                        .map(str::to_string)
                        .ok_or_else(|| "the ClientHello names no server (no SNI)".into());
                }
                Ok(None) => {}
                Err((e, _alert)) => return Err(format!("not a TLS ClientHello: {e}")),
            }
        }
        if fed == buf.len() {
            return Err(format!("no complete ClientHello in {MAX_HELLO} bytes"));
        }
        if Instant::now() >= deadline {
            return Err(format!("no complete ClientHello within {HELLO_TIMEOUT:?}"));
        }
        tokio::time::sleep(PEEK_AGAIN).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// The bytes a rustls client sends first when it dials `name`.
    fn client_hello(name: &str) -> Vec<u8> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        let server = rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
        let mut conn = rustls::ClientConnection::new(Arc::new(config), server).unwrap();
        let mut out = Vec::new();
        while conn.wants_write() {
            conn.write_tls(&mut out).unwrap();
        }
        out
    }

    /// A connected pair: what the client writes, and the server's side.
    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (client, server)
    }

    #[tokio::test]
    async fn the_server_name_is_read_and_the_bytes_stay() {
        let hello = client_hello("vc-0-1.valkey.test");
        let (mut client, mut server) = pair().await;
        // In two pieces, the second written once the peek may have begun.
        let (first, second) = hello.split_at(hello.len() / 2);
        client.write_all(first).await.unwrap();
        let peek = tokio::spawn(async move {
            let name = peek_server_name(&server).await;
            (name, server)
        });
        tokio::task::yield_now().await;
        client.write_all(second).await.unwrap();
        let (name, returned) = peek.await.unwrap();
        server = returned;
        assert_eq!(name, Ok("vc-0-1.valkey.test".to_string()));
        // Nothing was consumed: the whole ClientHello is still to be read.
        let mut got = vec![0u8; hello.len()];
        server.read_exact(&mut got).await.unwrap();
        assert_eq!(got, hello);
    }

    #[tokio::test]
    async fn no_server_name_or_no_tls_is_an_error() {
        // An IP address: clients send no SNI for one.
        let (mut client, server) = pair().await;
        client.write_all(&client_hello("127.0.0.1")).await.unwrap();
        let err = peek_server_name(&server).await.unwrap_err();
        assert!(err.contains("no SNI"), "{err}");

        let (mut client, server) = pair().await;
        client.write_all(b"*1\r\n$4\r\nPING\r\n").await.unwrap();
        let err = peek_server_name(&server).await.unwrap_err();
        assert!(err.contains("not a TLS ClientHello"), "{err}");

        let (client, server) = pair().await;
        drop(client);
        let err = peek_server_name(&server).await.unwrap_err();
        assert!(err.contains("closed"), "{err}");
    }
}
