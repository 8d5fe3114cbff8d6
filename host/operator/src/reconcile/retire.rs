//! Old external Services after a topology change (`PerShard` to `PerNode`
//! or back): once every node announces its new endpoint the guest no longer
//! wants them, but clients may still hold the old addresses until their next
//! topology refresh. They are kept for the cluster's
//! `switchGracePeriodSeconds`, counted from when the operator first found
//! them retiring (an operator restart starts the count again: later, never
//! sooner), then pruned.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::runtime::reflector::ObjectRef;
use shardgate_contract::names;
use shardgate_k8s::crd::{ServiceTopology, ValkeyCluster};

/// The old topology's Services among `unwanted` (names of Services the
/// cluster owns and no longer wants): another topology's Service of a
/// shard the spec still has, while external access is on. Anything else
/// unwanted (a departed shard's, every Service once external access is off)
/// is not retiring and goes at once.
pub fn retiring(vc: &ValkeyCluster, unwanted: &BTreeSet<String>) -> BTreeSet<String> {
    let Some(ea) = vc.spec.external_access.as_ref().filter(|ea| ea.enabled) else {
        return BTreeSet::new();
    };
    let cluster = vc.metadata.name.as_deref().unwrap_or_default();
    let shards = vc.spec.shards.max(0) as u32;
    unwanted
        .iter()
        .filter(|name| {
            let shard = match ea.topology {
                ServiceTopology::PerNode => names::parse_shard_service(cluster, name),
                ServiceTopology::PerShard => {
                    names::parse_node_service(cluster, name).map(|(s, _)| s)
                }
            };
            shard.is_some_and(|s| s < shards)
        })
        .cloned()
        .collect()
}

/// How long `first_seen` retiring Services still have at `now`, if any.
pub fn remaining(first_seen: Instant, now: Instant, grace: Duration) -> Option<Duration> {
    grace
        .checked_sub(now.saturating_duration_since(first_seen))
        .filter(|d| !d.is_zero())
}

/// When each cluster's retiring Services were first seen.
#[derive(Debug, Default)]
pub struct Retiring {
    first_seen: Mutex<HashMap<(ObjectRef<ValkeyCluster>, String), Instant>>,
}

impl Retiring {
    /// Of `retiring` (one cluster's), those to keep at `now`, and how soon
    /// the first of them is due. Forgets the cluster's Services that are no
    /// longer retiring.
    pub fn hold(
        &self,
        obj: &ObjectRef<ValkeyCluster>,
        retiring: &BTreeSet<String>,
        grace: Duration,
        now: Instant,
    ) -> (BTreeSet<String>, Option<Duration>) {
        let mut seen = self.first_seen.lock().unwrap();
        seen.retain(|(o, name), _| o != obj || retiring.contains(name));
        let mut keep = BTreeSet::new();
        let mut next: Option<Duration> = None;
        for name in retiring {
            let first = *seen.entry((obj.clone(), name.clone())).or_insert(now);
            if let Some(left) = remaining(first, now, grace) {
                keep.insert(name.clone());
                next = Some(next.map_or(left, |n| n.min(left)));
            }
        }
        (keep, next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cluster(topology: &str, enabled: bool, shards: i32) -> ValkeyCluster {
        serde_json::from_value(json!({
            "apiVersion": "shardgate.io/v1alpha1", "kind": "ValkeyCluster",
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {"shards": shards, "replicas": 1,
                     "externalAccess": {"enabled": enabled, "topology": topology}},
        }))
        .unwrap()
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn only_the_other_topologys_services_of_kept_shards_are_retiring() {
        let unwanted = set(&[
            "shardgate-c-shard-0",
            "shardgate-c-shard-2",
            "shardgate-c-shard-0-node-1",
            "shardgate-c-shard-2-node-0",
            "shardgate-c-0-1",
            "hand-made",
        ]);
        // (topology, external access on, shards) => retiring
        for (topology, enabled, shards, want) in [
            ("PerNode", true, 2, set(&["shardgate-c-shard-0"])),
            ("PerShard", true, 2, set(&["shardgate-c-shard-0-node-1"])),
            (
                "PerShard",
                true,
                3,
                set(&["shardgate-c-shard-0-node-1", "shardgate-c-shard-2-node-0"]),
            ),
            ("PerNode", false, 2, set(&[])),
        ] {
            assert_eq!(
                retiring(&cluster(topology, enabled, shards), &unwanted),
                want,
                "{topology} {enabled} {shards}"
            );
        }
    }

    #[test]
    fn retiring_services_are_held_for_the_grace_period_from_first_sight() {
        let r = Retiring::default();
        let obj = ObjectRef::from_obj(&cluster("PerNode", true, 2));
        let grace = Duration::from_secs(10);
        let t0 = Instant::now();
        let s = |secs| t0 + Duration::from_secs(secs);
        let a = set(&["shardgate-c-shard-0"]);
        let ab = set(&["shardgate-c-shard-0", "shardgate-c-shard-1"]);
        assert_eq!(r.hold(&obj, &a, grace, t0), (a.clone(), Some(grace)));
        // A second one later: each counts from its own first sight.
        assert_eq!(
            r.hold(&obj, &ab, grace, s(4)),
            (ab.clone(), Some(Duration::from_secs(6)))
        );
        assert_eq!(
            r.hold(&obj, &ab, grace, s(10)),
            (set(&["shardgate-c-shard-1"]), Some(Duration::from_secs(4)))
        );
        assert_eq!(r.hold(&obj, &ab, grace, s(14)), (set(&[]), None));
        // No longer retiring (the switch was undone): forgotten, so a new
        // switch gets the whole grace period again.
        assert_eq!(r.hold(&obj, &set(&[]), grace, s(15)), (set(&[]), None));
        assert_eq!(r.hold(&obj, &a, grace, s(16)), (a.clone(), Some(grace)));
        // Zero grace: nothing held.
        assert_eq!(r.hold(&obj, &ab, Duration::ZERO, s(17)), (set(&[]), None));
    }
}
