//! One cluster's observed state, read once from the caches: the objects it
//! owns, and each of its Pods projected once into an [`ObservedNode`] that
//! every later stage reads (the guest's input, the Valkey nodes to reach,
//! the Pod a restart deletes, the ready count in the status).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use shardgate_contract::model::{self as m, Input, NodeRef};

use crate::cache::entry::LABEL_REVISION;
use crate::cache::{
    Cache, CachedConfigMap, CachedDisruptionBudget, CachedPod, CachedRoute, CachedService,
    CachedStatefulSet, Entry,
};
use crate::convert::{self, Labelled, PodView};
use crate::gateway_api::{GatewayApi, Gateways};
use crate::node_addresses::NodeAddresses;
use crate::prune::owned_by;

/// The caches of the kinds a cluster owns.
#[derive(Clone, Default)]
pub struct Caches {
    pub services: Cache<CachedService>,
    pub config_maps: Cache<CachedConfigMap>,
    pub stateful_sets: Cache<CachedStatefulSet>,
    pub pods: Cache<CachedPod>,
    pub disruption_budgets: Cache<CachedDisruptionBudget>,
    /// The Gateway API routes, when served (else empty and ready).
    pub tcp_routes: Cache<CachedRoute>,
    pub tls_routes: Cache<CachedRoute>,
    /// Not owned: every Kubernetes node's ExternalIP.
    pub node_addresses: NodeAddresses,
    /// Not owned: the Gateways clusters name, when served.
    pub gateways: Gateways,
    /// Which Gateway API kinds the API server serves (found at start).
    pub gateway_api: GatewayApi,
}

impl Caches {
    /// Whether every kind has been listed once. A reconcile that ran on a
    /// half-filled cache would see objects as missing and apply them again
    /// (after a restart: every Service without its NodePorts).
    pub fn synced(&self) -> bool {
        self.services.is_ready()
            && self.config_maps.is_ready()
            && self.stateful_sets.is_ready()
            && self.pods.is_ready()
            && self.disruption_budgets.is_ready()
            && self.tcp_routes.is_ready()
            && self.tls_routes.is_ready()
            && self.node_addresses.is_ready()
            && self.gateways.is_ready()
    }

    /// Caches of kinds the API server does not serve: empty, and ready
    /// with nothing to list.
    pub fn without_gateway_api(mut self) -> Self {
        self.tcp_routes = Cache::unserved();
        self.tls_routes = Cache::unserved();
        self.gateways = Gateways::unserved();
        self.gateway_api = GatewayApi::default();
        self
    }

    /// What the guest is told of the Gateway `spec` names: none without
    /// one, else whether the API serves what it needs and the Gateway as
    /// it is.
    pub fn gateway(&self, spec: &m::Cluster) -> Option<m::GatewayFound> {
        let gateway = spec.external_access.as_ref()?.gateway.as_ref()?;
        let kind = if spec.tls.is_some() {
            m::RouteKind::Tls
        } else {
            m::RouteKind::Tcp
        };
        Some(if !self.gateway_api.serves(kind) {
            m::GatewayFound::NotServed
        } else {
            match self.gateways.get(&spec.namespace, &gateway.name) {
                Some(g) => m::GatewayFound::Found(g),
                None => m::GatewayFound::Missing,
            }
        })
    }
}

/// A node's Pod as every stage reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObservedNode {
    pub at: NodeRef,
    /// The Pod's name.
    pub pod: Arc<str>,
    pub pod_ip: Option<IpAddr>,
    pub host_ip: Option<m::IpAddress>,
    /// Its Kubernetes node's ExternalIP.
    pub node_external_ip: Option<m::IpAddress>,
    pub ready: bool,
    /// The Pod runs an older template than its StatefulSet's.
    pub outdated: bool,
}

impl ObservedNode {
    /// What the guest reads of it.
    pub fn observed_pod(&self) -> m::ObservedPod {
        m::ObservedPod {
            shard: self.at.shard,
            node: self.at.node,
            host_ip: self.host_ip,
            node_external_ip: self.node_external_ip,
            ready: self.ready,
            outdated: self.outdated,
        }
    }
}

/// What one cluster owns: labelled for the cluster AND controlled by its
/// UID. Pods count only if a StatefulSet the cluster controls controls them,
/// so a stray Pod carrying the cluster's labels cannot inject a host IP.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub services: Vec<Arc<CachedService>>,
    pub config_maps: Vec<Arc<CachedConfigMap>>,
    pub stateful_sets: Vec<Arc<CachedStatefulSet>>,
    pub disruption_budgets: Vec<Arc<CachedDisruptionBudget>>,
    pub tcp_routes: Vec<Arc<CachedRoute>>,
    pub tls_routes: Vec<Arc<CachedRoute>>,
    /// Each owned Pod that names its node, projected once, in index order.
    pub nodes: Vec<ObservedNode>,
    /// The Gateway the spec names, as the guest is told of it.
    pub gateway: Option<m::GatewayFound>,
}

impl Snapshot {
    /// Reads what `cluster` (with `uid`) owns in `namespace` from `caches`,
    /// and the Gateway `spec` names.
    pub fn of(caches: &Caches, spec: &m::Cluster, uid: &str) -> Self {
        let (namespace, cluster) = (spec.namespace.as_str(), spec.name.as_str());
        fn owned<K: Entry>(objects: Vec<Arc<K>>, cluster: &str, uid: &str) -> Vec<Arc<K>> {
            objects
                .into_iter()
                .filter(|o| owned_by(o.as_ref(), cluster, uid))
                .collect()
        }
        let stateful_sets = owned(
            caches.stateful_sets.labelled(namespace, cluster),
            cluster,
            uid,
        );
        let pods = caches.pods.labelled(namespace, cluster);
        Snapshot {
            services: owned(caches.services.labelled(namespace, cluster), cluster, uid),
            config_maps: owned(
                caches.config_maps.labelled(namespace, cluster),
                cluster,
                uid,
            ),
            disruption_budgets: owned(
                caches.disruption_budgets.labelled(namespace, cluster),
                cluster,
                uid,
            ),
            tcp_routes: owned(caches.tcp_routes.labelled(namespace, cluster), cluster, uid),
            tls_routes: owned(caches.tls_routes.labelled(namespace, cluster), cluster, uid),
            nodes: project(cluster, &stateful_sets, &pods, &caches.node_addresses),
            stateful_sets,
            gateway: caches.gateway(spec),
        }
    }

    /// The guest's input: `spec` (the cluster as the guest reads it), the
    /// owned Services and the nodes, and the other clusters' names. No
    /// Valkey facts yet (see [`Input::observed`]'s `valkey`).
    pub fn input(&self, spec: m::Cluster, other_clusters: Vec<String>) -> Input {
        let services = self
            .services
            .iter()
            .filter_map(|s| convert::observed_service(&spec.name, s.as_ref()))
            .collect();
        Input {
            observed: m::Observed {
                services,
                pods: self.nodes.iter().map(ObservedNode::observed_pod).collect(),
                gateway: self.gateway.clone(),
                valkey: None,
            },
            cluster: spec,
            // Filled by the operator's credentials stage.
            credentials: m::Credentials::default(),
            other_clusters,
            // Filled by the operator, which sees every cluster.
            pinned_elsewhere: Vec::new(),
        }
    }

    /// The ready nodes with a pod IP, to reach over the Valkey protocol.
    pub fn valkey_targets(&self) -> impl Iterator<Item = (NodeRef, IpAddr)> + '_ {
        self.nodes
            .iter()
            .filter(|n| n.ready)
            .filter_map(|n| Some((n.at, n.pod_ip?)))
    }

    /// The Pods of node `at` (one, unless a replacement is starting).
    pub fn pods_of(&self, at: NodeRef) -> impl Iterator<Item = &ObservedNode> + '_ {
        self.nodes.iter().filter(move |n| n.at == at)
    }

    /// Nodes still to be rolled to their StatefulSet's template: Pods
    /// running an older one, and StatefulSets whose controller has not seen
    /// their latest spec yet (so their Pods cannot be told outdated).
    pub fn rolling(&self) -> usize {
        let unseen = self
            .stateful_sets
            .iter()
            .filter(|s| !s.state.as_ref().is_some_and(|st| st.observed))
            .count();
        unseen + self.nodes.iter().filter(|n| n.outdated).count()
    }

    /// How many of `wanted`'s nodes have a ready Pod.
    pub fn ready_nodes(&self, wanted: &[m::Node]) -> usize {
        crate::status::ready_nodes(self.nodes.iter().map(|n| (n.at, n.ready)), wanted)
    }

    /// How many of the spec's `shards` have every wanted node ready.
    pub fn ready_shards(&self, wanted: &[m::Node], shards: u32) -> usize {
        crate::status::ready_shards(self.nodes.iter().map(|n| (n.at, n.ready)), wanted, shards)
    }
}

/// Each Pod that a StatefulSet of `stateful_sets` controls and that names
/// its node, once; outdated when its `controller-revision-hash` is not its
/// StatefulSet's `updateRevision`.
fn project(
    cluster: &str,
    stateful_sets: &[Arc<CachedStatefulSet>],
    pods: &[Arc<CachedPod>],
    node_addresses: &NodeAddresses,
) -> Vec<ObservedNode> {
    // StatefulSet UID -> its update revision, if it reports one.
    let revisions: BTreeMap<&str, Option<&str>> = stateful_sets
        .iter()
        .filter_map(|s| {
            let revision = s
                .state
                .as_ref()
                .and_then(|st| st.update_revision.as_deref());
            Some((s.uid()?, revision))
        })
        .collect();
    let mut nodes: Vec<ObservedNode> = pods
        .iter()
        .filter_map(|pod| {
            let revision = revisions.get(pod.controller_uid()?)?;
            let o = convert::observed_pod(cluster, pod.as_ref())?;
            let outdated = matches!(
                (revision, pod.label(LABEL_REVISION)),
                (Some(want), Some(have)) if *want != have
            );
            Some(ObservedNode {
                at: NodeRef {
                    shard: o.shard,
                    node: o.node,
                },
                pod: pod.name.clone(),
                pod_ip: pod.pod_ip().and_then(|ip| ip.parse().ok()),
                host_ip: o.host_ip,
                node_external_ip: pod.node_name().and_then(|n| node_addresses.external_ip(n)),
                ready: o.ready,
                outdated,
            })
        })
        .collect();
    nodes.sort_by(|a, b| (a.at.shard, a.at.node, &a.pod).cmp(&(b.at.shard, b.at.node, &b.pod)));
    nodes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::entry;
    use serde_json::json;
    use shardgate_contract::labels;

    fn sts(name: &str, uid: &str, revision: Option<&str>) -> Arc<CachedStatefulSet> {
        Arc::new(entry::stateful_set(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns", "uid": uid,
                    "labels": {labels::CLUSTER: "c"}},
                "spec": {"selector": {}, "template": {}},
                "status": {"replicas": 1, "updateRevision": revision},
            }))
            .unwrap(),
            None,
        ))
    }

    /// A Pod of node (shard, node), controlled by `owner`, at `revision`.
    fn pod(
        name: &str,
        at: (u32, u32),
        owner: &str,
        revision: &str,
        ip: Option<&str>,
    ) -> Arc<CachedPod> {
        Arc::new(entry::pod(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns",
                    "labels": {labels::CLUSTER: "c", labels::SHARD: at.0.to_string(),
                        labels::NODE: at.1.to_string(), LABEL_REVISION: revision},
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet",
                        "name": "s", "uid": owner, "controller": true}]},
                "status": {"podIP": ip, "hostIP": "10.0.0.9",
                    "conditions": [{"type": "Ready", "status": if ip.is_some() { "True" } else { "False" }}]},
            }))
            .unwrap(),
        ))
    }

    #[test]
    fn a_roll_counts_outdated_pods_and_statefulsets_not_yet_seen() {
        let seen = |generation: i64, observed: Option<i64>| {
            Arc::new(entry::stateful_set(
                serde_json::from_value(json!({
                    "metadata": {"name": "s", "namespace": "ns", "uid": "u",
                        "generation": generation, "labels": {labels::CLUSTER: "c"}},
                    "spec": {"selector": {}, "template": {}},
                    "status": {"replicas": 1, "observedGeneration": observed,
                        "updateRevision": "r2"},
                }))
                .unwrap(),
                None,
            ))
        };
        let outdated = pod("p", (0, 0), "u", "r1", Some("10.1.0.1"));
        let current = pod("p", (0, 0), "u", "r2", Some("10.1.0.1"));
        // (statefulset, pod) => nodes to roll
        for (set, p, want) in [
            (seen(2, Some(2)), &current, 0),
            (seen(2, Some(2)), &outdated, 1),
            (seen(3, Some(2)), &current, 1),
            (seen(3, None), &current, 1),
        ] {
            let snapshot = Snapshot {
                nodes: project(
                    "c",
                    std::slice::from_ref(&set),
                    std::slice::from_ref(p),
                    &NodeAddresses::default(),
                ),
                stateful_sets: vec![set],
                ..Snapshot::default()
            };
            assert_eq!(snapshot.rolling(), want);
        }
    }

    #[test]
    fn each_owned_pod_is_projected_once_in_index_order() {
        let sets = [
            sts("s-10-0", "u10", Some("r2")),
            sts("s-2-1", "u21", Some("r1")),
            sts("s-2-0", "u20", None),
        ];
        let pods = [
            pod("p-10-0", (10, 0), "u10", "r1", Some("10.1.0.1")),
            pod("p-2-1", (2, 1), "u21", "r1", Some("10.1.0.2")),
            pod("p-2-0", (2, 0), "u20", "r0", None),
            pod("stray", (0, 0), "not-ours", "r1", Some("10.1.0.3")),
        ];
        let nodes = project("c", &sets, &pods, &NodeAddresses::default());
        let seen: Vec<_> = nodes
            .iter()
            .map(|n| {
                (
                    n.at.shard, n.at.node, &*n.pod, n.ready, n.outdated, n.pod_ip,
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                (2, 0, "p-2-0", false, false, None),
                (
                    2,
                    1,
                    "p-2-1",
                    true,
                    false,
                    Some("10.1.0.2".parse().unwrap())
                ),
                (
                    10,
                    0,
                    "p-10-0",
                    true,
                    true,
                    Some("10.1.0.1".parse().unwrap())
                ),
            ],
            "the stray pod is left out; an unknown revision is not outdated"
        );
        let snapshot = Snapshot {
            nodes,
            ..Snapshot::default()
        };
        let targets: Vec<_> = snapshot
            .valkey_targets()
            .map(|(at, _)| (at.shard, at.node))
            .collect();
        assert_eq!(targets, [(2, 1), (10, 0)], "only ready pods with an IP");
        let wanted = |s, n| m::Node {
            shard: s,
            node: n,
            name: String::new(),
            node_name: String::new(),
            port_name: String::new(),
            config: String::new(),
            announce: Vec::new(),
        };
        assert_eq!(snapshot.ready_nodes(&[wanted(2, 0), wanted(2, 1)]), 1);
        assert_eq!(snapshot.pods_of(NodeRef { shard: 10, node: 0 }).count(), 1);
        let input = snapshot.input(
            m::Cluster {
                name: "c".into(),
                ..m::Cluster::default()
            },
            vec!["other".into()],
        );
        assert_eq!(input.observed.pods.len(), 3);
        assert!(input.observed.pods[2].outdated);
        assert_eq!(input.other_clusters, ["other"]);
        assert!(input.observed.valkey.is_none());
    }
}
