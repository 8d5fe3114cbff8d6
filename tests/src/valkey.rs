//! What the data-path tests do with a real Valkey cluster: connect to one
//! node or to the cluster (with the test timeouts), wait for a node to
//! answer, write and read back a known key set through a cluster client,
//! and read `INFO` and `CLUSTER SLOTS`.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt, stream};
use redis::aio::MultiplexedConnection;
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::io::AsyncDNSResolver;
use redis::{AsyncCommands, IntoConnectionInfo, RedisResult, Value};

use crate::wait;

pub use shardgate_valkey::Login;

/// How many keys each data-path check writes and reads back.
pub const KEYS: usize = 10_000;

/// Writes `key-0..KEYS` with values `<tag>-<i>`, 64 in flight.
pub async fn write_keys(conn: &ClusterConnection, tag: &str) {
    write_keys_named(conn, "key", tag).await
}

/// Writes `<prefix>-0..KEYS` with values `<tag>-<i>`, 64 in flight.
pub async fn write_keys_named(conn: &ClusterConnection, prefix: &str, tag: &str) {
    write_n_keys(conn, prefix, tag, KEYS).await
}

/// Writes `<prefix>-0..n` with values `<tag>-<i>`, 64 in flight.
pub async fn write_n_keys(conn: &ClusterConnection, prefix: &str, tag: &str, n: usize) {
    stream::iter(0..n)
        .map(|i| {
            let mut c = conn.clone();
            let (key, value) = (format!("{prefix}-{i}"), format!("{tag}-{i}"));
            async move {
                let started = Instant::now();
                c.set::<_, _, ()>(&key, value)
                    .await
                    .map_err(|e| format!("SET {key} after {:?}: {e}", started.elapsed()))
            }
        })
        .buffer_unordered(64)
        .try_collect::<Vec<()>>()
        .await
        .unwrap();
}

/// How many keys the cluster holds: `DBSIZE` on every primary, summed (by
/// the cluster client's routing), with the client's current slot map.
pub async fn key_count(conn: &ClusterConnection) -> RedisResult<usize> {
    redis::cmd("DBSIZE").query_async(&mut conn.clone()).await
}

/// Reads every key back and checks its value; returns how many were
/// verified.
pub async fn read_keys(conn: &ClusterConnection, tag: &str) -> usize {
    read_keys_named(conn, "key", tag).await
}

/// [`read_keys`] of `<prefix>-0..KEYS`.
pub async fn read_keys_named(conn: &ClusterConnection, prefix: &str, tag: &str) -> usize {
    let got: Vec<(usize, Option<String>)> = stream::iter(0..KEYS)
        .map(|i| {
            let mut c = conn.clone();
            let key = format!("{prefix}-{i}");
            async move { c.get(key).await.map(|v| (i, v)) }
        })
        .buffer_unordered(64)
        .try_collect()
        .await
        .unwrap();
    assert_eq!(got.len(), KEYS);
    for (i, v) in &got {
        assert_eq!(v, &Some(format!("{tag}-{i}")), "{prefix}-{i}");
    }
    got.len()
}

/// A reply element as text.
pub fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        other => panic!("expected a string, got {other:?}"),
    }
}

/// `(first slot, last slot, host, port)` of every node, primaries and
/// replicas alike, in `CLUSTER SLOTS`.
pub async fn cluster_slots(c: &mut MultiplexedConnection) -> Vec<(u32, u32, String, u16)> {
    let v: Value = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(c)
        .await
        .unwrap();
    let Value::Array(ranges) = v else {
        panic!("CLUSTER SLOTS: not an array: {v:?}")
    };
    let mut out = Vec::new();
    for range in ranges {
        let Value::Array(items) = range else {
            panic!("CLUSTER SLOTS: bad range {range:?}")
        };
        let lo = text(&items[0]).parse().unwrap();
        let hi = text(&items[1]).parse().unwrap();
        for node in &items[2..] {
            let Value::Array(f) = node else {
                panic!("CLUSTER SLOTS: bad node {node:?}")
            };
            out.push((lo, hi, text(&f[0]), text(&f[1]).parse().unwrap()));
        }
    }
    out
}

/// Every node `CLUSTER SHARDS` names, as the `(endpoint, port)` a client
/// would dial: its preferred `endpoint` and its client `port` (or
/// `tls-port`).
pub async fn cluster_shards(c: &mut MultiplexedConnection) -> Vec<(String, u16)> {
    let v: Value = redis::cmd("CLUSTER")
        .arg("SHARDS")
        .query_async(c)
        .await
        .unwrap();
    // Maps come as flat key/value arrays under RESP2, as maps under RESP3.
    fn fields(v: &Value) -> Vec<(String, &Value)> {
        match v {
            Value::Array(kv) => kv.chunks(2).map(|p| (text(&p[0]), &p[1])).collect(),
            Value::Map(kv) => kv.iter().map(|(k, v)| (text(k), v)).collect(),
            other => panic!("CLUSTER SHARDS: not a map: {other:?}"),
        }
    }
    let Value::Array(shards) = &v else {
        panic!("CLUSTER SHARDS: not an array: {v:?}")
    };
    let mut out = Vec::new();
    for shard in shards {
        let nodes = fields(shard)
            .into_iter()
            .find(|(k, _)| k == "nodes")
            .map(|(_, v)| v)
            .expect("a shard has nodes");
        let Value::Array(nodes) = nodes else {
            panic!("CLUSTER SHARDS: bad nodes {nodes:?}")
        };
        for node in nodes {
            let f = fields(node);
            let get = |key: &str| f.iter().find(|(k, _)| k == key).map(|(_, v)| text(v));
            let port = get("port").or_else(|| get("tls-port")).expect("a port");
            out.push((get("endpoint").expect("an endpoint"), port.parse().unwrap()));
        }
    }
    out
}

/// How long every test connection may take to connect.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long every test connection waits for a reply.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection to the one node at `addr` (it follows no redirect), with
/// [`CONNECT_TIMEOUT`] and [`RESPONSE_TIMEOUT`], logged in as `login` when
/// there is one.
pub async fn connect(
    addr: SocketAddr,
    login: Option<&Login>,
) -> RedisResult<MultiplexedConnection> {
    let mut info = (addr.ip().to_string(), addr.port()).into_connection_info()?;
    if let Some(l) = login {
        let settings = info
            .redis_settings()
            .clone()
            .set_username(&l.username)
            .set_password(&l.password);
        info = info.set_redis_settings(settings);
    }
    let client = redis::Client::open(info)?;
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(RESPONSE_TIMEOUT));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

/// Waits (up to `deadline`) until the node at `addr` answers `PING` with
/// `PONG`, and returns the connection that got it.
pub async fn wait_for_pong(
    addr: SocketAddr,
    login: Option<&Login>,
    deadline: Duration,
) -> MultiplexedConnection {
    wait::until_async(&format!("{addr} to answer PING"), deadline, || async move {
        let mut c = connect(addr, login).await.ok()?;
        let pong = redis::cmd("PING").query_async::<String>(&mut c).await;
        pong.is_ok_and(|p| p == "PONG").then_some(c)
    })
    .await
}

/// A cluster client given only `seed` (`host:port`): it learns every other
/// node from the cluster. With [`CONNECT_TIMEOUT`] and [`RESPONSE_TIMEOUT`],
/// logged in as `login` on every node when there is one.
pub async fn cluster_client(seed: &str, login: Option<&Login>) -> ClusterConnection {
    open_cluster(seed, cluster_builder(seed, login)).await
}

/// A cluster client seeded with every address in `seeds`, as an
/// application that knows the whole topology reconnects: any one reachable
/// seed is enough. An error, not a panic, when none answers.
pub async fn try_cluster_client_seeds(
    seeds: &[String],
    login: Option<&Login>,
) -> RedisResult<ClusterConnection> {
    let mut builder = ClusterClientBuilder::new(
        seeds
            .iter()
            .map(|s| format!("redis://{s}/"))
            .collect::<Vec<_>>(),
    )
    .connection_timeout(CONNECT_TIMEOUT)
    .response_timeout(RESPONSE_TIMEOUT);
    if let Some(l) = login {
        builder = builder
            .username(l.username.clone())
            .password(l.password.clone());
    }
    builder.build()?.get_async_connection().await
}

/// [`cluster_client`], resolving the hostnames nodes announce with
/// `resolver`.
pub async fn cluster_client_resolving(
    seed: &str,
    login: Option<&Login>,
    resolver: impl AsyncDNSResolver,
) -> ClusterConnection {
    open_cluster(
        seed,
        cluster_builder(seed, login).async_dns_resolver(resolver),
    )
    .await
}

/// A TLS connection to the one node at `seed` (`host:port`), trusting the
/// CA `ca` (PEM) and verifying the certificate names `host`, which
/// `resolver` turns into an address; with the test timeouts.
pub async fn connect_tls(
    seed: &str,
    ca: &str,
    login: Option<&Login>,
    resolver: impl AsyncDNSResolver,
) -> RedisResult<MultiplexedConnection> {
    let mut info = format!("rediss://{seed}/").into_connection_info()?;
    if let Some(l) = login {
        let settings = info
            .redis_settings()
            .clone()
            .set_username(&l.username)
            .set_password(&l.password);
        info = info.set_redis_settings(settings);
    }
    let client = redis::Client::build_with_tls(info, trusting(ca))?;
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(RESPONSE_TIMEOUT))
        .set_dns_resolver(resolver);
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

/// [`cluster_client_resolving`] over TLS: every node's certificate must
/// chain to `ca` (PEM) and name the host the client dials.
pub async fn cluster_client_tls(
    seed: &str,
    ca: &str,
    login: Option<&Login>,
    resolver: impl AsyncDNSResolver,
) -> RedisResult<ClusterConnection> {
    let builder = ClusterClientBuilder::new(vec![format!("rediss://{seed}/")])
        .certs(trusting(ca))
        .connection_timeout(CONNECT_TIMEOUT)
        .response_timeout(RESPONSE_TIMEOUT)
        .async_dns_resolver(resolver);
    let builder = match login {
        Some(l) => builder
            .username(l.username.clone())
            .password(l.password.clone()),
        None => builder,
    };
    builder.build()?.get_async_connection().await
}

fn trusting(ca: &str) -> redis::TlsCertificates {
    redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(ca.as_bytes().to_vec()),
    }
}

fn cluster_builder(seed: &str, login: Option<&Login>) -> ClusterClientBuilder {
    let builder = ClusterClientBuilder::new(vec![format!("redis://{seed}/")])
        .connection_timeout(CONNECT_TIMEOUT)
        .response_timeout(RESPONSE_TIMEOUT);
    match login {
        Some(l) => builder
            .username(l.username.clone())
            .password(l.password.clone()),
        None => builder,
    }
}

async fn open_cluster(seed: &str, builder: ClusterClientBuilder) -> ClusterConnection {
    builder
        .build()
        .unwrap()
        .get_async_connection()
        .await
        .unwrap_or_else(|e| panic!("cluster client seeded with {seed}: {e}"))
}

/// The value of the `name:value` line in an `INFO`-style reply (`INFO`,
/// `CLUSTER INFO`), trimmed.
pub fn reply_field<'a>(reply: &'a str, name: &str) -> Option<&'a str> {
    reply
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

/// Field `name` of `INFO section` at `c`; panics when the reply has none.
pub async fn info_field(c: &mut MultiplexedConnection, section: &str, name: &str) -> String {
    let info: String = redis::cmd("INFO")
        .arg(section)
        .query_async(c)
        .await
        .unwrap();
    reply_field(&info, name)
        .unwrap_or_else(|| panic!("INFO {section} has no {name}"))
        .to_string()
}
