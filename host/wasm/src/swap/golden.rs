//! The golden inputs every candidate module runs on before it may serve, and
//! the invariants its answers must keep.
//!
//! The checks are on the shape of the answer, not its bytes, so a module
//! that renders objects differently (other labels, another config format)
//! still passes, while one that loses a node, mislabels a port or forgets an
//! announce key does not.

use std::collections::BTreeSet;

use shardgate_contract::announce::KEYS as ANNOUNCE_KEYS;
use shardgate_contract::model::{
    Cluster, Desired, EndpointType, ExternalAccess, Gateway, GatewayFound, Ingress, Input,
    IpAddress, Listener, ListenerProtocol, Observed, ObservedGateway, ObservedPod, ObservedPort,
    ObservedService, Scheduling, ServiceTopology, ServiceType, Severity, SpreadSet, Strength,
    TrafficPolicy, ValkeyNode,
};
use shardgate_contract::names;

/// One valid cluster with what the operator observed of it.
#[derive(Clone, Debug)]
pub struct GoldenCase {
    pub input: Input,
}

impl GoldenCase {
    /// The case's name in rejection messages: the cluster's name.
    pub fn name(&self) -> &str {
        &self.input.cluster.name
    }
}

/// The golden inputs: valid cases that must reconcile and keep every
/// invariant, and one invalid spec that `validate` must refuse.
#[derive(Clone, Debug)]
pub struct Golden {
    pub cases: Vec<GoldenCase>,
    pub invalid: Cluster,
}

const NS: &str = "golden";

fn ipv4(a: u8, b: u8, c: u8, d: u8) -> IpAddress {
    IpAddress::V4(u32::from_be_bytes([a, b, c, d]))
}

/// Every pod of a `shards` x `replicas` cluster, ready, on its own host.
fn pods(shards: u32, replicas: u32) -> Vec<ObservedPod> {
    (0..shards)
        .flat_map(|shard| {
            (0..=replicas).map(move |node| ObservedPod {
                shard,
                node,
                host_ip: Some(ipv4(192, 0, 2, (shard * 8 + node + 1) as u8)),
                node_external_ip: None,
                ready: true,
                outdated: false,
            })
        })
        .collect()
}

/// Shard Services as the API server left them: a NodePort per node.
fn services(
    shards: u32,
    replicas: u32,
    ingress: impl Fn(u32) -> Vec<Ingress>,
) -> Vec<ObservedService> {
    (0..shards)
        .map(|shard| ObservedService {
            shard,
            node: None,
            ports: (0..=replicas)
                .map(|node| ObservedPort {
                    node,
                    node_port: 30000 + shard * 10 + node,
                })
                .collect(),
            ingress: ingress(shard),
        })
        .collect()
}

/// A Service per node as the API server left them: a NodePort each, and
/// the cloud's ingress.
fn node_services(
    shards: u32,
    replicas: u32,
    ingress: impl Fn(u32, u32) -> Vec<Ingress>,
) -> Vec<ObservedService> {
    (0..shards)
        .flat_map(|shard| (0..=replicas).map(move |node| (shard, node)))
        .map(|(shard, node)| ObservedService {
            shard,
            node: Some(node),
            ports: vec![ObservedPort {
                node,
                node_port: 31000 + shard * 10 + node,
            }],
            ingress: ingress(shard, node),
        })
        .collect()
}

fn cluster(name: &str, shards: i32, replicas: i32, external: Option<ExternalAccess>) -> Cluster {
    Cluster {
        name: name.into(),
        namespace: NS.into(),
        shards,
        replicas,
        image: None,
        resources: None,
        tls: None,
        external_access: external,
        users: Vec::new(),
        config: vec![("maxmemory".into(), "100mb".into())],
        persistence: None,
        disruption_budget: true,
        scheduling: Scheduling {
            node: SpreadSet {
                shard: Strength::Preferred,
                ..SpreadSet::default()
            },
            ..Scheduling::default()
        },
    }
}

impl Golden {
    /// The set shipped with the host:
    ///
    /// - `golden-nodeport`: 3 shards x 1 replica behind NodePorts, announcing
    ///   IPs; every Service and pod observed, no Valkey facts.
    /// - `golden-lb`: 2 shards x 2 replicas behind load balancers, announcing
    ///   hostnames under a domain; fresh Valkey nodes (no slots, no peers),
    ///   so the module must plan the cluster's formation.
    /// - `golden-pernode`: 2 shards x 1 replica with a load balancer per
    ///   node (`topology: PerNode`), announcing each node's ingress IP.
    /// - `golden-internal`: 1 shard, no replicas, no external access, nothing
    ///   observed yet.
    /// - invalid: 0 shards and -1 replicas (`spec.shards`, `spec.replicas`).
    pub fn builtin() -> Golden {
        let nodeport = GoldenCase {
            input: Input {
                credentials: Default::default(),
                cluster: cluster(
                    "golden-nodeport",
                    3,
                    1,
                    Some(ExternalAccess {
                        enabled: true,
                        service_type: ServiceType::NodePort,
                        external_traffic_policy: TrafficPolicy::Cluster,
                        service_annotations: Vec::new(),
                        hostname_prefix: "shard".into(),
                        domain: None,
                        preferred_endpoint_type: EndpointType::Ip,
                        ..ExternalAccess::default()
                    }),
                ),
                observed: Observed {
                    services: services(3, 1, |_| Vec::new()),
                    pods: pods(3, 1),
                    gateway: None,
                    valkey: None,
                },
                other_clusters: vec!["golden-lb".into()],
                pinned_elsewhere: Vec::new(),
            },
        };
        let lb_nodes = (0..2u32)
            .flat_map(|shard| {
                (0..=2u32).map(move |node| ValkeyNode {
                    shard,
                    node,
                    id: format!("{:040x}", shard * 16 + node + 1),
                    primary: None,
                    slots: Vec::new(),
                    peers: Vec::new(),
                    migrating: false,
                    synced: false,
                    cluster_ok: false,
                    version: "9.0.1".into(),
                })
            })
            .collect();
        let lb = GoldenCase {
            input: Input {
                credentials: Default::default(),
                cluster: cluster(
                    "golden-lb",
                    2,
                    2,
                    Some(ExternalAccess {
                        enabled: true,
                        service_type: ServiceType::LoadBalancer,
                        external_traffic_policy: TrafficPolicy::Local,
                        service_annotations: vec![("example.com/lb".into(), "external".into())],
                        hostname_prefix: "vk".into(),
                        domain: Some("valkey.example.com".into()),
                        preferred_endpoint_type: EndpointType::Hostname,
                        ..ExternalAccess::default()
                    }),
                ),
                observed: Observed {
                    services: services(2, 2, |shard| {
                        vec![Ingress::Ip(ipv4(198, 51, 100, shard as u8 + 1))]
                    }),
                    pods: pods(2, 2),
                    gateway: None,
                    valkey: Some(lb_nodes),
                },
                other_clusters: Vec::new(),
                pinned_elsewhere: Vec::new(),
            },
        };
        let per_node = GoldenCase {
            input: Input {
                credentials: Default::default(),
                cluster: cluster(
                    "golden-pernode",
                    2,
                    1,
                    Some(ExternalAccess {
                        service_type: ServiceType::LoadBalancer,
                        topology: ServiceTopology::PerNode,
                        service_annotations: vec![(
                            "example.com/node".into(),
                            "{shard}-{node}".into(),
                        )],
                        ..ExternalAccess::default()
                    }),
                ),
                observed: Observed {
                    services: node_services(2, 1, |shard, node| {
                        vec![Ingress::Ip(ipv4(
                            198,
                            51,
                            101,
                            (shard * 8 + node + 1) as u8,
                        ))]
                    }),
                    pods: pods(2, 1),
                    gateway: None,
                    valkey: None,
                },
                other_clusters: Vec::new(),
                pinned_elsewhere: Vec::new(),
            },
        };
        let gateway = GoldenCase {
            input: Input {
                credentials: Default::default(),
                cluster: cluster(
                    "golden-gateway",
                    2,
                    1,
                    Some(ExternalAccess {
                        service_type: ServiceType::ClusterIp,
                        gateway: Some(Gateway {
                            name: "valkey".into(),
                            section_name: None,
                            base_port: 7000,
                        }),
                        ..ExternalAccess::default()
                    }),
                ),
                observed: Observed {
                    services: Vec::new(),
                    pods: pods(2, 1),
                    gateway: Some(GatewayFound::Found(ObservedGateway {
                        listeners: (0..4)
                            .map(|i| Listener {
                                name: format!("valkey-{i}"),
                                port: 7000 + i,
                                protocol: ListenerProtocol::Tcp,
                            })
                            .collect(),
                        addresses: vec![Ingress::Ip(ipv4(203, 0, 113, 10))],
                    })),
                    valkey: None,
                },
                other_clusters: Vec::new(),
                pinned_elsewhere: Vec::new(),
            },
        };
        let internal = GoldenCase {
            input: Input {
                credentials: Default::default(),
                cluster: cluster("golden-internal", 1, 0, None),
                observed: Observed::default(),
                other_clusters: Vec::new(),
                pinned_elsewhere: Vec::new(),
            },
        };
        Golden {
            cases: vec![nodeport, lb, per_node, gateway, internal],
            invalid: cluster("golden-invalid", 0, -1, None),
        }
    }

    /// The builtin set with every cluster renamed `name` (tests use this to
    /// drive a module whose behaviour depends on the name).
    pub fn renamed(name: &str) -> Golden {
        let mut g = Golden::builtin();
        for c in &mut g.cases {
            c.input.cluster.name = name.into();
        }
        g.invalid.name = name.into();
        g
    }
}

/// Checks one answer for a valid golden case. The error says which
/// invariant broke.
pub fn check_desired(case: &GoldenCase, desired: &Desired) -> Result<(), String> {
    let cluster = &case.input.cluster;
    let shards = cluster.shards.max(0) as u32;
    let replicas = cluster.replicas.max(0) as u32;

    // One node object per (shard, node) of the spec, and nothing else.
    let mut seen = BTreeSet::new();
    for n in &desired.nodes {
        if n.shard >= shards || n.node > replicas {
            return Err(format!(
                "node object {} (shard {}, node {}) is outside the spec's {shards} shards x {} nodes",
                n.name,
                n.shard,
                n.node,
                replicas + 1
            ));
        }
        if !seen.insert((n.shard, n.node)) {
            return Err(format!(
                "more than one node object for shard {} node {}",
                n.shard, n.node
            ));
        }
        // Every announce key, each exactly once.
        for key in ANNOUNCE_KEYS {
            let count = n.announce.iter().filter(|(k, _)| k == key).count();
            if count != 1 {
                return Err(format!(
                    "node {} announces {key:?} {count} times (want exactly once)",
                    n.name
                ));
            }
        }
    }
    let want = (shards * (replicas + 1)) as usize;
    if seen.len() != want {
        return Err(format!(
            "{} node objects for a spec of {shards} shards x {} nodes (want {want})",
            seen.len(),
            replicas + 1
        ));
    }

    // Every Service port maps to exactly one node of its shard; a node's
    // own Service has only that node's.
    for svc in &desired.services {
        if let Some(node) = svc.node
            && svc.ports.iter().any(|p| p.node != node)
        {
            return Err(format!(
                "Service {} is node {node}'s but has a port for another node",
                svc.name
            ));
        }
        let mut ports = BTreeSet::new();
        for p in &svc.ports {
            if !ports.insert(p.name.as_str()) {
                return Err(format!("Service {} has port {} twice", svc.name, p.name));
            }
            match names::parse_port_name(&p.name) {
                Some(i) if i == p.node => {}
                _ => {
                    return Err(format!(
                        "Service {} port {:?} does not name its node {} (want {:?})",
                        svc.name,
                        p.name,
                        p.node,
                        names::port_name(p.node)
                    ));
                }
            }
            if !seen.contains(&(svc.shard, p.node)) {
                return Err(format!(
                    "Service {} port {} points at shard {} node {}, which has no node object",
                    svc.name, p.name, svc.shard, p.node
                ));
            }
        }
    }
    // Nothing observed comes from the other topology, so no switch is under
    // way: one Service per shard, or one per node.
    if let Some(ea) = cluster.external_access.as_ref().filter(|e| e.enabled) {
        let (want, per) = match ea.topology {
            ServiceTopology::PerShard => (shards as usize, "shard"),
            ServiceTopology::PerNode => (want, "node"),
        };
        let of_kind = desired
            .services
            .iter()
            .filter(|s| s.node.is_some() == (ea.topology == ServiceTopology::PerNode))
            .count();
        if desired.services.len() != want || of_kind != want {
            return Err(format!(
                "{} Services ({of_kind} of them one per {per}) with external access on; want \
                 {want}, one per {per}",
                desired.services.len()
            ));
        }
        check_routes(ea.gateway.is_some(), desired, &seen)?;
    }
    Ok(())
}

/// With a gateway, one route per node, each on its own listener port and
/// to a Service the answer wants; without one, no route.
fn check_routes(
    gateway: bool,
    desired: &Desired,
    nodes: &BTreeSet<(u32, u32)>,
) -> Result<(), String> {
    if !gateway {
        return match desired.routes.first() {
            Some(r) => Err(format!("route {} without a gateway", r.name)),
            None => Ok(()),
        };
    }
    let mut routed = BTreeSet::new();
    let mut ports = BTreeSet::new();
    for r in &desired.routes {
        if !nodes.contains(&(r.shard, r.node)) || !routed.insert((r.shard, r.node)) {
            return Err(format!(
                "route {} is for shard {} node {}, which has no node object or another route",
                r.name, r.shard, r.node
            ));
        }
        if !ports.insert(r.port) {
            return Err(format!("route {} shares listener port {}", r.name, r.port));
        }
        if !desired.services.iter().any(|s| s.name == r.service) {
            return Err(format!(
                "route {} forwards to Service {}, which the answer does not want",
                r.name, r.service
            ));
        }
    }
    if routed.len() != nodes.len() {
        return Err(format!(
            "{} routes for {} nodes with a gateway",
            routed.len(),
            nodes.len()
        ));
    }
    Ok(())
}

/// Whether `validate`'s answer for the invalid golden spec refuses it and
/// names a field.
pub fn check_refusal(violations: &[shardgate_contract::model::Violation]) -> Result<(), String> {
    if violations
        .iter()
        .any(|v| v.severity == Severity::Error && !v.field.trim().is_empty())
    {
        Ok(())
    } else {
        Err(format!(
            "validate accepted an invalid spec (0 shards, -1 replicas) or named no field: {violations:?}"
        ))
    }
}
