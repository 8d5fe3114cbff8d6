//! The external Services: one per shard (a port per node) or one per node
//! (`topology: PerNode`), and both while a switch between them is under
//! way.

use crate::endpoints::{self, Index};
use crate::layout::Layout;
use shardgate_contract::model::{
    ExternalAccess, HostnameScope, Pair, ServicePort, ServiceTopology, ServiceType, ShardService,
};
use shardgate_contract::names;
pub use shardgate_contract::ports::pinned;

/// What a Service's annotation templates may name.
pub const TEMPLATE_SHARD: &str = "{shard}";
/// The hostnames the Service serves, comma-separated.
pub const TEMPLATE_HOSTNAME: &str = "{hostname}";
/// A node's index: only meaningful with one Service per node
/// (`topology: PerNode`); refused otherwise.
pub const TEMPLATE_NODE: &str = "{node}";

/// The external Services wanted: those of the spec's topology, and, while
/// some node is still reached through the other topology's Service
/// (`keep_old`), the other topology's Services that still exist, so no
/// client loses its endpoint before the new one is announced.
pub fn services(
    cluster: &str,
    ea: &ExternalAccess,
    index: &Index<'_>,
    layout: &Layout,
    spec_nodes: u32,
    keep_old: bool,
) -> Vec<ShardService> {
    let mut out = of_topology(cluster, ea, ea.topology, index, layout, spec_nodes);
    if keep_old {
        let old = ea.topology.other();
        out.extend(
            of_topology(cluster, ea, old, index, layout, spec_nodes)
                .into_iter()
                .filter(|s| exists(index, s)),
        );
        out.sort_by(|a, b| a.name.cmp(&b.name));
    }
    out
}

fn exists(index: &Index<'_>, s: &ShardService) -> bool {
    match s.node {
        None => index.service(s.shard).is_some(),
        Some(node) => index.node_service(s.shard, node).is_some(),
    }
}

fn of_topology(
    cluster: &str,
    ea: &ExternalAccess,
    topology: ServiceTopology,
    index: &Index<'_>,
    layout: &Layout,
    spec_nodes: u32,
) -> Vec<ShardService> {
    match topology {
        ServiceTopology::PerShard => shard_services(cluster, ea, index, layout, spec_nodes),
        ServiceTopology::PerNode => node_services(cluster, ea, index, layout, spec_nodes),
    }
}

/// One Service per node of the layout, with the single port `vk-n<node>`
/// on 6379 targeting the node's container port of that name. Pins and
/// kept NodePorts as for [`shard_services`].
pub fn node_services(
    cluster: &str,
    ea: &ExternalAccess,
    index: &Index<'_>,
    layout: &Layout,
    spec_nodes: u32,
) -> Vec<ShardService> {
    let mut out = Vec::with_capacity(layout.len());
    for (shard, nodes) in layout.shards() {
        for &node in nodes {
            out.push(ShardService {
                shard,
                node: Some(node),
                name: names::node_service(cluster, shard, node),
                service_type: ea.service_type,
                external_traffic_policy: ea.external_traffic_policy,
                ports: vec![ServicePort {
                    node,
                    name: names::port_name(node),
                    port: endpoints::service_port(ServiceTopology::PerNode, node),
                    node_port: node_port(
                        ea,
                        index,
                        ServiceTopology::PerNode,
                        spec_nodes,
                        shard,
                        node,
                    ),
                }],
                annotations: annotations(ea, shard, Some(node), &[node]),
                ..load_balancer_settings(ea)
            });
        }
    }
    out
}

/// A Service with nothing but the spec's load-balancer settings, which
/// apply to LoadBalancer Services only.
fn load_balancer_settings(ea: &ExternalAccess) -> ShardService {
    let load_balancer = ea.service_type == ServiceType::LoadBalancer;
    ShardService {
        shard: 0,
        node: None,
        name: String::new(),
        service_type: ea.service_type,
        external_traffic_policy: ea.external_traffic_policy,
        ports: Vec::new(),
        annotations: Vec::new(),
        load_balancer_source_ranges: if load_balancer {
            ea.load_balancer_source_ranges.clone()
        } else {
            Vec::new()
        },
        load_balancer_class: ea.load_balancer_class.clone().filter(|_| load_balancer),
        allocate_load_balancer_node_ports: ea
            .allocate_load_balancer_node_ports
            .filter(|_| load_balancer),
    }
}

/// The NodePort to ask for: the pinned one, else the one allocated to this
/// node's port on its Service of `topology` (0: allocate). The old
/// topology's Services are never pinned: a pinned port stays with the
/// Service that holds it until that Service goes.
fn node_port(
    ea: &ExternalAccess,
    index: &Index<'_>,
    topology: ServiceTopology,
    spec_nodes: u32,
    shard: u32,
    node: u32,
) -> u32 {
    if ea.service_type == ServiceType::ClusterIp {
        return 0;
    }
    ea.node_ports
        .as_ref()
        .filter(|_| topology == ea.topology)
        .and_then(|p| pinned(p, spec_nodes, shard, node))
        .unwrap_or_else(|| index.node_port(topology, shard, node))
}

/// One Service per shard of the layout with one port per node, in node
/// order. Port `i` is named `vk-n<i>`, listens on `6379 + i` and targets the
/// container port of the same name, which only node `i`'s pod declares.
/// A pinned NodePort (`nodePorts`) is asked for; otherwise an allocated
/// one is kept, matched by port name.
pub fn shard_services(
    cluster: &str,
    ea: &ExternalAccess,
    index: &Index<'_>,
    layout: &Layout,
    spec_nodes: u32,
) -> Vec<ShardService> {
    layout
        .shards()
        .map(|(shard, nodes)| ShardService {
            shard,
            node: None,
            name: names::shard_service(cluster, shard),
            service_type: ea.service_type,
            external_traffic_policy: ea.external_traffic_policy,
            ports: nodes
                .iter()
                .map(|&node| ServicePort {
                    node,
                    name: names::port_name(node),
                    port: endpoints::service_port(ServiceTopology::PerShard, node),
                    node_port: node_port(
                        ea,
                        index,
                        ServiceTopology::PerShard,
                        spec_nodes,
                        shard,
                        node,
                    ),
                })
                .collect(),
            annotations: annotations(ea, shard, None, nodes),
            ..load_balancer_settings(ea)
        })
        .collect()
}

/// The hostnames shard `shard`'s Service serves: the shard's, or each
/// node's with `hostnameScope: Node`; none without a domain.
pub fn hostnames(ea: &ExternalAccess, shard: u32, nodes: &[u32]) -> Vec<String> {
    let Some(domain) = ea.domain.as_deref() else {
        return Vec::new();
    };
    match ea.hostname_scope {
        HostnameScope::Shard => vec![names::announce_hostname(&ea.hostname_prefix, shard, domain)],
        HostnameScope::Node => nodes
            .iter()
            .map(|&n| names::node_hostname(&ea.hostname_prefix, shard, n, domain))
            .collect(),
    }
}

/// The Service's annotations: the user's, with `{shard}`, `{node}` (a
/// node's own Service) and `{hostname}` filled in, and external-dns's
/// hostname annotation when asked for (the user's own value for that key
/// wins). Sorted by key.
fn annotations(ea: &ExternalAccess, shard: u32, node: Option<u32>, nodes: &[u32]) -> Vec<Pair> {
    let hostnames = hostnames(ea, shard, nodes).join(",");
    let mut out: Vec<Pair> = ea
        .service_annotations
        .iter()
        .map(|(k, v)| {
            let mut v = v
                .replace(TEMPLATE_SHARD, &shard.to_string())
                .replace(TEMPLATE_HOSTNAME, &hostnames);
            if let Some(node) = node {
                v = v.replace(TEMPLATE_NODE, &node.to_string());
            }
            (k.clone(), v)
        })
        .collect();
    if ea.external_dns
        && !hostnames.is_empty()
        && !out.iter().any(|(k, _)| k == names::EXTERNAL_DNS_HOSTNAME)
    {
        out.push((names::EXTERNAL_DNS_HOSTNAME.to_string(), hostnames));
    }
    out.sort();
    out.dedup_by(|a, b| a.0 == b.0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardgate_contract::model::NodePorts;

    #[test]
    fn pins_follow_the_base_formula_or_the_list_and_spare_departing_nodes() {
        let base = NodePorts {
            base: Some(30100),
            ports: vec![],
        };
        let list = NodePorts {
            base: None,
            ports: vec![vec![31000, 31001], vec![31010]],
        };
        // (pins, nodes per shard in the spec, shard, node) => port
        for (pins, spec_nodes, shard, node, want) in [
            (&base, 2, 0, 0, Some(30100)),
            (&base, 2, 0, 1, Some(30101)),
            (&base, 2, 1, 0, Some(30102)),
            (&base, 2, 2, 1, Some(30105)),
            (&base, 2, 0, 2, None), // departing: keeps its own
            (&list, 2, 0, 1, Some(31001)),
            (&list, 2, 1, 0, Some(31010)),
            (&list, 2, 1, 1, None), // not listed: allocated
            (&list, 2, 5, 0, None),
        ] {
            assert_eq!(
                pinned(pins, spec_nodes, shard, node),
                want,
                "{pins:?} {spec_nodes} ({shard}, {node})"
            );
        }
        let huge = NodePorts {
            base: Some(u32::MAX),
            ports: vec![],
        };
        assert_eq!(pinned(&huge, 2, 1, 0), None, "no overflow");
    }

    #[test]
    fn annotations_fill_templates_and_external_dns_names_every_hostname() {
        let mut ea = ExternalAccess {
            domain: Some("example.com".into()),
            service_annotations: vec![
                ("lb.example.com/name".into(), "shard-{shard}".into()),
                ("z.example.com/hosts".into(), "{hostname}".into()),
            ],
            external_dns: true,
            ..ExternalAccess::default()
        };
        let a = annotations(&ea, 2, None, &[0, 1]);
        assert_eq!(
            a,
            vec![
                (
                    names::EXTERNAL_DNS_HOSTNAME.to_string(),
                    "shard-2.example.com".to_string()
                ),
                ("lb.example.com/name".into(), "shard-2".into()),
                ("z.example.com/hosts".into(), "shard-2.example.com".into()),
            ]
        );
        ea.hostname_scope = HostnameScope::Node;
        let a = annotations(&ea, 2, None, &[0, 1]);
        assert_eq!(a[0].1, "shard-2-0.example.com,shard-2-1.example.com");
        // The user's own external-dns value wins; no domain, no hostname.
        ea.service_annotations = vec![(names::EXTERNAL_DNS_HOSTNAME.into(), "mine".into())];
        assert_eq!(annotations(&ea, 0, None, &[0])[0].1, "mine");
        ea.service_annotations.clear();
        ea.domain = None;
        assert!(annotations(&ea, 0, None, &[0]).is_empty());
    }
}
