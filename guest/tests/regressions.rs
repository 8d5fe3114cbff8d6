//! Inputs the fuzz test (`tests/tests/fuzz.rs`) found the guest mishandling,
//! one test each, named with the case's seed (`SHARDGATE_FUZZ_CASE`) and
//! reduced to what the bug needs.

use shardgate_contract::model::*;
use shardgate_guest::reconcile;

fn id(shard: u32, node: u32) -> String {
    format!("id-{shard}-{node}")
}

/// A formed `shards` x `nodes` cluster: node 0 of each shard serves its
/// even share, the others follow it, every node knows every other.
fn formed(shards: u32, nodes: u32) -> Vec<ValkeyNode> {
    let share = 16384 / shards;
    let all: Vec<(u32, u32)> = (0..shards)
        .flat_map(|s| (0..nodes).map(move |n| (s, n)))
        .collect();
    all.iter()
        .map(|&(shard, node)| ValkeyNode {
            shard,
            node,
            id: id(shard, node),
            primary: (node > 0).then(|| id(shard, 0)),
            slots: if node == 0 {
                let end = if shard + 1 == shards {
                    16383
                } else {
                    (shard + 1) * share - 1
                };
                vec![SlotRange {
                    start: shard * share,
                    end,
                }]
            } else {
                Vec::new()
            },
            peers: all
                .iter()
                .filter(|&&at| at != (shard, node))
                .map(|&(s, n)| Peer {
                    id: id(s, n),
                    failed: false,
                    linked: true,
                })
                .collect(),
            migrating: false,
            synced: true,
            cluster_ok: true,
            version: "9.0.1".into(),
        })
        .collect()
}

fn pods(facts: &[ValkeyNode]) -> Vec<ObservedPod> {
    facts
        .iter()
        .map(|f| ObservedPod {
            shard: f.shard,
            node: f.node,
            host_ip: Some(IpAddress::V4(0x0a00_0001)),
            node_external_ip: None,
            ready: true,
            outdated: false,
        })
        .collect()
}

fn input(shards: i32, replicas: i32, facts: Vec<ValkeyNode>, pods: Vec<ObservedPod>) -> Input {
    Input {
        cluster: Cluster {
            name: "fz".into(),
            namespace: "default".into(),
            shards,
            replicas,
            external_access: Some(ExternalAccess::default()),
            ..Cluster::default()
        },
        observed: Observed {
            pods,
            valkey: Some(facts),
            ..Observed::default()
        },
        ..Input::default()
    }
}

/// 82a77dafce9697f7: a node that answers at node index 4294967294 (no spec
/// makes one) and that the others know was kept as departing, and the
/// objects of a shard that wide (2^32 nodes) were allocated: an abort
/// natively, the memory cap in wasm, which counts towards rolling a good
/// module back. Such a node is not the cluster's; nothing is kept for it.
#[test]
fn a_node_at_an_index_no_spec_makes_is_not_kept() {
    for (shard, node) in [
        (4, u32::MAX - 1),
        (0, u32::MAX),
        (u32::MAX, 0),
        (1000, 0),
        (0, 16),
    ] {
        let mut facts = formed(2, 2);
        facts[3].shard = shard;
        facts[3].node = node;
        let d = reconcile(&input(2, 1, facts.clone(), pods(&facts))).expect("valid");
        let kept: Vec<(u32, u32)> = d.nodes.iter().map(|n| (n.shard, n.node)).collect();
        assert_eq!(kept, [(0, 0), (0, 1), (1, 0), (1, 1)], "{shard}/{node}");
        assert!(
            d.topology.departing.is_empty(),
            "{:?}",
            d.topology.departing
        );
    }
}

fn forgotten(d: &Desired) -> Vec<&str> {
    d.topology
        .steps
        .iter()
        .filter_map(|s| match s {
            Step::Forget(id) => Some(id.as_str()),
            _ => None,
        })
        .collect()
}

/// 87fbde5d09709292: a node past the spec that reports the same ID as a
/// node of the spec serving slots (here both empty; a copied `nodes.conf`
/// does it with a real ID) was forgotten by that ID: `CLUSTER FORGET`
/// would have had every node forget the serving one.
#[test]
fn an_id_a_node_of_the_spec_reports_is_never_forgotten() {
    for shared in ["", "id-0-0"] {
        let mut facts = formed(1, 2);
        facts[0].id = shared.into();
        facts[1].id = shared.into();
        facts[1].primary = None;
        // Spec 1x1: node 1 is past it, serves nothing, is known.
        let d = reconcile(&input(1, 0, facts.clone(), pods(&facts))).expect("valid");
        assert!(
            forgotten(&d).is_empty(),
            "{shared:?}: {:?}",
            d.topology.steps
        );
        assert!(
            d.topology
                .departing
                .contains(&NodeRef { shard: 0, node: 1 })
        );
    }
    // With its own ID it is forgotten as before.
    let mut facts = formed(1, 2);
    facts[1].primary = None;
    let d = reconcile(&input(1, 0, facts.clone(), pods(&facts))).expect("valid");
    assert_eq!(forgotten(&d), ["id-0-1"]);
}

/// 87fbde5d09709292 (a later run of the same seed): a node reporting an
/// inverted range (`4588-0`) next to its real one made the count of its
/// slots overflow: a panic natively, a wrong count in wasm (no overflow
/// checks there). Slots are now counted one by one, and an inverted range
/// or one past 16383 serves none.
#[test]
fn a_range_that_serves_nothing_counts_for_nothing() {
    for junk in [
        (4588, 0),
        (16384, 20000),
        (u32::MAX, u32::MAX),
        (0, u32::MAX),
    ] {
        let mut facts = formed(2, 1);
        facts[0].slots.push(SlotRange {
            start: junk.0,
            end: junk.1,
        });
        let d = reconcile(&input(2, 0, facts.clone(), pods(&facts))).expect("valid");
        // `0-u32::MAX` claims every slot, shard 1's too: not formed.
        let claims_all = junk == (0, u32::MAX);
        assert_eq!(
            d.topology.formed, !claims_all,
            "{junk:?}: {}",
            d.topology.waiting
        );
    }
    // A slot claimed by two shards' primaries is not formed, whichever
    // answer comes first.
    for first in [0, 1] {
        let mut facts = formed(2, 1);
        let other = 1 - first;
        let slot = facts[first].slots[0].start;
        facts[other].slots.push(SlotRange {
            start: slot,
            end: slot,
        });
        let d = reconcile(&input(2, 0, facts.clone(), pods(&facts))).expect("valid");
        assert!(!d.topology.formed, "claimed twice, {first} first");
    }
}

/// 0317a88c08025f02: two answers at one place (a fresh node, then the
/// node serving the shard's slots after a failover). The second was
/// dropped unseen, so a place past the spec whose node serves slots was
/// let go. The host sends one answer per place; when it does not, every
/// answer counts for what is kept, and nothing is planned.
#[test]
fn two_answers_at_one_place_keep_it_and_plan_nothing() {
    let mut facts = formed(1, 2);
    let slots = std::mem::take(&mut facts[0].slots);
    facts[0].primary = Some(id(0, 1));
    facts[1].primary = None;
    facts[1].slots = slots;
    let mut fresh = facts[1].clone();
    fresh.id = "fresh".into();
    fresh.slots.clear();
    fresh.peers.clear();
    facts.insert(1, fresh);
    for order in [
        facts.clone(),
        vec![facts[0].clone(), facts[2].clone(), facts[1].clone()],
    ] {
        let d = reconcile(&input(1, 0, order.clone(), pods(&order))).expect("valid");
        assert_eq!(d.topology.departing, [NodeRef { shard: 0, node: 1 }]);
        assert_eq!(d.nodes.len(), 2);
        assert!(d.topology.steps.is_empty(), "{:?}", d.topology.steps);
        assert!(
            d.topology.waiting.contains("more than once"),
            "{}",
            d.topology.waiting
        );
    }
}

/// e812ba90b48db394: an outdated node that serves slots yet names a primary
/// (a failover half seen) was taken for a replica and restarted, with no
/// replica to hand over to and no volume: its shard's data would be lost.
/// A node serving slots restarts only as a primary does.
#[test]
fn a_serving_node_that_names_a_primary_is_not_restarted_as_a_replica() {
    let mut facts = formed(6, 1);
    // The guest's even shares (the first four shards take one slot more).
    let starts = [0, 2731, 5462, 8193, 10924, 13654, 16384];
    for (s, f) in facts.iter_mut().enumerate() {
        f.slots = vec![SlotRange {
            start: starts[s],
            end: starts[s + 1] - 1,
        }];
    }
    facts[0].primary = Some(id(4, 0));
    facts[3].primary = Some(id(2, 0));
    let mut pods = pods(&facts);
    pods[3].outdated = true;
    let d = reconcile(&input(6, 0, facts, pods)).expect("valid");
    assert!(
        !d.topology
            .steps
            .iter()
            .any(|s| matches!(s, Step::Restart(r) if r.shard == 3)),
        "{:?}",
        d.topology.steps
    );
}
