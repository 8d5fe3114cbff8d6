//! Whole guest inputs for the fuzz test (`tests/tests/fuzz.rs`), topology
//! facts included, and the cluster builders the size bench shares.
//!
//! A case is a spec (mostly valid), the observed Services and Gateway from
//! [`crate::strategies`], and a Valkey cluster built in one of four stages
//! ([`Stage`]: fresh, met, slots assigned, formed) at a shape near the
//! spec's (so scale-out and scale-in show up), then broken or moved on by a
//! list of [`Mutation`]s: migrations under way, failed-over shards, ghosts,
//! nodes that came back with a new ID, duplicate IDs, slots claimed twice,
//! out-of-range slots and indices, silent nodes, stray pods. The pods are
//! derived from the same nodes, so most cases are coherent enough for the
//! planner to get past its first checks.

use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use shardgate_contract::model::*;

use crate::strategies;

/// Hash slots in a Valkey cluster.
pub const SLOTS: u32 = 16384;

/// A node ID as Valkey makes them: 40 hex digits, here derived from the
/// node's place and a generation (a pod that comes back without its
/// `nodes.conf` gets a new one).
pub fn node_id(shard: u32, node: u32, generation: u32) -> String {
    let mut x = (u64::from(shard) << 40) ^ (u64::from(node) << 20) ^ u64::from(generation);
    let mut out = String::with_capacity(40);
    for _ in 0..3 {
        // splitmix64: IDs that look random and never collide for distinct
        // inputs (the mix is a bijection).
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        out.push_str(&format!("{:016x}", z ^ (z >> 31)));
    }
    out.truncate(40);
    out
}

/// How far a cluster has come.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Every node started; none knows another.
    Fresh,
    /// Every node knows every other; no slots.
    Met,
    /// Node 0 of each shard serves its even share; nothing replicates.
    Assigned,
    /// Every replica follows its shard's node 0, in sync; every node sees
    /// every slot served.
    Formed,
}

/// The even share of `shards` shards: the first `16384 % shards` take one
/// more slot.
pub fn even_ranges(shards: u32) -> Vec<SlotRange> {
    let mut start = 0;
    (0..shards)
        .map(|s| {
            let q = SLOTS / shards + u32::from(s < SLOTS % shards);
            let r = SlotRange {
                start,
                end: start + q - 1,
            };
            start += q;
            r
        })
        .collect()
}

/// A fresh node: no peers, no slots, a primary of itself, Valkey 9.0.
pub fn fresh_node(shard: u32, node: u32) -> ValkeyNode {
    ValkeyNode {
        shard,
        node,
        id: node_id(shard, node, 0),
        primary: None,
        slots: Vec::new(),
        peers: Vec::new(),
        migrating: false,
        synced: true,
        cluster_ok: false,
        version: "9.0.1".into(),
    }
}

/// Every node knows every other, linked and healthy.
pub fn mesh(facts: &mut [ValkeyNode]) {
    let ids: Vec<String> = facts.iter().map(|f| f.id.clone()).collect();
    for f in facts.iter_mut() {
        f.peers = ids
            .iter()
            .filter(|i| **i != f.id)
            .map(|i| Peer {
                id: i.clone(),
                failed: false,
                linked: true,
            })
            .collect();
    }
}

/// `shards` x `nodes` Valkey nodes at `stage`, in index order.
pub fn cluster_at(shards: u32, nodes: u32, stage: Stage) -> Vec<ValkeyNode> {
    let mut facts: Vec<ValkeyNode> = (0..shards)
        .flat_map(|s| (0..nodes).map(move |n| fresh_node(s, n)))
        .collect();
    if stage == Stage::Fresh {
        return facts;
    }
    mesh(&mut facts);
    if stage == Stage::Met {
        return facts;
    }
    let shares = even_ranges(shards);
    for f in facts.iter_mut().filter(|f| f.node == 0) {
        f.slots = vec![shares[f.shard as usize]];
    }
    if stage == Stage::Assigned {
        return facts;
    }
    for f in facts.iter_mut() {
        if f.node != 0 {
            f.primary = Some(node_id(f.shard, 0, 0));
        }
        f.cluster_ok = true;
    }
    facts
}

/// A formed `shards` x `nodes` cluster, every node observed with every
/// peer: the steady state the size bench measures.
pub fn formed(shards: u32, nodes: u32) -> Vec<ValkeyNode> {
    cluster_at(shards, nodes, Stage::Formed)
}

/// A pod per node, scheduled and ready, running the current template.
pub fn pods_of(facts: &[ValkeyNode]) -> Vec<ObservedPod> {
    facts
        .iter()
        .map(|f| ObservedPod {
            shard: f.shard,
            node: f.node,
            host_ip: Some(IpAddress::V4(0x0a00_0000 + f.shard * 64 + f.node + 1)),
            node_external_ip: None,
            ready: true,
            outdated: false,
        })
        .collect()
}

/// A server version a node may report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Version {
    Current,
    /// 8.1: announces client IPs but no client ports; no atomic migration.
    Old,
    Newer,
    /// Unparseable or empty.
    Garbage(String),
}

impl Version {
    fn text(&self) -> String {
        match self {
            Version::Current => "9.0.1".into(),
            Version::Old => "8.1.8".into(),
            Version::Newer => "10.2.0".into(),
            Version::Garbage(s) => s.clone(),
        }
    }
}

/// One change to an observed cluster. Node and peer numbers are taken
/// modulo the count at the time, so every mutation applies to any cluster
/// (a mutation of an empty one does nothing).
#[derive(Clone, Debug)]
pub enum Mutation {
    /// Node `node`'s link to its `peer`th peer is down.
    Unlink {
        node: u16,
        peer: u16,
    },
    /// Node `node` flags its `peer`th peer as failed.
    FailPeer {
        node: u16,
        peer: u16,
    },
    /// Node `node` does not know its `peer`th peer (gossip not there yet).
    DropPeer {
        node: u16,
        peer: u16,
    },
    /// Node `node` knows an ID no node has.
    Ghost {
        node: u16,
        ghost: u8,
        failed: bool,
    },
    /// Node `node` did not answer (its pod stays).
    Silence {
        node: u16,
    },
    /// Node `to` reports node `from`'s ID as its own.
    ShareId {
        from: u16,
        to: u16,
    },
    /// A second answer for node `node`'s place, with its own ID or not.
    Duplicate {
        node: u16,
        own_id: bool,
    },
    /// `len` slots from `start` move from node `from` to node `to`; with
    /// `migrating`, both say a migration is under way.
    Move {
        from: u16,
        to: u16,
        start: u16,
        len: u16,
        migrating: bool,
    },
    /// Node `node` also claims slots another node serves.
    ClaimTwice {
        node: u16,
        start: u16,
        len: u16,
    },
    /// Node `node` lost its slots (no owner now).
    DropSlots {
        node: u16,
    },
    /// Node `node` reports a range as is: inverted, past 16383, huge.
    RawRange {
        node: u16,
        start: u32,
        end: u32,
    },
    /// Node `node` is at a place no spec makes (or another shard's).
    Relocate {
        node: u16,
        shard: u32,
        index: u32,
    },
    /// Replica `node` took over its primary's slots; the rest of the
    /// shard follows it, the old primary included.
    Failover {
        node: u16,
    },
    /// Node `node` replicates node `target` (another shard's, itself).
    Follow {
        node: u16,
        target: u16,
    },
    /// Node `node` replicates an ID nobody has.
    Orphan {
        node: u16,
    },
    /// Node `node`'s flags.
    Flags {
        node: u16,
        migrating: bool,
        synced: bool,
        cluster_ok: bool,
    },
    Version {
        node: u16,
        version: Version,
    },
    /// Node `node` reports an empty ID.
    EmptyId {
        node: u16,
    },
    /// Node `node`'s pod came back without its `nodes.conf`: a fresh node
    /// with a new ID, which the others still know by the old one (failed,
    /// unlinked).
    Recreated {
        node: u16,
    },
    /// Node `node`'s pod is gone (its answer stays, as between two reads).
    NoPod {
        node: u16,
    },
    /// A pod of the cluster at (shard, node) with no answer.
    StrayPod {
        shard: u32,
        node: u32,
    },
    /// Node `node`'s pod is not ready / runs an old template.
    Pod {
        node: u16,
        ready: bool,
        outdated: bool,
    },
}

/// Indices: mostly near a small cluster, sometimes far past any spec.
fn far_index() -> impl Strategy<Value = u32> {
    prop_oneof![
        8 => 0u32..10,
        1 => 990u32..1010,
        1 => prop_oneof![Just(u32::MAX), Just(u32::MAX - 1), any::<u32>()],
    ]
}

fn slot_value() -> impl Strategy<Value = u32> {
    prop_oneof![
        6 => 0u32..SLOTS,
        2 => SLOTS - 2..SLOTS + 2,
        1 => Just(u32::MAX),
        1 => any::<u32>(),
    ]
}

fn version() -> impl Strategy<Value = Version> {
    prop_oneof![
        4 => Just(Version::Current),
        2 => Just(Version::Old),
        1 => Just(Version::Newer),
        1 => prop_oneof![Just(String::new()), "[0-9a-z.]{0,6}"].prop_map(Version::Garbage),
    ]
}

pub fn mutation() -> impl Strategy<Value = Mutation> {
    let n = || any::<u16>();
    prop_oneof![
        3 => (n(), n()).prop_map(|(node, peer)| Mutation::Unlink { node, peer }),
        2 => (n(), n()).prop_map(|(node, peer)| Mutation::FailPeer { node, peer }),
        2 => (n(), n()).prop_map(|(node, peer)| Mutation::DropPeer { node, peer }),
        2 => (n(), any::<u8>(), any::<bool>())
            .prop_map(|(node, ghost, failed)| Mutation::Ghost { node, ghost, failed }),
        2 => n().prop_map(|node| Mutation::Silence { node }),
        1 => (n(), n()).prop_map(|(from, to)| Mutation::ShareId { from, to }),
        1 => (n(), any::<bool>()).prop_map(|(node, own_id)| Mutation::Duplicate { node, own_id }),
        3 => (n(), n(), 0u16..16384, 0u16..3000, any::<bool>()).prop_map(
            |(from, to, start, len, migrating)| Mutation::Move { from, to, start, len, migrating }
        ),
        1 => (n(), 0u16..16384, 0u16..2000)
            .prop_map(|(node, start, len)| Mutation::ClaimTwice { node, start, len }),
        1 => n().prop_map(|node| Mutation::DropSlots { node }),
        1 => (n(), slot_value(), slot_value())
            .prop_map(|(node, start, end)| Mutation::RawRange { node, start, end }),
        1 => (n(), far_index(), far_index())
            .prop_map(|(node, shard, index)| Mutation::Relocate { node, shard, index }),
        3 => n().prop_map(|node| Mutation::Failover { node }),
        1 => (n(), n()).prop_map(|(node, target)| Mutation::Follow { node, target }),
        1 => n().prop_map(|node| Mutation::Orphan { node }),
        2 => (n(), prop::bool::weighted(0.3), prop::bool::weighted(0.7), prop::bool::weighted(0.7))
            .prop_map(|(node, migrating, synced, cluster_ok)| Mutation::Flags {
                node, migrating, synced, cluster_ok
            }),
        1 => (n(), version()).prop_map(|(node, version)| Mutation::Version { node, version }),
        1 => n().prop_map(|node| Mutation::EmptyId { node }),
        2 => n().prop_map(|node| Mutation::Recreated { node }),
        1 => n().prop_map(|node| Mutation::NoPod { node }),
        1 => (far_index(), far_index()).prop_map(|(shard, node)| Mutation::StrayPod { shard, node }),
        2 => (n(), prop::bool::weighted(0.7), prop::bool::weighted(0.3))
            .prop_map(|(node, ready, outdated)| Mutation::Pod { node, ready, outdated }),
    ]
}

fn pick(i: u16, len: usize) -> Option<usize> {
    (len > 0).then(|| usize::from(i) % len)
}

fn slots_of(f: &ValkeyNode) -> Vec<u32> {
    let mut v: Vec<u32> = f
        .slots
        .iter()
        .flat_map(|r| r.start..=r.end.min(SLOTS - 1))
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Contiguous ranges of sorted slots.
pub fn ranges(slots: &[u32]) -> Vec<SlotRange> {
    let mut out: Vec<SlotRange> = Vec::new();
    for &s in slots {
        match out.last_mut() {
            Some(r) if r.end + 1 == s => r.end = s,
            _ => out.push(SlotRange { start: s, end: s }),
        }
    }
    out
}

/// Applies `m` to the observed nodes and pods.
pub fn apply(m: &Mutation, facts: &mut Vec<ValkeyNode>, pods: &mut Vec<ObservedPod>) {
    let len = facts.len();
    match m {
        Mutation::Unlink { node, peer }
        | Mutation::FailPeer { node, peer }
        | Mutation::DropPeer { node, peer } => {
            let Some(i) = pick(*node, len) else { return };
            let Some(j) = pick(*peer, facts[i].peers.len()) else {
                return;
            };
            match m {
                Mutation::Unlink { .. } => facts[i].peers[j].linked = false,
                Mutation::FailPeer { .. } => {
                    facts[i].peers[j].failed = true;
                    facts[i].peers[j].linked = false;
                }
                _ => {
                    facts[i].peers.remove(j);
                }
            }
        }
        Mutation::Ghost {
            node,
            ghost,
            failed,
        } => {
            let Some(i) = pick(*node, len) else { return };
            facts[i].peers.push(Peer {
                id: node_id(7777, u32::from(*ghost), 99),
                failed: *failed,
                linked: false,
            });
        }
        Mutation::Silence { node } => {
            if let Some(i) = pick(*node, len) {
                facts.remove(i);
            }
        }
        Mutation::ShareId { from, to } => {
            if let (Some(a), Some(b)) = (pick(*from, len), pick(*to, len)) {
                facts[b].id = facts[a].id.clone();
            }
        }
        Mutation::Duplicate { node, own_id } => {
            let Some(i) = pick(*node, len) else { return };
            let mut copy = facts[i].clone();
            if *own_id {
                copy.id = node_id(copy.shard, copy.node, 5000 + len as u32);
                copy.slots.clear();
            }
            facts.push(copy);
        }
        Mutation::Move {
            from,
            to,
            start,
            len: count,
            migrating,
        } => {
            let (Some(a), Some(b)) = (pick(*from, len), pick(*to, len)) else {
                return;
            };
            let owned = slots_of(&facts[a]);
            let Some(first) = owned.iter().position(|&s| s >= u32::from(*start)) else {
                return;
            };
            let last = (first + usize::from(*count).max(1)).min(owned.len());
            let moving = &owned[first..last];
            let keep = [&owned[..first], &owned[last..]].concat();
            facts[a].slots = ranges(&keep);
            let mut got = slots_of(&facts[b]);
            got.extend(moving);
            got.sort_unstable();
            got.dedup();
            facts[b].slots = ranges(&got);
            if *migrating {
                facts[a].migrating = true;
                facts[b].migrating = true;
            }
        }
        Mutation::ClaimTwice {
            node,
            start,
            len: count,
        } => {
            let Some(i) = pick(*node, len) else { return };
            let start = u32::from(*start);
            let end = (start + u32::from(*count)).min(SLOTS - 1);
            facts[i].slots.push(SlotRange { start, end });
        }
        Mutation::DropSlots { node } => {
            if let Some(i) = pick(*node, len) {
                facts[i].slots.clear();
            }
        }
        Mutation::RawRange { node, start, end } => {
            if let Some(i) = pick(*node, len) {
                facts[i].slots.push(SlotRange {
                    start: *start,
                    end: *end,
                });
            }
        }
        Mutation::Relocate { node, shard, index } => {
            if let Some(i) = pick(*node, len) {
                facts[i].shard = *shard;
                facts[i].node = *index;
            }
        }
        Mutation::Failover { node } => {
            let Some(i) = pick(*node, len) else { return };
            let Some(old) = facts[i].primary.clone() else {
                return;
            };
            let new = facts[i].id.clone();
            let taken = facts
                .iter_mut()
                .find(|f| f.id == old)
                .map(|f| std::mem::take(&mut f.slots))
                .unwrap_or_default();
            facts[i].slots.extend(taken);
            facts[i].primary = None;
            for f in facts.iter_mut() {
                if f.id != new && (f.primary.as_deref() == Some(old.as_str()) || f.id == old) {
                    f.primary = Some(new.clone());
                }
            }
        }
        Mutation::Follow { node, target } => {
            if let (Some(a), Some(b)) = (pick(*node, len), pick(*target, len)) {
                facts[a].primary = Some(facts[b].id.clone());
            }
        }
        Mutation::Orphan { node } => {
            if let Some(i) = pick(*node, len) {
                facts[i].primary = Some(node_id(8888, u32::from(*node), 1));
            }
        }
        Mutation::Flags {
            node,
            migrating,
            synced,
            cluster_ok,
        } => {
            if let Some(i) = pick(*node, len) {
                facts[i].migrating = *migrating;
                facts[i].synced = *synced;
                facts[i].cluster_ok = *cluster_ok;
            }
        }
        Mutation::Version { node, version } => {
            if let Some(i) = pick(*node, len) {
                facts[i].version = version.text();
            }
        }
        Mutation::EmptyId { node } => {
            if let Some(i) = pick(*node, len) {
                facts[i].id.clear();
            }
        }
        Mutation::Recreated { node } => {
            let Some(i) = pick(*node, len) else { return };
            let old = facts[i].id.clone();
            let (shard, index) = (facts[i].shard, facts[i].node);
            facts[i] = ValkeyNode {
                id: node_id(shard, index, 1 + i as u32),
                version: facts[i].version.clone(),
                ..fresh_node(shard, index)
            };
            for f in facts.iter_mut() {
                for p in f.peers.iter_mut().filter(|p| p.id == old) {
                    p.failed = true;
                    p.linked = false;
                }
            }
        }
        Mutation::NoPod { node } => {
            if let Some(i) = pick(*node, pods.len()) {
                pods.remove(i);
            }
        }
        Mutation::StrayPod { shard, node } => pods.push(ObservedPod {
            shard: *shard,
            node: *node,
            host_ip: None,
            node_external_ip: None,
            ready: false,
            outdated: false,
        }),
        Mutation::Pod {
            node,
            ready,
            outdated,
        } => {
            if let Some(i) = pick(*node, pods.len()) {
                pods[i].ready = *ready;
                pods[i].outdated = *outdated;
            }
        }
    }
}

/// How the observed Valkey cluster was built: its shape and stage, then the
/// mutations in order.
#[derive(Clone, Debug)]
pub struct World {
    pub shards: u32,
    pub nodes: u32,
    pub stage: Stage,
    pub mutations: Vec<Mutation>,
    /// `observed.valkey` is none (the host does not manage Valkey).
    pub unmanaged: bool,
}

impl World {
    /// The observed nodes and pods this world describes.
    pub fn build(&self) -> (Vec<ValkeyNode>, Vec<ObservedPod>) {
        let mut facts = cluster_at(self.shards, self.nodes, self.stage);
        let mut pods = pods_of(&facts);
        for m in &self.mutations {
            apply(m, &mut facts, &mut pods);
        }
        (facts, pods)
    }
}

/// A world near a spec of `shards` x `nodes`: mostly the same shape, now
/// and then a shard or node more or fewer (scale-in and scale-out), at any
/// stage, with up to a dozen mutations.
pub fn world(shards: u32, nodes: u32) -> impl Strategy<Value = World> {
    let near = |x: u32| {
        prop_oneof![
            6 => Just(x),
            1 => Just(x + 1),
            1 => Just(x.saturating_sub(1)),
            1 => Just(x + 2),
        ]
        .prop_map(|v: u32| v.max(1))
    };
    (
        near(shards),
        near(nodes),
        prop_oneof![
            1 => Just(Stage::Fresh),
            1 => Just(Stage::Met),
            1 => Just(Stage::Assigned),
            5 => Just(Stage::Formed),
        ],
        prop_oneof![
            1 => vec(mutation(), 0..1),
            4 => vec(mutation(), 1..4),
            2 => vec(mutation(), 4..12),
        ],
        prop::bool::weighted(0.03),
    )
        .prop_map(|(shards, nodes, stage, mutations, unmanaged)| World {
            shards,
            nodes,
            stage,
            mutations,
            unmanaged,
        })
}

/// NodePorts other clusters pin.
fn pinned_elsewhere() -> impl Strategy<Value = Vec<PinnedPort>> {
    prop_oneof![
        3 => Just(Vec::new()),
        1 => vec(
            (29995u32..30020, "[a-z]{1,4}/[a-z]{1,6}")
                .prop_map(|(port, cluster)| PinnedPort { port, cluster }),
            1..4,
        ),
    ]
}

/// `c` with what most often makes a spec invalid set right: the name,
/// image, config, scheduling, persistence, users, and the external access
/// options that contradict each other. Most of the guest's work (and all of
/// the topology's) happens only for a valid spec.
pub fn tidied(mut c: Cluster) -> Cluster {
    if !c
        .name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        || !c.name.starts_with(|ch: char| ch.is_ascii_lowercase())
        || c.name.ends_with('-')
        || c.name.len() > 20
    {
        c.name = "fz".into();
    }
    c.shards = c.shards.clamp(1, 1000);
    c.replicas = c.replicas.clamp(0, 15);
    c.image = None;
    c.config
        .retain(|(k, v)| k == "maxmemory" && v.bytes().all(|b| b.is_ascii_digit()));
    c.scheduling = Scheduling {
        node: SpreadSet {
            shard: Strength::Preferred,
            ..SpreadSet::default()
        },
        ..Scheduling::default()
    };
    if let Some(p) = &mut c.persistence {
        p.size = "1Gi".into();
        p.storage_class_name = None;
    }
    c.users.clear();
    if let Some(ea) = &mut c.external_access {
        ea.hostname_prefix = "shard".into();
        ea.domain = Some("valkey.example.com".into());
        ea.service_annotations.clear();
        ea.load_balancer_source_ranges.clear();
        ea.load_balancer_class = None;
        ea.node_ports = None;
        if let Some(gw) = &mut ea.gateway {
            gw.name = "gw".into();
            gw.section_name = None;
            gw.base_port = 7000;
            c.tls = None;
        } else if ea.service_type == ServiceType::ClusterIp {
            ea.service_type = ServiceType::NodePort;
        }
    }
    c
}

/// One fuzz case: the guest's whole input, and the world its Valkey facts
/// and pods were built from.
#[derive(Clone, Debug)]
pub struct Case {
    pub input: Input,
    pub world: World,
}

/// The guest's whole input: a spec from [`strategies::cluster`] (three in
/// four [`tidied`]), Services
/// and a Gateway from [`strategies::observed`], other clusters and pins
/// elsewhere, and a Valkey cluster with its pods from [`world`].
pub fn case() -> impl Strategy<Value = Case> {
    let cluster = prop_oneof![
        1 => strategies::cluster(),
        3 => strategies::cluster().prop_map(tidied),
    ];
    cluster.prop_flat_map(|cluster| {
        let shards = cluster.shards.clamp(1, 6) as u32;
        let nodes = cluster.replicas.clamp(0, 3) as u32 + 1;
        (
            Just(cluster),
            strategies::observed(shards, nodes),
            world(shards, nodes),
            vec(strategies::name(), 0..3),
            pinned_elsewhere(),
            strategies::credentials(),
            option::weighted(0.1, Just(())),
        )
            .prop_map(
                |(cluster, observed, world, other_clusters, pinned, credentials, random_pods)| {
                    let (facts, pods) = world.build();
                    let observed = Observed {
                        // Now and then the strategy's unrelated pods.
                        pods: if random_pods.is_some() {
                            observed.pods
                        } else {
                            pods
                        },
                        valkey: (!world.unmanaged).then_some(facts),
                        ..observed
                    };
                    Case {
                        input: Input {
                            cluster,
                            credentials,
                            observed,
                            other_clusters,
                            pinned_elsewhere: pinned,
                        },
                        world,
                    }
                },
            )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_distinct_and_look_like_valkeys() {
        let mut seen = std::collections::BTreeSet::new();
        for s in 0..50 {
            for n in 0..16 {
                for g in 0..3 {
                    let id = node_id(s, n, g);
                    assert_eq!(id.len(), 40);
                    assert!(id.bytes().all(|b| b.is_ascii_hexdigit()));
                    assert!(seen.insert(id));
                }
            }
        }
    }

    #[test]
    fn a_formed_cluster_serves_every_slot_once() {
        let facts = formed(3, 2);
        let mut owners = vec![0; SLOTS as usize];
        for f in &facts {
            for s in slots_of(f) {
                owners[s as usize] += 1;
            }
        }
        assert!(owners.iter().all(|&c| c == 1));
        assert!(facts.iter().all(|f| f.peers.len() == 5));
        assert_eq!(
            facts[1].primary.as_deref(),
            Some(facts[0].id.as_str()),
            "replicas follow node 0"
        );
    }
}
