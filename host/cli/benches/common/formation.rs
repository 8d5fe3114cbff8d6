//! The floors under the operator's lifecycle work, shared by the benches
//! that measure it: a sandbox whose operator applies every object but never
//! talks to Valkey, and a bench client that does to the nodes what the
//! operator's plan does, with the same commands (`shardgate_valkey`'s
//! client), back to back, each as soon as what it waits for holds (looked
//! at every [`FLOOR_POLL`]).

// Each bench that includes this module uses part of it.
#![allow(dead_code)]

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

use shardgate_contract::auth;
use shardgate_contract::model::SlotRange;
use shardgate_sandbox::stack::{Options, Sandbox};
use shardgate_valkey::client::{CLIENT_PORT, Dial, Facts, Login, NodeClient};

/// The benches' cluster name.
pub const NAME: &str = "bench";
/// How often a floor's client looks at the nodes while it waits.
pub const FLOOR_POLL: Duration = Duration::from_millis(10);
/// How long a stopped sandbox's processes may take to go.
const GONE: Duration = Duration::from_secs(5);

/// One node a floor's client reaches.
pub struct Reached {
    pub at: (u32, u32),
    pub ip: IpAddr,
    pub client: NodeClient,
    pub id: String,
}

/// The sandbox for `cluster` with an operator that never talks to Valkey.
pub async fn start_unmanaged(
    server: &Path,
    work: &Path,
    cluster: shardgate_k8s::crd::ValkeyCluster,
) -> anyhow::Result<Sandbox> {
    let options = Options {
        manage_valkey: false,
        ..Options::new(server.into(), work.into())
    };
    Sandbox::start(cluster, options).await
}

/// Shuts `sandbox` down and waits (a bounded while) for its processes.
pub async fn stop(sandbox: Sandbox) {
    let pids = sandbox.kubelet().pids();
    sandbox.shutdown().await;
    let deadline = Instant::now() + GONE;
    while pids
        .values()
        .any(|p| Path::new(&format!("/proc/{p}")).exists())
        && Instant::now() < deadline
    {
        tokio::time::sleep(FLOOR_POLL).await;
    }
}

/// How the operator logs in: its system user, once its Secret exists.
pub async fn operator_dial(sandbox: &Sandbox) -> Dial {
    let system = format!("shardgate-{NAME}-system");
    let password = loop {
        if let Some(p) = sandbox.secret_value(&system, auth::OPERATOR_KEY) {
            break p;
        }
        tokio::time::sleep(FLOOR_POLL).await;
    };
    Dial {
        login: Some(Login {
            username: auth::OPERATOR_USER.into(),
            password,
        }),
        tls: None,
        timeout: Duration::from_secs(2),
    }
}

/// The `default` user's login, once its Secret exists.
pub async fn default_login(sandbox: &Sandbox) -> Login {
    let users = format!("{NAME}-users");
    loop {
        if let Some(password) = sandbox.secret_value(&users, auth::DEFAULT_USER) {
            return Login {
                username: auth::DEFAULT_USER.into(),
                password,
            };
        }
        tokio::time::sleep(FLOOR_POLL).await;
    }
}

/// Each node at `places`, once it answers.
pub async fn reach(sandbox: &Sandbox, places: &[(u32, u32)], dial: &Dial) -> Vec<Reached> {
    let mut nodes = Vec::new();
    for &(s, n) in places {
        let reached = loop {
            if let Some(ip) = sandbox.pod_ip(s, n)
                && let Ok(mut client) =
                    NodeClient::dial(SocketAddr::new(ip, CLIENT_PORT), dial).await
                && let Ok(facts) = client.facts().await
            {
                break Reached {
                    at: (s, n),
                    ip,
                    client,
                    id: facts.view.id,
                };
            }
            tokio::time::sleep(FLOOR_POLL).await;
        };
        nodes.push(reached);
    }
    nodes
}

/// Every place of a `shards` x `replicas` cluster, shard by shard.
pub fn places(shards: std::ops::Range<u32>, replicas: u32) -> Vec<(u32, u32)> {
    shards
        .flat_map(|s| (0..=replicas).map(move |n| (s, n)))
        .collect()
}

/// The operator's meet phase for the nodes from index `new` on: each meets
/// the first node, and every two nodes that do not know each other meet.
pub async fn meet(nodes: &mut [Reached], new: usize) -> anyhow::Result<()> {
    let facts = facts(nodes).await?;
    let first = nodes[0].ip;
    for n in nodes.iter_mut().skip(new.max(1)) {
        n.client.meet(first).await?;
    }
    for i in 1..nodes.len() {
        for j in i + 1..nodes.len() {
            if !knows(&facts[i], &nodes[j].id) && !knows(&facts[j], &nodes[i].id) {
                let peer = nodes[j].ip;
                nodes[i].client.meet(peer).await?;
            }
        }
    }
    Ok(())
}

/// Forms the sandbox's new cluster as the operator's plan does: every node
/// meets the first node and each other; once every node knows the first,
/// each primary gets its slots and meets every node again (so each learns
/// them at once); each replica follows its primary once it knows it.
/// Returns once every node says `cluster_state:ok` and every replica's
/// initial sync is done.
pub async fn form(sandbox: &Sandbox, shards: u32, replicas: u32) -> anyhow::Result<Vec<Reached>> {
    let dial = operator_dial(sandbox).await;
    let mut nodes = reach(sandbox, &places(0..shards, replicas), &dial).await;
    meet(&mut nodes, 1).await?;
    let first = nodes[0].id.clone();
    wait_all(&mut nodes, |i, f| i == 0 || knows(f, &first)).await?;
    let ranges = shardgate_guest::topology::even_ranges(shards);
    for (s, slots) in (0..shards).zip(ranges) {
        let p = index(&nodes, (s, 0));
        nodes[p].client.add_slots(&[slots]).await?;
        for j in 0..nodes.len() {
            if j != p {
                let peer = nodes[j].ip;
                nodes[p].client.meet(peer).await?;
            }
        }
    }
    follow(&mut nodes, 0..shards, replicas).await?;
    wait_all(&mut nodes, |_, f| f.cluster_ok && f.synced).await?;
    Ok(nodes)
}

/// Each replica of `shards` follows its primary once it knows it.
pub async fn follow(
    nodes: &mut [Reached],
    shards: std::ops::Range<u32>,
    replicas: u32,
) -> anyhow::Result<()> {
    let mut pending: Vec<(usize, usize)> = shards
        .flat_map(|s| (1..=replicas).map(move |n| ((s, n), (s, 0))))
        .map(|(r, p)| (index(nodes, r), index(nodes, p)))
        .collect();
    while !pending.is_empty() {
        let mut left = Vec::new();
        for (r, p) in pending {
            let primary = nodes[p].id.clone();
            let facts = nodes[r].client.facts().await?;
            if knows(&facts, &primary) {
                nodes[r].client.replicate(&primary).await?;
            } else {
                left.push((r, p));
            }
        }
        pending = left;
        if !pending.is_empty() {
            tokio::time::sleep(FLOOR_POLL).await;
        }
    }
    Ok(())
}

/// The slot moves that take a cluster of `from` shards, each serving its
/// even share, to `to` shards' even shares: what the operator's balance
/// phase moves (each shard keeps the lowest slots of its share).
pub fn moves(from: u32, to: u32) -> Vec<(u32, u32, SlotRange)> {
    let quotas = shardgate_guest::topology::quotas(to);
    let mut surplus: Vec<(u32, u32)> = Vec::new();
    for (s, r) in (0..from).zip(shardgate_guest::topology::even_ranges(from)) {
        let keep = quotas.get(s as usize).copied().unwrap_or(0);
        surplus.extend((r.start + keep..=r.end).map(|slot| (s, slot)));
    }
    let mut count: Vec<u32> = (0..to)
        .map(|s| if s < from { quotas[s as usize] } else { 0 })
        .collect();
    let mut out: Vec<(u32, u32, SlotRange)> = Vec::new();
    let mut next = surplus.into_iter();
    for target in 0..to {
        while count[target as usize] < quotas[target as usize] {
            let Some((source, slot)) = next.next() else {
                return out;
            };
            match out.last_mut() {
                Some((s, t, r)) if *s == source && *t == target && r.end + 1 == slot => {
                    r.end = slot
                }
                _ => out.push((
                    source,
                    target,
                    SlotRange {
                        start: slot,
                        end: slot,
                    },
                )),
            }
            count[target as usize] += 1;
        }
    }
    out
}

/// The index of the node at `at` in `nodes`.
pub fn index(nodes: &[Reached], at: (u32, u32)) -> usize {
    nodes
        .iter()
        .position(|n| n.at == at)
        .expect("a node at every place")
}

/// Whether `facts` name `id` among their peers.
pub fn knows(facts: &Facts, id: &str) -> bool {
    facts.view.peers.iter().any(|p| p.id == id)
}

/// Every node's facts, in order.
pub async fn facts(nodes: &mut [Reached]) -> anyhow::Result<Vec<Facts>> {
    let mut out = Vec::new();
    for n in nodes.iter_mut() {
        out.push(n.client.facts().await?);
    }
    Ok(out)
}

/// Waits until `holds` for every node (by its index and facts).
pub async fn wait_all(
    nodes: &mut [Reached],
    holds: impl Fn(usize, &Facts) -> bool,
) -> anyhow::Result<()> {
    loop {
        let mut all = true;
        for (i, n) in nodes.iter_mut().enumerate() {
            if !holds(i, &n.client.facts().await?) {
                all = false;
                break;
            }
        }
        if all {
            return Ok(());
        }
        tokio::time::sleep(FLOOR_POLL).await;
    }
}

/// Where each node is reached from outside: `(host, port)` by place.
pub type Endpoints = std::collections::BTreeMap<(u32, u32), (String, u16)>;

/// The endpoints the cluster's status gives the nodes at `places`, once
/// each has a host and a port, for `generation` or later: the operator's
/// Services and their NodePorts, work the floor's operator does too.
pub async fn status_endpoints(
    sandbox: &Sandbox,
    generation: i64,
    places: &[(u32, u32)],
) -> Endpoints {
    let emu = sandbox.emulator();
    loop {
        if let Some(vc) = emu.get("valkeyclusters", sandbox.namespace(), NAME)
            && vc["status"]["observedGeneration"].as_i64() >= Some(generation)
        {
            let mut out = Endpoints::new();
            for shard in vc["status"]["externalEndpoints"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let s = shard["shardIndex"].as_u64().unwrap_or_default() as u32;
                for n in shard["nodes"].as_array().into_iter().flatten() {
                    let at = (s, n["nodeIndex"].as_u64().unwrap_or_default() as u32);
                    let host = n["host"].as_str().unwrap_or_default();
                    let port = n["port"].as_u64().and_then(|p| u16::try_from(p).ok());
                    if let Some(port) = port.filter(|p| *p > 0 && !host.is_empty()) {
                        out.insert(at, (host.to_string(), port));
                    }
                }
            }
            if places.iter().all(|at| out.contains_key(at)) {
                return out;
            }
        }
        tokio::time::sleep(FLOOR_POLL).await;
    }
}

/// Sets every node's client-only announce settings to its endpoint in
/// `to` (or resets them, to announce the pod's own address, where `to` has
/// none) as the operator does (`apply_announce`: one `CONFIG GET`, one
/// `CONFIG SET`), every node at once over its own connection, as the
/// operator's `Nodes::announce` does; with `spread`, a node whose settings
/// changed then meets every other node, so the handshake tells them at
/// once, as its `Nodes::spread_news` does (without, gossip alone carries
/// it). Then waits until every node sees every node announce what it was
/// set to (the operator's `announce_settled`).
pub async fn announce(nodes: &mut [Reached], to: &Endpoints, spread: bool) -> anyhow::Result<()> {
    let ips: Vec<IpAddr> = nodes.iter().map(|n| n.ip).collect();
    let ips = &ips;
    let set = futures::future::join_all(nodes.iter_mut().map(|n| async move {
        let (ip, port) = match to.get(&n.at) {
            Some((host, port)) => (host.clone(), *port),
            None => (String::new(), 0),
        };
        let changed = n
            .client
            .apply_announce(&[
                ("cluster-announce-client-ipv4".into(), ip.clone()),
                ("cluster-announce-client-port".into(), port.to_string()),
            ])
            .await?;
        if spread && !changed.is_empty() {
            for &peer in ips.iter().filter(|&&p| p != n.ip) {
                n.client.meet(peer).await?;
            }
        }
        let shown = if ip.is_empty() {
            format!("{}:{CLIENT_PORT}@", n.ip)
        } else {
            format!("{ip}:{port}@")
        };
        anyhow::Ok((n.id.clone(), shown))
    }))
    .await;
    let wanted = set
        .into_iter()
        .collect::<anyhow::Result<std::collections::BTreeMap<_, _>>>()?;
    loop {
        let mut all = true;
        for n in nodes.iter_mut() {
            let seen = n.client.cluster_nodes().await?.announced;
            if !wanted
                .iter()
                .all(|(id, w)| seen.get(id).is_some_and(|s| s.starts_with(w.as_str())))
            {
                all = false;
                break;
            }
        }
        if all {
            return Ok(());
        }
        tokio::time::sleep(FLOOR_POLL).await;
    }
}

/// The pod of the node at `at`.
pub fn pod_name((shard, node): (u32, u32)) -> String {
    format!(
        "{}-0",
        shardgate_contract::names::node_object(NAME, shard, node)
    )
}

/// Waits until every StatefulSet of the nodes at `places` has `image` in
/// its template: the operator's apply, which the floor's operator does
/// too, so that a pod deleted after it comes back with the new template.
pub async fn templates_have(sandbox: &Sandbox, places: &[(u32, u32)], image: &str) {
    let emu = sandbox.emulator();
    let has = |&(s, n): &(u32, u32)| {
        let name = shardgate_contract::names::node_object(NAME, s, n);
        emu.get("statefulsets", sandbox.namespace(), &name)
            .is_some_and(|sts| {
                sts["spec"]["template"]["spec"]["containers"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["image"] == image)
            })
    };
    while !places.iter().all(has) {
        tokio::time::sleep(FLOOR_POLL).await;
    }
}

/// What the operator's plan does to restart the replica at `at` (its pod
/// deleted, the StatefulSet making it again): once the new process
/// answers (a new address and, its data gone with the pod, a new ID), it
/// announces its endpoint in `external` if it has one, meets every other
/// node, and follows `primary` once it knows it; every other node forgets
/// its old ID. Returns once every node is ok and in sync, knows the new ID
/// and not the old one, and the pod is Ready.
pub async fn restart(
    sandbox: &Sandbox,
    nodes: &mut [Reached],
    at: (u32, u32),
    primary: (u32, u32),
    external: &Endpoints,
    dial: &Dial,
) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, DeleteParams};
    let i = index(nodes, at);
    let (old_id, old_ip) = (nodes[i].id.clone(), nodes[i].ip);
    let pods: Api<Pod> = Api::namespaced(sandbox.api().into_client(), sandbox.namespace());
    pods.delete(&pod_name(at), &DeleteParams::default()).await?;
    while sandbox.pod_ip(at.0, at.1).is_none_or(|ip| ip == old_ip) {
        tokio::time::sleep(FLOOR_POLL).await;
    }
    let mut new = reach(sandbox, &[at], dial).await.remove(0);
    anyhow::ensure!(new.id != old_id, "{at:?} came back with its old ID");
    if let Some((host, port)) = external.get(&at) {
        new.client
            .apply_announce(&[
                ("cluster-announce-client-ipv4".into(), host.clone()),
                ("cluster-announce-client-port".into(), port.to_string()),
            ])
            .await?;
    }
    nodes[i] = new;
    for j in (0..nodes.len()).filter(|&j| j != i) {
        let peer = nodes[j].ip;
        nodes[i].client.meet(peer).await?;
        if knows(&nodes[j].client.facts().await?, &old_id) {
            nodes[j].client.forget(&old_id).await?;
        }
    }
    let primary_id = nodes[index(nodes, primary)].id.clone();
    wait_all(&mut nodes[i..=i], |_, f| knows(f, &primary_id)).await?;
    nodes[i].client.replicate(&primary_id).await?;
    let new_id = nodes[i].id.clone();
    wait_all(nodes, |j, f| {
        f.cluster_ok && f.synced && !knows(f, &old_id) && (j == i || knows(f, &new_id))
    })
    .await?;
    // The plan restarts the next pod only once every pod is Ready.
    let emu = sandbox.emulator();
    while !emu
        .get("pods", sandbox.namespace(), &pod_name(at))
        .is_some_and(|pod| {
            shardgate_tests::harness::condition_true(&pod["status"]["conditions"], "Ready")
        })
    {
        tokio::time::sleep(FLOOR_POLL).await;
    }
    Ok(())
}

/// What the operator's plan does before restarting a primary: its replica
/// at `heir` takes over (`CLUSTER FAILOVER`). The primary drops the request
/// while it has not yet learned (by gossip) that the heir follows it, and
/// the heir gives up only after Valkey's manual-failover timeout, so the
/// request is sent again every [`FAILOVER_AGAIN`] until it is done, as the
/// operator's next look would. Returns once the heir serves the slots, the
/// primary at `from` follows it, and every node is ok.
pub async fn hand_over(
    nodes: &mut [Reached],
    from: (u32, u32),
    heir: (u32, u32),
) -> anyhow::Result<()> {
    let (p, h) = (index(nodes, from), index(nodes, heir));
    let heir_id = nodes[h].id.clone();
    let done = |j: usize, f: &Facts| {
        f.cluster_ok
            && (j != h || (f.view.primary.is_none() && !f.view.slots.is_empty()))
            && (j != p || f.view.primary.as_deref() == Some(heir_id.as_str()))
    };
    loop {
        nodes[h].client.failover().await?;
        let sent = Instant::now();
        while sent.elapsed() < FAILOVER_AGAIN {
            let facts = facts(nodes).await?;
            if facts.iter().enumerate().all(|(j, f)| done(j, f)) {
                return Ok(());
            }
            tokio::time::sleep(FLOOR_POLL).await;
        }
    }
}

/// How long [`hand_over`] waits before it sends `CLUSTER FAILOVER` again.
pub const FAILOVER_AGAIN: Duration = Duration::from_millis(100);
