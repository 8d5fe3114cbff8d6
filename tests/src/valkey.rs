//! What the data-path tests do with a real Valkey cluster: write and read
//! back a known key set through a cluster client, and read `CLUSTER SLOTS`.

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt, stream};
use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use redis::{AsyncCommands, Value};

/// How many keys each data-path check writes and reads back.
pub const KEYS: usize = 10_000;

/// Writes `key-0..KEYS` with values `<tag>-<i>`, 64 in flight.
pub async fn write_keys(conn: &ClusterConnection, tag: &str) {
    stream::iter(0..KEYS)
        .map(|i| {
            let mut c = conn.clone();
            let tag = tag.to_string();
            async move {
                let started = Instant::now();
                c.set::<_, _, ()>(format!("key-{i}"), format!("{tag}-{i}"))
                    .await
                    .map_err(|e| format!("SET key-{i} after {:?}: {e}", started.elapsed()))
            }
        })
        .buffer_unordered(64)
        .try_collect::<Vec<()>>()
        .await
        .unwrap();
}

/// Reads every key back and checks its value; returns how many were
/// verified.
pub async fn read_keys(conn: &ClusterConnection, tag: &str) -> usize {
    let got: Vec<(usize, Option<String>)> = stream::iter(0..KEYS)
        .map(|i| {
            let mut c = conn.clone();
            async move { c.get(format!("key-{i}")).await.map(|v| (i, v)) }
        })
        .buffer_unordered(64)
        .try_collect()
        .await
        .unwrap();
    assert_eq!(got.len(), KEYS);
    for (i, v) in &got {
        assert_eq!(v, &Some(format!("{tag}-{i}")), "key-{i}");
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

/// How long every test connection may take to connect.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long every test connection waits for a reply.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
